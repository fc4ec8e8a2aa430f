"""The pipeline's stages, each declared once (:data:`REGISTRY`): its order, Airflow task id,
description, entry point, whether it needs Spark, and the tables it reads and writes.

The runner, the command line, the DAG, the benchmarks, the docs' lineage table and the tests
read it. Only the standard library is imported here, so the DAG file can read it when Airflow
parses it; a stage's module is imported when the stage runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import cast

from jobs.common.records import StageRecord

LANDING_TABLES: tuple[str, ...] = ("follows", "events", "views")
"""The landing tables ``ingest`` reads, each into ``clean/<table>`` and ``quarantine/<table>``."""

REQUIRED_LANDING: tuple[str, ...] = ("events", "views")
"""Landing folders every day needs; ``follows`` is needed only when there is no previous day's
graph to apply a change log to (jobs/common/readiness.py)."""

WAIT_TASK_ID = "wait_for_landing"
"""The ``feeds_daily`` task that waits for a day's landing before ``ingest``."""

PUBLISHED_ASSET = "feedpipe_published_feeds"
"""The Airflow Asset the ``publish`` task updates: a DAG scheduled on it runs after every day
that is published (``dags/feeds_consumer_example.py``)."""


def published_asset_uri(warehouse: str) -> str:
    """The asset's URI: the warehouse's ``manifests/`` folder, where published days are named
    (``s3://bucket/prefix/manifests`` or ``file:///abs/path/manifests``)."""
    if "://" in warehouse:
        scheme, rest = warehouse.split("://", 1)
        return f"{'s3' if scheme == 's3a' else scheme}://{rest.rstrip('/')}/manifests"
    return f"file://{os.path.abspath(warehouse)}/manifests"


@dataclass(frozen=True)
class Stage:
    """One stage of a day, declared once: the runner, the command line, the DAG, the bench,
    the docs' lineage table and the tests read it.

    ``reads``, ``earlier`` and ``writes`` name tables as ``layer/table`` (``landing/<table>``:
    the landing files): the tables it reads of its own day, those it reads of earlier days
    (the previous graph, the trailing window, the previous feeds) and those it writes. The
    runner refuses a run that reads or writes a table the stage does not declare
    (:func:`jobs.stages.runner.undeclared`)."""

    name: str
    task_id: str
    """The task id in the ``feeds_daily`` DAG (``verb_object``); Airflow history keys on it."""
    description: str
    """One line, for ``feedpipe STAGE --help`` and the docs."""
    run: str
    """``module:function`` of the stage's entry point, imported when the stage runs (the DAG
    file reads this module at parse time and must not import Spark)."""
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    earlier: tuple[str, ...] = ()
    spark: bool = True
    """Whether it needs a Spark session (``publish`` reads Parquet footers only)."""
    reports: bool = False
    """Whether the day's report (``reports/ds=D/index.html``) is written again after it."""
    recorded: bool = True
    """Whether it leaves a record in the day's ledger (``publish`` leaves the manifest)."""
    options: tuple[str, ...] = ()
    """The run options it takes beyond the day (``full_refresh``)."""
    retried: bool = True
    """Whether the DAG retries a failed task (a failed expectation is not transient)."""
    command: tuple[str, ...] = ()
    """Its verb on the command line, when not its name (``store load``)."""
    needs: str = ""
    """A setting it runs only when set (``store``: the feed store); ``feedpipe run`` and the
    DAG leave it out otherwise."""

    @property
    def argv(self) -> tuple[str, ...]:
        """Its command line before ``--ds D``: ``feedpipe <argv> --ds D`` runs it."""
        return self.command or (self.name,)

    @property
    def landing(self) -> tuple[str, ...]:
        """The landing tables it reads (the runner checks they have arrived first)."""
        return tuple(t.split("/", 1)[1] for t in self.reads if t.startswith("landing/"))

    def entry(self) -> Callable[..., StageRecord]:
        module, function = self.run.split(":")
        return cast("Callable[..., StageRecord]", getattr(import_module(module), function))


_CLEAN = ("clean/follows", "clean/events", "clean/views", "clean/topics", "clean/topic_events")
_COUNTS = ("clean/event_counts", "clean/view_counts")
_RATES = ("rates/producer_rates", "rates/consumer_rates")
_PLAN = ("plan/edge_plan", "plan/views", "plan/view_members", "plan/consumer_sources")
_FEEDS = ("feeds/producer_feed", "feeds/view_feed", "feeds/consumer_feed", "feeds/event_store")
_QUARANTINE = tuple(f"quarantine/{t}" for t in (*LANDING_TABLES, "topics"))

REGISTRY: tuple[Stage, ...] = (
    Stage(
        "ingest",
        "ingest_landing",
        "landing files of one day -> clean tables + quarantine",
        "jobs.stages.ingest:run",
        reads=tuple(f"landing/{t}" for t in (*LANDING_TABLES, "topics")),
        # the graph a change log applies to, the topics in force, the events already shown
        earlier=("clean/follows", "clean/topics", "feeds/producer_feed"),
        writes=(*_CLEAN, *_COUNTS, *_QUARANTINE),
    ),
    Stage(
        "rates",
        "estimate_rates",
        "producer and consumer rates over the trailing window",
        "jobs.stages.rates:run",
        # a day ingested without its counts is counted from its clean rows
        reads=("clean/follows", *_COUNTS, "clean/events", "clean/views"),
        earlier=(*_COUNTS, "clean/events", "clean/views", *_RATES),
        writes=_RATES,
    ),
    Stage(
        "plan",
        "plan_views",
        "cost every strategy, serve one: edge plan, sources, views",
        "jobs.stages.plan:run",
        reads=("clean/follows", *_RATES),
        # the current plan and the parts it was planned in, for the hysteresis band
        earlier=("plan/edge_plan", "plan/part_plans"),
        writes=(*_PLAN, "plan/plan_cost", "plan/part_plans"),
        reports=True,
        options=("full_refresh",),
    ),
    Stage(
        "materialize",
        "materialize_feeds",
        "producer, view and consumer feeds as of the end of the day",
        "jobs.stages.materialize:run",
        reads=("clean/events", "clean/topic_events", "plan/edge_plan", "plan/view_members"),
        # incremental: the previous feeds and plan; in full: every day's events
        earlier=(
            "feeds/producer_feed",
            "feeds/consumer_feed",
            "feeds/event_store",
            "plan/edge_plan",
            "clean/events",
            "clean/topic_events",
        ),
        writes=_FEEDS,
        reports=True,
        options=("full_refresh",),
    ),
    Stage(
        "validate",
        "validate_tables",
        "Great Expectations suites over the day's tables",
        "jobs.stages.validate:run",
        reads=(
            *_CLEAN,
            *_COUNTS,
            *_QUARANTINE[: len(LANDING_TABLES)],  # the row accounting of the landing tables
            *_RATES,
            "plan/edge_plan",
            "plan/plan_cost",
            *_FEEDS,
        ),
        writes=(),
        reports=True,
        retried=False,
    ),
    Stage(
        "publish",
        "publish_day",
        "write the manifest and mark the day complete",
        "jobs.stages.publish:run",
        reads=(*_CLEAN, *_QUARANTINE, *_RATES, *_PLAN, "plan/plan_cost", *_FEEDS),
        writes=(),
        spark=False,
        reports=True,
        recorded=False,
    ),
    Stage(
        "store",
        "load_store",
        "load the published day into the feed store and switch readers to it",
        "jobs.stages.store_load:load",
        reads=(
            "clean/topics",
            "feeds/producer_feed",
            "feeds/consumer_feed",
            "feeds/view_feed",
            "plan/consumer_sources",
            "plan/edge_plan",
            "plan/view_members",
            "rates/consumer_rates",
        ),
        writes=(),
        command=("store", "load"),
        needs="store",
    ),
)
"""The stages of a day, in the order they run (``../shared/DESIGN.md``, "Stages"): those
that make a day and publish it, then those that serve a published day."""

STAGES: tuple[str, ...] = tuple(s.name for s in REGISTRY)
PUBLISH = "publish"
"""The stage that publishes a day: the stages up to it make the day, those after it serve it."""
DAY_STAGES: tuple[str, ...] = STAGES[: STAGES.index(PUBLISH) + 1]
"""The stages a published day needs (``publish`` refuses a day one of them has not run for)."""
SPARK_STAGES: tuple[str, ...] = tuple(s.name for s in REGISTRY if s.spark and s.name in DAY_STAGES)
"""The Spark stages of a day (``bench.day`` times each)."""
TASK_IDS: dict[str, str] = {s.name: s.task_id for s in REGISTRY}
"""Each stage's task id in the ``feeds_daily`` DAG (``verb_object``)."""


def stage(name: str) -> Stage:
    """The stage called ``name``; an unknown name is an error."""
    for s in REGISTRY:
        if s.name == name:
            return s
    raise ValueError(f"unknown stage {name!r}; stages: {', '.join(STAGES)}")


@dataclass(frozen=True)
class Lineage:
    """Who writes one table and who reads it, of the same day and of later days."""

    writer: str
    """The stage that writes it, or ``landing`` (the landing files)."""
    readers: tuple[str, ...]
    later: tuple[str, ...]
    """The stages that read it of an earlier day than their own."""


def lineage() -> dict[str, Lineage]:
    """Every table a stage reads or writes, ``layer/table`` -> its :class:`Lineage`."""
    tables = sorted({t for s in REGISTRY for t in (*s.reads, *s.earlier, *s.writes)})
    writer = {t: s.name for s in REGISTRY for t in s.writes}
    return {
        t: Lineage(
            writer.get(t, "landing"),
            tuple(s.name for s in REGISTRY if t in s.reads),
            tuple(s.name for s in REGISTRY if t in s.earlier),
        )
        for t in tables
    }


def lineage_table() -> str:
    """:func:`lineage` as the Markdown table of docs/architecture.md, "Lineage"."""
    rows = ["| table | written by | read by (same day) | read by (a later day) |"]
    rows.append("|---|---|---|---|")
    for table, line in lineage().items():
        readers = ", ".join(f"`{r}`" for r in line.readers)
        later = ", ".join(f"`{r}`" for r in line.later)
        rows.append(f"| `{table}` | `{line.writer}` | {readers} | {later} |")
    return "\n".join(rows) + "\n"


def stages_from(name: str) -> tuple[str, ...]:
    """``name`` and the stages after it: what a run of stage ``name`` makes out of date."""
    return STAGES[STAGES.index(stage(name).name) :]


def in_order(chosen: tuple[str, ...]) -> tuple[str, ...]:
    """``chosen`` in pipeline order; an unknown name is an error."""
    unknown = [s for s in chosen if s not in STAGES]
    if unknown or not chosen:
        raise ValueError(f"stages must be among {', '.join(STAGES)}")
    return tuple(s for s in STAGES if s in chosen)

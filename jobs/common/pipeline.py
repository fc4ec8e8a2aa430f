"""The pipeline's stages: their order, their Airflow task ids and what each does.

The one place these are declared: the runner, the command line, the DAG, the benchmarks and
the tests import them. Only the standard library is imported here, so the DAG file can read
them when Airflow parses it.
"""

from __future__ import annotations

import os

STAGES: tuple[str, ...] = ("ingest", "rates", "plan", "materialize", "validate", "publish")
"""The stages of a day, in the order they run (``../shared/DESIGN.md``, "Stages")."""

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


SPARK_STAGES: tuple[str, ...] = STAGES[:-1]
"""The stages that need a Spark session (``publish`` reads Parquet footers only)."""

TASK_IDS: dict[str, str] = {
    "ingest": "ingest_landing",
    "rates": "estimate_rates",
    "plan": "plan_views",
    "materialize": "materialize_feeds",
    "validate": "validate_tables",
    "publish": "publish_day",
}
"""Each stage's task id in the ``feeds_daily`` DAG (``verb_object``)."""

DESCRIPTIONS: dict[str, str] = {
    "ingest": "landing files of one day -> clean tables + quarantine",
    "rates": "producer and consumer rates over the trailing window",
    "plan": "cost every strategy, serve one: edge plan, sources, views",
    "materialize": "producer, view and consumer feeds as of the end of the day",
    "validate": "Great Expectations suites over the day's tables",
    "publish": "write the manifest and mark the day complete",
}
"""One line per stage, for ``feedpipe STAGE --help``."""

REPORTED: tuple[str, ...] = ("plan", "materialize", "validate", "publish")
"""Stages after which the day's report (``reports/ds=D/index.html``) is written again."""


def stages_from(stage: str) -> tuple[str, ...]:
    """``stage`` and the stages after it: what a run of ``stage`` makes out of date."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    return STAGES[STAGES.index(stage) :]


def in_order(chosen: tuple[str, ...]) -> tuple[str, ...]:
    """``chosen`` in pipeline order; an unknown name is an error."""
    unknown = [s for s in chosen if s not in STAGES]
    if unknown or not chosen:
        raise ValueError(f"stages must be among {', '.join(STAGES)}")
    return tuple(s for s in STAGES if s in chosen)

"""Stage ``validate``: Great Expectations suites over the day's tables, run inside Spark, or
on the driver with its pandas engine on a small day (:data:`DRIVER_ROWS`).

Suites live in ``schemas/expectations/<name>.json``; each runs on a *check frame*: the table
itself, or the table with derived columns that turn a relational property into a column
expectation (feed order, edge coverage, row accounting, the cost gate). Writes
``quality/ds=D/results.json`` and Data Docs (``quality/ds=D/docs/index.html``). Any failed
expectation fails the stage, and ``publish`` refuses a day without passing results.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.common import ledger
from jobs.common.config import PURE_STRATEGIES, Settings
from jobs.common.errors import FeedpipeError
from jobs.common.storage import Storage
from jobs.common.tables import (
    DAILY_COUNTS,
    contract,
    contract_of,
    has_partition,
    partition_rows,
    read_partition,
    schemas_root,
)

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

KEPT_FRAMES = frozenset(
    {
        "rates.producer_rates",
        "rates.consumer_rates",
        "plan.edge_plan",
        "feeds.producer_feed",
        "feeds.consumer_feed",
        "feeds.view_feed",
    }
)
"""Check frames built with a join, kept (memory, else local disk) while their suite runs:
each of Great Expectations' metric queries would join again. The others, table scans and
feeds with one window, are read again by each query, which then reads only the columns it
checks and computes the window only where an expectation needs it (on a scale-1 day,
``clean.views``' suite took 12.2 s kept and 1.9 s not)."""


class ValidationFailed(FeedpipeError, RuntimeError):
    """At least one expectation failed; the message summarises which."""


def feed_order_check(feed: DataFrame, key: str) -> DataFrame:
    """Adds to each row of a feed keyed by ``key``:

    * ``order_ok``: ranks are 1..n without gaps and rank r+1 is older than rank r
      (created_at descending, ties by event_id descending);
    * ``rank_unique``: no other row of the feed has its rank (in rank order duplicates are
      neighbours, so the order's own window tells);
    * ``event_unique``: no other row of the feed has its event.

    Both uniqueness checks are windows partitioned on ``key`` (then on ``key, event_id``, a
    finer clustering the same partitions satisfy): one shuffle of the feed for all three.
    Great Expectations' compound-uniqueness expectation partitions by a struct of the
    columns instead, one more shuffle and sort of the whole feed for each."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(key).orderBy("rank")
    prev_at, prev_id = F.lag("created_at").over(w), F.lag("event_id").over(w)
    newer = (prev_at > F.col("created_at")) | (
        (prev_at == F.col("created_at")) & (prev_id > F.col("event_id"))
    )
    ok = (F.col("rank") == F.row_number().over(w)) & (prev_at.isNull() | newer)
    rank = F.col("rank")
    rank_unique = (F.lag("rank").over(w) != rank) | F.lag("rank").over(w).isNull()
    rank_unique &= (F.lead("rank").over(w) != rank) | F.lead("rank").over(w).isNull()
    same_event = Window.partitionBy(key, "event_id")
    return (
        feed.withColumn("order_ok", F.coalesce(ok, F.lit(False)))
        .withColumn("rank_unique", F.coalesce(rank_unique & rank.isNotNull(), F.lit(False)))
        .withColumn("event_unique", F.count(F.lit(1)).over(same_event) == 1)
    )


def in_store_check(feed: DataFrame, store: DataFrame, author: str = "producer_id") -> DataFrame:
    """Adds ``in_event_store`` to each feed row: the day's ``feeds/event_store`` has its
    event, with the same producer (the row's ``author`` column: a producer feed's
    ``author_id``, which a topic's rows differ in) and time, so every id a reader returns
    resolves to its content."""
    from pyspark.sql import functions as F

    found = store.select(
        "event_id",
        F.col("producer_id").alias("_store_producer"),
        F.col("created_at").alias("_store_at"),
    ).dropDuplicates(["event_id", "_store_producer", "_store_at"])
    same = (F.col("_store_producer") == F.col(author)) & (F.col("_store_at") == F.col("created_at"))
    return (
        feed.join(found, "event_id", "left")
        .withColumn("in_event_store", F.coalesce(same, F.lit(False)))
        .drop("_store_producer", "_store_at")
    )


def store_check(store: DataFrame) -> DataFrame:
    """Adds ``event_unique`` to each event store row: no other row has its event id."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    return store.withColumn(
        "event_unique", F.count(F.lit(1)).over(Window.partitionBy("event_id")) == 1
    )


def edge_coverage_check(follows: DataFrame, edge_plan: DataFrame) -> DataFrame:
    """One row per edge of graph or plan: ``plan_rows`` (plan rows for the edge, 0 if none)
    and ``in_graph`` (the edge is a current follow)."""
    from pyspark.sql import functions as F

    plan = edge_plan.groupBy("consumer_id", "producer_id").agg(
        F.count("*").alias("plan_rows"),
        F.first("mode").alias("mode"),
        F.first("source_id").alias("source_id"),
    )
    graph = follows.select("consumer_id", "producer_id", F.lit(True).alias("in_graph"))
    return graph.join(plan, ["consumer_id", "producer_id"], "full_outer").select(
        "consumer_id",
        "producer_id",
        F.coalesce("plan_rows", F.lit(0)).alias("plan_rows"),
        F.coalesce("in_graph", F.lit(False)).alias("in_graph"),
        F.coalesce("mode", F.lit("missing")).alias("mode"),
        "source_id",  # null for an edge the plan lost, and for a plan row without a source
    )


def rate_coverage_check(rates: DataFrame, graph_ids: DataFrame, id_col: str) -> DataFrame:
    """Rates with ``covers_graph`` false on rows for graph ids that have no rate."""
    from pyspark.sql import functions as F

    ids = graph_ids.select(id_col).distinct().withColumn("_g", F.lit(True))
    return (
        rates.withColumn("_r", F.lit(True))
        .join(ids, id_col, "full_outer")
        .withColumn("covers_graph", F.col("_r").isNotNull())
        .drop("_r", "_g")
    )


def cost_gate_check(plan_cost: DataFrame, auto: bool) -> DataFrame:
    """One row: how many strategies are marked chosen, the served cost and, under ``auto``,
    the cheaper of PushAll and PullAll; the cheapest strategy's cost and the day's certified
    lower bound, which no plan can go below (each cost with a 1e-9 relative tolerance for
    rounding)."""
    from pyspark.sql import functions as F

    pure = F.col("strategy").isin(*PURE_STRATEGIES)

    def tolerant(c: Column) -> Column:
        return c * F.lit(1 + 1e-9) + F.lit(1e-9)

    return plan_cost.agg(
        F.sum(F.col("chosen").cast("int")).alias("chosen_count"),
        F.max(F.when(F.col("chosen"), F.col("total_cost"))).alias("served_cost"),
        F.min(F.when(pure, F.col("total_cost"))).alias("min_pure"),
        F.min("total_cost").alias("cheapest"),
        F.max("lower_bound").alias("lower_bound"),
    ).select(
        F.coalesce("chosen_count", F.lit(0)).alias("chosen_count"),
        "served_cost",
        (tolerant(F.col("min_pure")) if auto else F.lit(None).cast("double")).alias(
            "min_pure_cost"
        ),
        tolerant(F.col("cheapest")).alias("cheapest_cost"),
        "lower_bound",
    )


def pushed_edge_check(consumer_feed: DataFrame, edge_plan: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    pushed = (
        edge_plan.where(F.col("mode") == "push")
        .select("consumer_id", F.col("producer_id").alias("stream_id"))
        .withColumn("pushed_edge", F.lit(True))
    )  # the stream an event came through: its author, or a topic
    return consumer_feed.join(pushed, ["consumer_id", "stream_id"], "left").withColumn(
        "pushed_edge", F.coalesce("pushed_edge", F.lit(False))
    )


def accounting_check(
    spark: SparkSession, wh: Storage, ds: dt.date, ingest: dict[str, Any]
) -> DataFrame:
    """Per landing table: rows_in (as read) vs clean + quarantined rows as written; and, for
    events and views, the clean rows against the sum of ingest's per-day counts
    (``clean_rows``, ``clean_counted``; null for follows), which the rates stage reads in
    place of the clean rows. ``clean/event_counts`` also counts each topic's matches (a topic
    is a producer): those are checked on their own row, ``topic_events``, against the rows of
    ``clean/topic_events`` (rows_in: the matches ingest counted), and the events row sums the
    accounts' counts only.

    For follows the clean table is the whole graph, so the accepted count comes from ingest.
    All written rows are counted in one Spark job (a few rows per landing table come back)."""
    counted = _written_counts(spark, wh, ds, ingest)
    rows: list[tuple[str, int, int, int | None, int | None]] = []
    for table, c in sorted(ingest["tables"].items()):
        n_clean = counted.get((table, "c"), 0) if table in DAILY_COUNTS else int(c["clean"])
        accounted = counted.get((table, "q"), 0) + n_clean
        if table in DAILY_COUNTS:  # no counts partition at all: a mismatch unless there are no rows
            n_counted = counted.get((table, "n"), 0)
            rows.append((table, int(c["rows_in"]), accounted, n_clean, n_counted))
        else:
            rows.append((table, int(c["rows_in"]), accounted, None, None))
    topics = ingest.get("topics") or {}
    if topics.get("matches") or counted.get(("topic_events", "c")):
        matched = counted.get(("topic_events", "c"), 0)
        rows.append(
            (
                "topic_events",
                int(topics.get("matches", 0)),
                matched,
                matched,
                counted.get(("topic_events", "n"), 0),
            )
        )
    schema = "table string, rows_in long, rows_accounted long, clean_rows long, clean_counted long"
    return spark.createDataFrame(rows, schema)


def _written_counts(
    spark: SparkSession, wh: Storage, ds: dt.date, ingest: dict[str, Any]
) -> dict[tuple[str, str], int]:
    """Rows as written, by (table, kind): ``q`` quarantined, ``c`` clean, ``n`` the sum of the
    per-day counts; the topics' matches and counts under ``topic_events`` (one Spark job)."""
    from functools import reduce

    from pyspark.sql import functions as F

    q = contract("quarantine", "rows")
    one = F.lit(1).cast("long").alias("n")
    topic_ids = None
    te_c = contract("clean", "topic_events")
    if has_partition(wh, te_c, ds) and has_partition(wh, contract("clean", "topics"), ds):
        topic_ids = read_partition(spark, wh, contract("clean", "topics"), ds).select(
            F.col("topic_id").alias("producer_id")
        )
        matched = read_partition(spark, wh, te_c, ds)
    written = []
    for table in sorted(ingest["tables"]):
        quarantined = read_partition(spark, wh, q, ds, table=table)
        written.append(quarantined.select(F.lit(table).alias("t"), F.lit("q").alias("k"), one))
        if table in DAILY_COUNTS:
            clean = read_partition(spark, wh, contract("clean", table), ds)
            written.append(clean.select(F.lit(table).alias("t"), F.lit("c").alias("k"), one))
            per_id = contract("clean", DAILY_COUNTS[table][0])
            if has_partition(wh, per_id, ds):
                n = read_partition(spark, wh, per_id, ds)
                if table == "events" and topic_ids is not None:  # topic ids are never accounts'
                    topic = n.join(F.broadcast(topic_ids), "producer_id", "left_semi")
                    written.append(
                        topic.select(F.lit("topic_events").alias("t"), F.lit("n").alias("k"), "n")
                    )
                    n = n.join(F.broadcast(topic_ids), "producer_id", "left_anti")
                written.append(n.select(F.lit(table).alias("t"), F.lit("n").alias("k"), "n"))
    if topic_ids is not None:
        written.append(matched.select(F.lit("topic_events").alias("t"), F.lit("c").alias("k"), one))
    return {
        (r["t"], r["k"]): int(r["n"])
        for r in reduce(lambda a, b: a.unionAll(b), written)
        .groupBy("t", "k")
        .agg(F.sum("n").alias("n"))
        .collect()  # at most three rows per landing table
    }


VOLUME_TABLES = ("events", "views")
"""Landing tables whose daily row counts the volume gates watch (follows, a change log, is
watched by the share of edges it changed instead)."""


def previous_manifests(wh: Storage, ds: dt.date, limit: int) -> list[dict[str, Any]]:
    """The manifests of up to ``limit`` published days before ``ds``, newest first."""
    out: list[dict[str, Any]] = []
    for day in reversed(wh.list_partitions(ledger.MANIFESTS)):
        if len(out) == limit:
            break
        if day < ds and ledger.is_published(wh, day) and wh.exists(*ledger.manifest_parts(day)):
            out.append(json.loads(wh.read_text(*ledger.manifest_parts(day))))
    return out


def _gate(
    gate: str,
    table: str,
    observed: float | None,
    reference: float | None,
    days: int,
    ratio: float | None,
    band: tuple[float, float],
    note: str = "",
) -> dict[str, Any]:
    """One gate's row: ``ratio`` within ``band`` passes; a null ratio is a gate that is off,
    ``note`` saying why."""
    lower, upper = band
    return {
        "gate": gate,
        "table": table,
        "observed": observed,
        "reference": reference,
        "days": days,
        "ratio": ratio,
        "lower": lower,
        "upper": upper,
        "passed": None if ratio is None else lower <= ratio <= upper,
        "accepted": False,
        "note": note,
    }


def too_little_history(days: int, settings: Settings, which: str = "") -> str:
    """Why a gate judged against the previous published days is off."""
    return (
        f"off: {days} previous published day(s){which}, the gate needs "
        f"{settings.volume_min_days} (volume_min_days)"
    )


def volume_gate(
    table: str, today: int, past: list[int], settings: Settings, allowed: bool = False
) -> dict[str, Any]:
    """A table's rows read today (a header-only file counts 0) against the median of ``past``
    (the previous published days', newest first): within ``[volume_low, volume_high]`` times
    it. Off (``passed`` null) with fewer than ``volume_min_days`` days, a median of 0, or a
    table run as empty on purpose (``allowed``)."""
    import statistics

    median = statistics.median(past) if past else None
    note = ""
    if allowed:
        note = "off: the table ran as empty on purpose (allow_empty)"
    elif len(past) < settings.volume_min_days:
        note = too_little_history(len(past), settings)
    elif not median:
        note = "off: the previous published days' median is 0"
    ratio = today / median if not note and median else None
    return _gate(
        "volume",
        table,
        float(today),
        float(median) if median is not None else None,
        len(past),
        ratio,
        (settings.volume_low, settings.volume_high),
        note,
    )


def follow_removed_gate(follows: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The share of the previous day's follow edges that the day removed, at most
    ``max_follow_removed`` (a broken export that drops much of the graph); off on a day
    without a previous graph."""
    before = follows.get("edges_before")
    share = follows["edges_removed"] / before if before else None
    return _gate(
        "follow_removed",
        "follows",
        share,
        float(before) if before is not None else None,
        1 if before is not None else 0,
        share,
        (0.0, settings.max_follow_removed),
        "" if share is not None else "off: no follow graph the day before",
    )


def follow_added_gate(
    follows: dict[str, Any], past: list[float], settings: Settings
) -> dict[str, Any]:
    """The share of edges the day added (over the previous day's edges) against the median
    share of ``past`` days (the graph's own history): at most ``follow_added_high`` times it.
    A young or fast-growing graph adds much every day and passes; a day that adds far more
    than the graph ever did (two exports merged, another graph landed) does not. Off with
    fewer than ``volume_min_days`` past days, a median of 0 or ``follow_added_high`` 0."""
    import statistics

    before = follows.get("edges_before")
    share = follows["edges_added"] / before if before else None
    median = statistics.median(past) if past else None
    note = ""
    if share is None:
        note = "off: no follow graph the day before"
    elif not settings.follow_added_high:
        note = "off: follow_added_high is 0"
    elif len(past) < settings.volume_min_days:
        note = too_little_history(len(past), settings, " with a graph the day before")
    elif not median:
        note = "off: the previous published days added no edges"
    ratio = share / median if not note and share is not None and median else None
    return _gate(
        "follow_added",
        "follows",
        share,
        median,
        len(past),
        ratio,
        (0.0, settings.follow_added_high),
        note,
    )


def gates(
    settings: Settings, ds: dt.date, wh: Storage, ingest: dict[str, Any]
) -> list[dict[str, Any]]:
    """The day's gates (docs/data-contracts.md, "Volume gates"), one row each: a
    :func:`volume_gate` per table of ``VOLUME_TABLES`` over up to ``volume_days`` previous
    published days (those that ran the table as empty on purpose left out), and the follow
    gates (:func:`follow_removed_gate`, :func:`follow_added_gate`). Gates of a kind named in
    ``accept_gates`` are kept with ``accepted`` true. Reads a few small JSON files, no Spark."""
    history = previous_manifests(wh, ds, settings.volume_days)
    allowed = set(ingest.get("allowed_empty", []))
    out = []
    for table in VOLUME_TABLES:
        past = [
            int(m["input"][table]["rows_in"])
            for m in history
            if table in m.get("input", {}) and table not in m.get("allowed_empty", [])
        ]
        today = int(ingest["tables"].get(table, {}).get("rows_in", 0))
        out.append(volume_gate(table, today, past, settings, table in allowed))
    follows = ingest["tables"].get("follows", {})
    added = [
        f["edges_added"] / f["edges_before"]
        for f in (m.get("input", {}).get("follows", {}) for m in history)
        if f.get("edges_before")
    ]
    out.append(follow_removed_gate(follows, settings))
    out.append(follow_added_gate(follows, added, settings))
    for g in out:
        kind = "volume" if g["gate"] == "volume" else "follows"
        if kind in settings.accept_gates:
            g["accepted"] = True
            g["note"] = (g["note"] + "; " if g["note"] else "") + (
                f"accepted for {ds} (accept_gates = {kind})"
            )
    return out


def gate_line(g: dict[str, Any], ds: dt.date | str) -> str:
    """Why a gate failed, in words and figures."""
    if g["gate"] == "volume":
        return (
            f"volume gate: {g['table']} has {g['observed']:,.0f} rows on {ds}, "
            f"{g['ratio']:.2f}x the median {g['reference']:,.0f} of the {g['days']} previous "
            f"published days (allowed {g['lower']:g}x to {g['upper']:g}x: volume_low, volume_high)"
        )
    if g["gate"] == "follow_added":
        return (
            f"follow gate: {g['observed']:.1%} of the follow edges were added on {ds}, "
            f"{g['ratio']:.2f}x the median share {g['reference']:.2%} of the {g['days']} previous "
            f"published days (allowed up to {g['upper']:g}x: follow_added_high)"
        )
    return (
        f"follow gate: {g['observed']:.1%} of the {g['reference']:,.0f} follow edges were "
        f"removed on {ds} (allowed up to {g['upper']:.0%}: max_follow_removed)"
    )


def failed_gates(day_gates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gates that failed and were not accepted for the day."""
    return [g for g in day_gates if g["passed"] is False and not g.get("accepted")]


GATES_SCHEMA = (
    "gate string, table string, observed double, reference double, days int, ratio double, "
    "lower double, upper double, passed boolean, accepted boolean, note string, holds boolean"
)
GATE_FIELDS = tuple(f.split()[0] for f in GATES_SCHEMA.split(", "))


def check_frames(
    spark: SparkSession,
    settings: Settings,
    ds: dt.date,
    wh: Storage,
    day_gates: list[dict[str, Any]] | None = None,
) -> dict[str, DataFrame]:
    """Each suite's check frame; ``day_gates``: the day's :func:`gates` (computed here when
    not given)."""

    tables = {name: read_partition(spark, wh, contract_of(name), ds) for name in CHECKED_TABLES}
    frames = table_checks(tables, settings.strategy == "auto")
    ingested = ledger.read_record(wh, ds, "ingest")
    if ingested is not None:
        frames["ingest.accounting"] = accounting_check(spark, wh, ds, ingested)
        if day_gates is None:
            day_gates = gates(settings, ds, wh, ingested)
        frames["ingest.gates"] = gates_frame(spark, day_gates)
    return frames


def table_checks(tables: dict[str, DataFrame], auto: bool) -> dict[str, DataFrame]:
    """The check frame of each table suite, from the day's tables (``layer/table`` keys, those
    of :data:`CHECKED_TABLES`); ``auto``: the served strategy is the cheapest one's."""
    from pyspark.sql import functions as F

    follows, edge_plan = tables["clean/follows"], tables["plan/edge_plan"]
    store = tables["feeds/event_store"]
    return {
        "clean.follows": follows.withColumn(
            "not_self", F.col("consumer_id") != F.col("producer_id")
        ),
        "clean.events": tables["clean/events"],
        "clean.views": tables["clean/views"],
        "rates.producer_rates": rate_coverage_check(
            tables["rates/producer_rates"], follows, "producer_id"
        ),
        "rates.consumer_rates": rate_coverage_check(
            tables["rates/consumer_rates"], follows, "consumer_id"
        ),
        "plan.edge_plan": edge_coverage_check(follows, edge_plan),
        "plan.plan_cost": cost_gate_check(tables["plan/plan_cost"], auto),
        "feeds.producer_feed": in_store_check(
            feed_order_check(tables["feeds/producer_feed"], "producer_id"), store, "author_id"
        ),
        "feeds.consumer_feed": in_store_check(
            pushed_edge_check(
                feed_order_check(tables["feeds/consumer_feed"], "consumer_id"), edge_plan
            ),
            store,
        ),
        "feeds.view_feed": in_store_check(
            feed_order_check(tables["feeds/view_feed"], "view_id"), store
        ),
        "feeds.event_store": store_check(store),
    }


def gates_frame(spark: SparkSession, day_gates: list[dict[str, Any]]) -> DataFrame:
    """The gates as the ``ingest.gates`` suite checks them: ``holds`` is false for a gate that
    failed and was not accepted."""
    rows = [
        tuple({**g, "holds": g not in failed_gates([g])}.get(f) for f in GATE_FIELDS)
        for g in day_gates
    ]
    return spark.createDataFrame(rows, GATES_SCHEMA)


CHECKED_TABLES = (
    "clean/follows",
    "clean/events",
    "clean/views",
    "rates/producer_rates",
    "rates/consumer_rates",
    "plan/edge_plan",
    "plan/plan_cost",
    "feeds/producer_feed",
    "feeds/consumer_feed",
    "feeds/view_feed",
    "feeds/event_store",
)
"""The tables :func:`table_checks` builds its frames from (the accounting and gate frames
are a few rows each)."""

DRIVER_ROWS = 200_000
"""A day whose tables that ``validate`` reads hold at most this many rows in all (their Parquet
footers say, before any query) has its check frames validated on the driver: each frame
collected (at most this many rows, a few MB) and checked by Great Expectations' pandas engine.
The same suites and verdicts as inside Spark, without the hundred-odd small Spark queries the
Spark engine runs for a day's 60 expectations (docs/operations.md, "Validation on the
driver")."""


def driver_frame(frame: DataFrame, limit: int) -> pd.DataFrame | None:
    """``frame`` on the driver as pandas, or None when it has more than ``limit`` rows (the
    collect is bounded: at most ``limit + 1`` rows reach the driver)."""
    rows = frame.limit(limit + 1).toPandas()
    return None if len(rows) > limit else rows


def input_rows(wh: Storage, ds: dt.date) -> int:
    """Rows of the day's tables that the check frames read, from their Parquet footers."""
    return sum(partition_rows(wh, contract_of(name), ds) for name in CHECKED_TABLES)


def load_suite(name: str) -> dict[str, Any]:
    path = schemas_root() / "expectations" / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))


def validate_frames(
    frames: dict[str, DataFrame],
    parameters: dict[str, Any],
    docs_dir: Path | None = None,
    keep: frozenset[str] = KEPT_FRAMES,
    driver_rows: int = 0,
    run_name: str | None = None,
) -> dict[str, Any]:
    """Run each frame's suite; returns {"success", "suites": {name: {...}}}. Pure of storage
    (Data Docs go to ``docs_dir`` when given, their runs named ``run_name``: the day). Frames
    named in ``keep`` are persisted while their suite runs; Great Expectations' own persisting
    of every batch is turned off.

    Suites run first without sample unexpected values (``partial_unexpected_count`` 0): for
    each expectation Great Expectations would otherwise scan the whole frame once more for 20
    unexpected rows, even when it has counted none. A suite that fails runs again with
    samples, so its results and Data Docs show examples of the rows that broke it."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from pyspark import StorageLevel

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    if docs_dir is not None:
        ctx.add_data_docs_site(
            site_name="feedpipe",
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": str(docs_dir),
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
    source = ctx.data_sources.add_spark("feedpipe", persist=False)
    on_driver = ctx.data_sources.add_pandas("feedpipe-driver")
    out: dict[str, Any] = {"success": True, "suites": {}, "engines": {}}
    for name, frame in sorted(frames.items()):
        spec = load_suite(name)
        suite = ctx.suites.add(
            gx.ExpectationSuite(name=name, expectations=spec["expectations"], meta=spec.get("meta"))
        )
        small = driver_frame(frame, driver_rows) if driver_rows else None
        where = source if small is None else on_driver
        batch_def = where.add_dataframe_asset(name).add_batch_definition_whole_dataframe("ds")
        vd = ctx.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch_def, suite=suite)
        )
        if small is not None:
            frame = small
        elif name in keep:
            frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        for samples in (0, 20):  # the second pass only for a failed suite
            checkpoint = ctx.checkpoints.add(
                gx.Checkpoint(
                    name=f"check_{name}_{samples}",
                    validation_definitions=[vd],
                    result_format={
                        "result_format": "SUMMARY",
                        "partial_unexpected_count": samples,
                    },
                )
            )
            result = checkpoint.run(
                batch_parameters={"dataframe": frame},
                expectation_parameters=parameters,
                run_id=RunIdentifier(run_name=run_name) if run_name else None,
            )
            (vr,) = result.run_results.values()
            if vr.success:
                break
        if small is None and name in keep:
            frame.unpersist()
        out["engines"][name] = "spark" if small is None else "driver"
        failed, checks = [], []
        for r in vr.results:
            cfg = r.expectation_config
            if cfg is None:
                continue
            kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
            checks.append({"expectation": cfg.type, "kwargs": kwargs, "success": bool(r.success)})
            if r.success:
                continue
            failed.append(
                {
                    "expectation": cfg.type,
                    "kwargs": {k: v for k, v in cfg.kwargs.items() if k != "batch_id"},
                    "unexpected_count": (r.result or {}).get("unexpected_count"),
                    "observed_value": (r.result or {}).get("observed_value"),
                    "sample": (r.result or {}).get("partial_unexpected_list"),
                }
            )
        out["suites"][name] = {
            "success": bool(vr.success),
            "expectations": len(vr.results),
            "failed": failed,
            "checks": checks,
        }
        out["success"] = out["success"] and bool(vr.success)
        log.info("suite %s: %s", name, "passed" if vr.success else f"FAILED {failed}")
    if docs_dir is not None:
        # one build of the whole site from the stored results; an UpdateDataDocsAction per
        # checkpoint rebuilt the index after every suite (33 page renders instead of 23)
        ctx.build_data_docs(site_names=["feedpipe"])
    return out


def _copy_tree(local: Path, wh: Storage, *dest: str) -> None:
    for path in sorted(local.rglob("*")):
        if path.is_file():
            rel = path.relative_to(local).as_posix()
            target = wh.path(*dest, rel)
            wh.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            with wh.fs.open_output_stream(target) as f:
                f.write(path.read_bytes())


SUMMARY_PAGE = "summary.html"
"""A self-contained page of the day's suites and gates in ``quality/ds=D/``: every
expectation with its outcome, readable without network access (Data Docs' pages load their
styles and scripts from CDNs)."""


def quality_summary(results: dict[str, Any]) -> str:
    """The day's :data:`SUMMARY_PAGE`, from its validation results."""
    from jobs.common.pages import gate_verdict, render

    suites = []
    for name, r in sorted(results["suites"].items()):
        failed = {
            (f["expectation"], json.dumps(f["kwargs"], sort_keys=True)): f for f in r["failed"]
        }
        rows = []
        for c in r.get("checks", []):
            f = failed.get((c["expectation"], json.dumps(c["kwargs"], sort_keys=True)), {})
            rows.append(
                {
                    "expectation": c["expectation"],
                    "kwargs": json.dumps(c["kwargs"], sort_keys=True, default=str),
                    "success": c["success"],
                    "unexpected": ""
                    if f.get("unexpected_count") is None
                    else f["unexpected_count"],
                    "sample": json.dumps(f.get("sample"), default=str) if f.get("sample") else "",
                }
            )
        suites.append((name, {"success": r["success"], "rows": rows}))
    return render(
        "quality_summary.html",
        ds=results.get("ds", ""),
        success=results["success"],
        suites=suites,
        expectations=sum(r["expectations"] for r in results["suites"].values()),
        failed=sum(len(r["failed"]) for r in results["suites"].values()),
        gates=[{**g, "verdict": gate_verdict(g)} for g in results.get("gates", [])],
    )


def summary(results: dict[str, Any]) -> str:
    """What failed, on one line: the failed gates in words and figures, then every other
    failed expectation."""
    ds = results.get("ds", "the day")
    lines = [gate_line(g, ds) for g in failed_gates(results.get("gates", []))]
    for name, r in results["suites"].items():
        if r["success"] or name == "ingest.gates":
            continue
        for f in r["failed"]:
            detail = (
                f"{f['unexpected_count']} unexpected"
                if f["unexpected_count"] is not None
                else f"observed {f['observed_value']}"
            )
            lines.append(f"{name}: {f['expectation']} {f['kwargs']} ({detail})")
    return "; ".join(lines)


def run(spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage) -> dict[str, Any]:
    from jobs.common.spark import UNCOMPRESSED_CACHE, scoped_conf

    with scoped_conf(spark, UNCOMPRESSED_CACHE, settings):  # the kept check frames
        return _run(spark, settings, ds, wh)


def _run(spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage) -> dict[str, Any]:
    ingested = ledger.read_record(wh, ds, "ingest")
    day_gates = gates(settings, ds, wh, ingested) if ingested is not None else []
    if failed_gates(day_gates):
        # the day's volume is already known to be wrong: its gates (and the row accounting)
        # are checked, not the tables built from it
        assert ingested is not None
        frames = {
            "ingest.accounting": accounting_check(spark, wh, ds, ingested),
            "ingest.gates": gates_frame(spark, day_gates),
        }
    else:
        frames = check_frames(spark, settings, ds, wh, day_gates)
    quality = ledger.quality_parts(ds)
    with tempfile.TemporaryDirectory(prefix="feedpipe-docs-") as tmp:
        small = input_rows(wh, ds) <= DRIVER_ROWS
        results = validate_frames(
            frames,
            {"feed_k": settings.feed_k},
            Path(tmp),
            driver_rows=DRIVER_ROWS if small else 0,
            run_name=ds.isoformat(),
        )
        wh.delete(*quality, "docs")
        # the site's static/ (fonts, images, styles: 4 MB) is not copied: its pages load their
        # styles and scripts from CDNs and refer to static/ for a favicon only
        shutil.rmtree(Path(tmp) / "static", ignore_errors=True)
        _copy_tree(Path(tmp), wh, *quality, "docs")
    results["ds"] = ds.isoformat()
    results["gates"] = day_gates
    wh.write_text(json.dumps(results, indent=2, default=str), *ledger.results_parts(ds))
    wh.write_text(quality_summary(results), *quality, SUMMARY_PAGE)
    if not results["success"]:
        raise ValidationFailed(
            f"validation failed for {ds}: {summary(results)} "
            f"(details: {wh.uri(*ledger.results_parts(ds))})"
        )
    return {
        "success": True,
        "suites": len(results["suites"]),
        "docs": wh.uri(*quality, "docs", "index.html"),
    }

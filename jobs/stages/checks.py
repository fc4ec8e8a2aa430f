"""The check frames of ``validate``'s suites: each table, or the table with derived columns
that turn a relational property into a column expectation (feed order and uniqueness, events
in the event store, pushed edges, edge and rate coverage, the cost gate, row accounting, the
gates), as Great Expectations checks them (``schemas/expectations/<suite>.json``).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from jobs.common import ledger
from jobs.common.config import PURE_STRATEGIES, Settings
from jobs.common.records import GateResult, IngestRecord
from jobs.common.storage import Storage
from jobs.common.tables import (
    DAILY_COUNTS,
    contract,
    contract_of,
    has_partition,
    partition_rows,
    read_partition,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

from jobs.stages.gates import gates

log = logging.getLogger(__name__)


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
    spark: SparkSession, wh: Storage, ds: dt.date, ingest: IngestRecord
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
    for table, c in sorted(ingest.tables.items()):
        n_clean = counted.get((table, "c"), 0) if table in DAILY_COUNTS else int(c.clean or 0)
        accounted = counted.get((table, "q"), 0) + n_clean
        if table in DAILY_COUNTS:  # no counts partition at all: a mismatch unless there are no rows
            n_counted = counted.get((table, "n"), 0)
            rows.append((table, c.rows_in, accounted, n_clean, n_counted))
        else:
            rows.append((table, c.rows_in, accounted, None, None))
    if ingest.topics.matches or counted.get(("topic_events", "c")):
        matched = counted.get(("topic_events", "c"), 0)
        rows.append(
            (
                "topic_events",
                ingest.topics.matches,
                matched,
                matched,
                counted.get(("topic_events", "n"), 0),
            )
        )
    schema = "table string, rows_in long, rows_accounted long, clean_rows long, clean_counted long"
    return spark.createDataFrame(rows, schema)


def _written_counts(
    spark: SparkSession, wh: Storage, ds: dt.date, ingest: IngestRecord
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
    for table in sorted(ingest.tables):
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
    day_gates: list[GateResult] | None = None,
) -> dict[str, DataFrame]:
    """Each suite's check frame; ``day_gates``: the day's :func:`gates` (computed here when
    not given)."""

    tables = {name: read_partition(spark, wh, contract_of(name), ds) for name in CHECKED_TABLES}
    frames = table_checks(tables, settings.strategy == "auto")
    ingested = ledger.read_record(wh, ds, "ingest")
    if isinstance(ingested, IngestRecord):
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


def gates_frame(spark: SparkSession, day_gates: list[GateResult]) -> DataFrame:
    """The gates as the ``ingest.gates`` suite checks them: ``holds`` is false for a gate that
    failed and was not accepted (:attr:`GateResult.holds`)."""
    rows = [tuple(getattr(g, f) for f in GATE_FIELDS) for g in day_gates]
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


def input_rows(wh: Storage, ds: dt.date) -> int:
    """Rows of the day's tables that the check frames read, from their Parquet footers."""
    return sum(partition_rows(wh, contract_of(name), ds) for name in CHECKED_TABLES)

"""Stage ``materialize``: the feed tables of day D, as of the end of D.

Reads ``clean/events`` (D; all days up to D on a full refresh), ``plan/edge_plan`` (D and
D-1) and the previous day's feeds. Writes, partitioned by ds:

* ``feeds/producer_feed``: latest k events per producer (ProducerPivoted), key (producer_id, rank);
* ``feeds/consumer_feed``: latest k events over each consumer's pushed producers
  (ConsumerPivoted), key (consumer_id, rank);
* ``feeds/view_feed``: latest k events per shared view, key (view_id, rank);
* ``feeds/event_store``: payload and attributes of every event in the day's producer feeds,
  key event_id, range-partitioned and sorted on it (:func:`event_store_full`).

Order everywhere: created_at descending, then event_id descending; rank 1 is the newest.

Incremental (default when D-1's state exists with the same k): producer feeds merge D-1's
feed with D's events; a consumer whose pushed producers are unchanged since D-1 merges its
D-1 feed with the day's *fresh* producer-feed entries of those producers (the push fan-out of
the day, bounded by k per producer); a consumer whose
push set changed (follow, unfollow, or an edge moved between push and pull) is refilled
from D's producer feeds. ``--full-refresh`` recomputes everything from clean events; both
give the same rows (tested).

Per-producer coherency: consumer feeds hold the k,t-diverse selection over each consumer's
pushed producers (:func:`consumer_feed_diverse`), chosen afresh each day from the day's
producer feeds since the diversity window moves with the day (docs/feeds.md).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from jobs.common import ledger
from jobs.common.config import Settings
from jobs.common.dates import recent_since
from jobs.common.records import MaterializeRecord
from jobs.common.storage import Storage
from jobs.common.tables import (
    contract,
    has_partition,
    partition_days,
    read_partition,
    read_partitions,
    write_partition,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def latest_k(df: DataFrame, key: str, k: int, unique: bool = False) -> DataFrame:
    """Keep the newest ``k`` rows per ``key`` (one row per event id), with ``rank`` 1..k.

    Rows carrying a ``priority`` column win duplicate event ids by the lowest priority.
    ``unique``: the caller guarantees one row per (``key``, event_id), so only the rank window
    runs: one shuffle and one sort, with Spark's per-group limit applied before the shuffle.
    Otherwise the rows are hash-partitioned by ``key`` first, which also clusters them by
    (``key``, event_id): the duplicate window and the rank window share that one shuffle."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(key).orderBy(F.col("created_at").desc(), F.col("event_id").desc())
    if unique:
        return df.withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= k)
    if "priority" not in df.columns:
        df = df.withColumn("priority", F.lit(0))
    df = df.repartition(key)
    w_dup = Window.partitionBy(key, "event_id").orderBy("priority", F.col("created_at").desc())
    deduped = df.withColumn("_n", F.row_number().over(w_dup)).where(F.col("_n") == 1)
    return (
        deduped.withColumn("rank", F.row_number().over(w))
        .where(F.col("rank") <= k)
        .drop("_n", "priority")
    )


def streams(events: DataFrame, topic_events: DataFrame) -> DataFrame:
    """Every producer's stream: ``producer_id`` (an account, or a topic), ``author_id``,
    ``event_id``, ``created_at`` (and ``ds`` when both inputs have it): an account's own
    events, and a topic's matching events (``clean/topic_events``) with their author kept."""
    from pyspark.sql import functions as F

    extra = ["ds"] if "ds" in events.columns and "ds" in topic_events.columns else []
    own = events.select(
        "producer_id", F.col("producer_id").alias("author_id"), "event_id", "created_at", *extra
    )
    matched = topic_events.select(
        F.col("topic_id").alias("producer_id"),
        F.col("producer_id").alias("author_id"),
        "event_id",
        "created_at",
        *extra,
    )
    return own.unionByName(matched)


def producer_feed_full(stream_rows: DataFrame, k: int) -> DataFrame:
    """Latest k per producer from all streams' rows (:func:`streams`, with ``ds``: the
    first arrival of a re-sent event id wins, as in the incremental path)."""
    from pyspark.sql import functions as F

    rows = stream_rows.select(
        "producer_id",
        "author_id",
        "event_id",
        "created_at",
        F.unix_date(F.col("ds")).alias("priority"),
    )
    return latest_k(rows, "producer_id", k)


def producer_feed_incremental(previous: DataFrame, stream_rows: DataFrame, k: int) -> DataFrame:
    from pyspark.sql import functions as F

    cols = ("producer_id", "author_id", "event_id", "created_at")
    rows = previous.select(*cols, F.lit(0).alias("priority")).unionByName(
        stream_rows.select(*cols, F.lit(1).alias("priority"))
    )
    return latest_k(rows, "producer_id", k)


def authored(producer_feed: DataFrame) -> DataFrame:
    """A producer feed's rows as feed items: ``stream_id`` (the producer or topic),
    ``producer_id`` (the event's author), ``event_id``, ``created_at``."""
    from pyspark.sql import functions as F

    return producer_feed.select(
        F.col("producer_id").alias("stream_id"),
        F.col("author_id").alias("producer_id"),
        "event_id",
        "created_at",
    )


def one_per_consumer_event(rows: DataFrame, key: str, k: int, shared: bool) -> DataFrame:
    """Latest k per ``key``; ``shared``: an event may come through two of its streams (its
    author and a topic), so it is kept once, through the smallest stream id."""
    from pyspark.sql import functions as F

    if not shared:
        return latest_k(rows, key, k, unique=True)
    return latest_k(rows.withColumn("priority", F.col("stream_id")), key, k)


def push_edges(edge_plan: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return edge_plan.where(F.col("mode") == "push").select("consumer_id", "producer_id")


def consumer_feed_full(
    producer_feed: DataFrame, pushed: DataFrame, k: int, shared: bool = False
) -> DataFrame:
    """Latest k over each consumer's pushed producers. Without topics (``shared`` false) one
    row per (consumer, event): a pushed edge is one plan row, a producer feed has an event
    once, and an event id has one producer (clean events are unique by event_id across
    days); with topics an event can arrive through its author and topics, and is kept once."""
    from pyspark.sql import functions as F

    rows = pushed.select("consumer_id", F.col("producer_id").alias("stream_id")).join(
        authored(producer_feed), "stream_id"
    )
    return one_per_consumer_event(rows, "consumer_id", k, shared)


def consumer_feed_diverse(
    producer_feed: DataFrame, pushed: DataFrame, k: int, k_p: int, recent_since: dt.datetime
) -> DataFrame:
    """Per-producer coherency (Feeding Frenzy 2.2, 3.2.1): each consumer's feed over its
    pushed producers is chosen from their latest ``k_p`` events each: first the newest event of
    every producer with an event since ``recent_since`` (newest first, at most k), then the
    newest of the rest, k in all; ranked by time. This is the reader's selection
    (``jobs.serving.reader.select_diverse``) restricted to pushed producers, which holds every
    pushed event the assembled feed can show (see docs/feeds.md)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pool = pushed.join(
        producer_feed.where(F.col("rank") <= k_p).select(
            "producer_id", "event_id", "created_at", F.col("rank").alias("_prank")
        ),
        "producer_id",
    ).withColumn("stream_id", F.col("producer_id"))  # no topics under this coherency
    first = (F.col("_prank") == 1) & (F.col("created_at") >= F.lit(recent_since))
    by_pick = Window.partitionBy("consumer_id").orderBy(
        first.desc(), F.col("created_at").desc(), F.col("event_id").desc()
    )
    picked = pool.withColumn("_pick", F.row_number().over(by_pick)).where(F.col("_pick") <= k)
    by_time = Window.partitionBy("consumer_id").orderBy(
        F.col("created_at").desc(), F.col("event_id").desc()
    )
    return picked.withColumn("rank", F.row_number().over(by_time)).drop("_pick", "_prank")


def view_feed(
    producer_feed: DataFrame, members: DataFrame, k: int, shared: bool = False
) -> DataFrame:
    """Latest k events of every shared view (Chen & Zhou's materialized views): the newest k
    of its producers' latest k, each event once (``shared``: with topics, an event can
    reach a view through its author and a topic), its author as ``producer_id``. Recomputed
    from the day's producer feeds, so it costs the views' members times k rows, whatever
    the history."""
    from pyspark.sql import functions as F

    rows = members.select("view_id", F.col("producer_id").alias("stream_id")).join(
        authored(producer_feed), "stream_id"
    )
    # without topics a member is one (view, producer) row and an event has one producer
    return one_per_consumer_event(rows, "view_id", k, shared).drop("stream_id")


STORE_COLUMNS = ("event_id", "producer_id", "created_at", "payload", "attributes")


def event_store_full(producer_feed: DataFrame, events: DataFrame) -> DataFrame:
    """The content of every event the day's feed tables can return, from all clean events
    (with ``ds``). Every consumer-feed and view-feed row is an event of its producer's latest
    k, so the producer feed's events are the whole set: producers x k rows at most, however
    long the history (seed 002: results in semijoin form, each payload stored once). An id
    that arrived on two days keeps its first arrival, as the producer feed does."""
    from pyspark.sql import functions as F

    rows = events.select(*STORE_COLUMNS, F.unix_date(F.col("ds")).alias("priority"))
    return _one_per_event(rows.join(_store_keys(producer_feed), STORE_KEYS, "left_semi"))


def event_store_incremental(
    previous: DataFrame, events: DataFrame, producer_feed: DataFrame
) -> DataFrame:
    """D's store from D-1's: an event of D's producer feeds was either in D-1's producer
    feeds (so in D-1's store) or arrived on D, so D-1's store and D's events, restricted to
    D's producer feeds, hold them all; the earlier copy wins, as in :func:`event_store_full`."""
    from pyspark.sql import functions as F

    rows = previous.select(*STORE_COLUMNS, F.lit(0).alias("priority")).unionByName(
        events.select(*STORE_COLUMNS, F.lit(1).alias("priority"))
    )
    return _one_per_event(rows.join(_store_keys(producer_feed), STORE_KEYS, "left_semi"))


STORE_KEYS = ["event_id", "producer_id", "created_at"]


def _store_keys(producer_feed: DataFrame) -> DataFrame:
    """The producer feeds' events by author (a topic's rows name the event's author)."""
    from pyspark.sql import functions as F

    return producer_feed.select(
        "event_id", F.col("author_id").alias("producer_id"), "created_at"
    ).distinct()


def _one_per_event(rows: DataFrame) -> DataFrame:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("event_id").orderBy("priority")
    return rows.withColumn("_n", F.row_number().over(w)).where(F.col("_n") == 1).drop("_n")


def changed_consumers(pushed: DataFrame, pushed_before: DataFrame) -> DataFrame:
    """Consumers whose set of pushed producers differs between the two plans."""
    from pyspark.sql import functions as F

    a = pushed.withColumn("_now", F.lit(True))
    b = pushed_before.withColumn("_before", F.lit(True))
    diff = a.join(b, ["consumer_id", "producer_id"], "full_outer").where(
        F.col("_now").isNull() | F.col("_before").isNull()
    )
    return diff.select("consumer_id").distinct()


def fresh_entries(producer_feed: DataFrame, previous: DataFrame) -> DataFrame:
    """Rows of D's producer feeds that were not in D-1's: the only events of the day that
    can enter any consumer's feed (an event outside its producer's latest k is outside the
    latest k of every consumer that follows the producer)."""
    return producer_feed.join(
        previous.select("producer_id", "event_id"), ["producer_id", "event_id"], "left_anti"
    )


def consumer_feed_incremental(
    previous: DataFrame,
    pushed_before: DataFrame,
    pushed: DataFrame,
    fresh: DataFrame,
    producer_feed: DataFrame,
    k: int,
    shared: bool = False,
) -> DataFrame:
    """D's consumer feeds from D-1's: unchanged consumers merge their feed with the fresh
    producer-feed entries of their pushed producers; changed ones are refilled.

    The three parts hold no event twice for a consumer, so no duplicate window is needed:
    refill and fan-out are disjoint by consumer, each unique as in :func:`consumer_feed_full`;
    and an unchanged consumer's D-1 feed holds only events of D-1's producer feeds (an event
    outside its producer's latest k has k newer events of the same pushed producer ahead of
    it), which are by definition not fresh. With topics (``shared``) an event reaching a
    consumer through two streams arrives in the fan-out or the refill twice, and is kept
    once (an event's streams all take it on the day it is ingested, so it is fresh in all of
    them or in none)."""
    from pyspark.sql import functions as F

    cols = ("consumer_id", "stream_id", "producer_id", "event_id", "created_at")
    changed = changed_consumers(pushed, pushed_before)
    edges = pushed.select("consumer_id", F.col("producer_id").alias("stream_id"))
    stable_prev = previous.join(changed, "consumer_id", "left_anti").select(*cols)
    fan_out = (
        edges.join(changed, "consumer_id", "left_anti")
        .join(authored(fresh), "stream_id")
        .select(*cols)
    )
    refill = (
        edges.join(changed, "consumer_id", "left_semi")
        .join(authored(producer_feed), "stream_id")
        .select(*cols)
    )
    parts = stable_prev.unionByName(fan_out).unionByName(refill)
    return one_per_consumer_event(parts, "consumer_id", k, shared)


FEEDS_LAYOUT = 2
"""The feed tables' layout in the materialize record: 2 since producer feeds carry
``author_id`` and consumer feeds ``stream_id`` (topic producers); the day after an older
layout is rebuilt in full."""


def can_increment(wh: Storage, ds: dt.date, settings: Settings) -> tuple[bool, str]:
    """Whether D-1's state is there and was built with the same feed settings."""
    prev = ds - dt.timedelta(days=1)
    for layer, table in (
        ("feeds", "producer_feed"),
        ("feeds", "consumer_feed"),
        ("feeds", "event_store"),
        ("plan", "edge_plan"),
    ):
        if not has_partition(wh, contract(layer, table), prev):
            return False, f"{layer}/{table} has no partition {prev}"
    state = ledger.read_record(wh, prev, "materialize")
    if not isinstance(state, MaterializeRecord):
        return False, f"no materialize record for {prev}"
    if state.feeds_layout != FEEDS_LAYOUT:
        return False, f"the feeds of {prev} predate topic streams (no author_id, stream_id)"
    if state.feed_k != settings.feed_k or state.coherency != settings.coherency:
        return (
            False,
            f"feed settings changed since {prev} ({state.feed_k}/{state.coherency})",
        )
    return True, "previous day's state present"


def _producer_feed(
    spark: SparkSession, wh: Storage, ds: dt.date, events: DataFrame, incremental: bool, k: int
) -> tuple[DataFrame, DataFrame | None]:
    """Write the day's producer feeds (the previous day's merged with the day's events and
    topic matches, or in full from every day's); returns them as written, and in full, every
    day's events (``None`` when incremental)."""
    from pyspark.sql import functions as F

    ev_c, pf_c = contract("clean", "events"), contract("feeds", "producer_feed")
    te_c = contract("clean", "topic_events")
    all_events = None
    if incremental:
        pf_prev = read_partition(spark, wh, pf_c, ds - dt.timedelta(days=1))
        matched = read_partition(spark, wh, te_c, ds)
        producer_feed = producer_feed_incremental(pf_prev, streams(events, matched), k)
    else:
        history = [d for d in partition_days(wh, ev_c) if d <= ds]
        all_events = read_partitions(spark, wh, ev_c, history)
        matched_days = [d for d in partition_days(wh, te_c) if d <= ds]
        all_matched = (
            read_partitions(spark, wh, te_c, matched_days)
            if matched_days
            else spark.createDataFrame([], te_c.schema()).withColumn("ds", F.lit(ds))
        )
        producer_feed = producer_feed_full(streams(all_events, all_matched), k)
    write_partition(producer_feed, wh, pf_c, ds)
    # read back: do not recompute the merge
    return read_partition(spark, wh, pf_c, ds), all_events


def _consumer_feed(
    spark: SparkSession,
    settings: Settings,
    wh: Storage,
    ds: dt.date,
    producer_feed: DataFrame,
    pushed: DataFrame,
    incremental: bool,
    shared: bool,
) -> DataFrame:
    """The day's materialized consumer feeds: chosen again from the producer feeds under
    per-producer coherency, else the previous day's updated with the day's fresh entries, or
    in full."""
    k, prev = settings.feed_k, ds - dt.timedelta(days=1)
    if settings.coherency == "per_producer":
        # the diversity window moves with the day: every pushed feed is chosen again from
        # the day's producer feeds (bounded by k_p rows per pushed edge)
        return consumer_feed_diverse(
            producer_feed,
            pushed,
            k,
            settings.feed_k_per_producer,
            recent_since(ds, settings.diversity_hours),
        )
    if incremental:
        pf_c = contract("feeds", "producer_feed")
        return consumer_feed_incremental(
            read_partition(spark, wh, contract("feeds", "consumer_feed"), prev),
            push_edges(read_partition(spark, wh, contract("plan", "edge_plan"), prev)),
            pushed,
            fresh_entries(producer_feed, read_partition(spark, wh, pf_c, prev)),
            producer_feed,
            k,
            shared,
        )
    return consumer_feed_full(producer_feed, pushed, k, shared)


def run(
    spark: SparkSession,
    settings: Settings,
    ds: dt.date,
    wh: Storage,
    full_refresh: bool = False,
) -> MaterializeRecord:
    from pyspark.sql import functions as F

    k = settings.feed_k
    incremental, why = (
        (False, "full refresh requested") if full_refresh else can_increment(wh, ds, settings)
    )
    log.info("materialize %s: %s (%s)", ds, "incremental" if incremental else "full", why)

    pushed = push_edges(read_partition(spark, wh, contract("plan", "edge_plan"), ds))
    events = read_partition(spark, wh, contract("clean", "events"), ds)
    producer_feed, all_events = _producer_feed(spark, wh, ds, events, incremental, k)
    # topic streams hold events of other producers: a consumer or a view can meet an event
    # twice, through its author and a topic (one query over producers x k rows)
    shared = not producer_feed.where(F.col("author_id") != F.col("producer_id")).isEmpty()
    es_c = contract("feeds", "event_store")
    if all_events is None:
        store_prev = read_partition(spark, wh, es_c, ds - dt.timedelta(days=1))
        store = event_store_incremental(store_prev, events, producer_feed)
    else:
        store = event_store_full(producer_feed, all_events)
    write_partition(store, wh, es_c, ds)
    consumer_feed = _consumer_feed(
        spark, settings, wh, ds, producer_feed, pushed, incremental, shared
    )
    write_partition(consumer_feed, wh, contract("feeds", "consumer_feed"), ds)
    members = read_partition(spark, wh, contract("plan", "view_members"), ds)
    write_partition(
        view_feed(producer_feed, members, k, shared), wh, contract("feeds", "view_feed"), ds
    )

    return MaterializeRecord(
        mode="incremental" if incremental else "full",
        reason=why,
        feed_k=k,
        coherency=settings.coherency,
        feed_k_per_producer=settings.feed_k_per_producer,
        diversity_hours=settings.diversity_hours,
        topic_streams=shared,
        feeds_layout=FEEDS_LAYOUT,
    )

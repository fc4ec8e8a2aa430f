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
from typing import TYPE_CHECKING, Any

from jobs.common import ledger
from jobs.common.config import Settings
from jobs.common.dates import recent_since
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


def producer_feed_full(events: DataFrame, k: int) -> DataFrame:
    """Latest k per producer from all clean events (with ``ds``: the first arrival of a
    re-sent event id wins, as in the incremental path)."""
    from pyspark.sql import functions as F

    rows = events.select(
        "producer_id", "event_id", "created_at", F.unix_date(F.col("ds")).alias("priority")
    )
    return latest_k(rows, "producer_id", k)


def producer_feed_incremental(previous: DataFrame, events: DataFrame, k: int) -> DataFrame:
    from pyspark.sql import functions as F

    rows = previous.select(
        "producer_id", "event_id", "created_at", F.lit(0).alias("priority")
    ).unionByName(
        events.select("producer_id", "event_id", "created_at", F.lit(1).alias("priority"))
    )
    return latest_k(rows, "producer_id", k)


def push_edges(edge_plan: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return edge_plan.where(F.col("mode") == "push").select("consumer_id", "producer_id")


def consumer_feed_full(producer_feed: DataFrame, pushed: DataFrame, k: int) -> DataFrame:
    """Latest k over each consumer's pushed producers. One row per (consumer, event): a
    pushed edge is one plan row, a producer feed has an event once, and an event id has one
    producer (clean events are unique by event_id across days)."""
    rows = pushed.join(producer_feed.select("producer_id", "event_id", "created_at"), "producer_id")
    return latest_k(rows, "consumer_id", k, unique=True)


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
    )
    first = (F.col("_prank") == 1) & (F.col("created_at") >= F.lit(recent_since))
    by_pick = Window.partitionBy("consumer_id").orderBy(
        first.desc(), F.col("created_at").desc(), F.col("event_id").desc()
    )
    picked = pool.withColumn("_pick", F.row_number().over(by_pick)).where(F.col("_pick") <= k)
    by_time = Window.partitionBy("consumer_id").orderBy(
        F.col("created_at").desc(), F.col("event_id").desc()
    )
    return picked.withColumn("rank", F.row_number().over(by_time)).drop("_pick", "_prank")


def view_feed(producer_feed: DataFrame, members: DataFrame, k: int) -> DataFrame:
    """Latest k events of every shared view (Chen & Zhou's materialized views): the newest k
    of its producers' latest k. Recomputed from the day's producer feeds, so it costs the
    views' members times k rows, whatever the history."""
    rows = members.select("view_id", "producer_id").join(
        producer_feed.select("producer_id", "event_id", "created_at"), "producer_id"
    )
    return latest_k(rows, "view_id", k, unique=True)  # a member is one (view, producer) row


STORE_COLUMNS = ("event_id", "producer_id", "created_at", "payload", "attributes")


def event_store_full(producer_feed: DataFrame, events: DataFrame) -> DataFrame:
    """The content of every event the day's feed tables can return, from all clean events
    (with ``ds``). Every consumer-feed and view-feed row is an event of its producer's latest
    k, so the producer feed's events are the whole set: producers x k rows at most, however
    long the history (seed 002: results in semijoin form, each payload stored once). An id
    that arrived on two days keeps its first arrival, as the producer feed does."""
    from pyspark.sql import functions as F

    keys = ["event_id", "producer_id", "created_at"]
    rows = events.select(*STORE_COLUMNS, F.unix_date(F.col("ds")).alias("priority"))
    return _one_per_event(rows.join(producer_feed.select(*keys), keys, "left_semi"))


def event_store_incremental(
    previous: DataFrame, events: DataFrame, producer_feed: DataFrame
) -> DataFrame:
    """D's store from D-1's: an event of D's producer feeds was either in D-1's producer
    feeds (so in D-1's store) or arrived on D, so D-1's store and D's events, restricted to
    D's producer feeds, hold them all; the earlier copy wins, as in :func:`event_store_full`."""
    from pyspark.sql import functions as F

    keys = ["event_id", "producer_id", "created_at"]
    rows = previous.select(*STORE_COLUMNS, F.lit(0).alias("priority")).unionByName(
        events.select(*STORE_COLUMNS, F.lit(1).alias("priority"))
    )
    return _one_per_event(rows.join(producer_feed.select(*keys), keys, "left_semi"))


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
) -> DataFrame:
    """D's consumer feeds from D-1's: unchanged consumers merge their feed with the fresh
    producer-feed entries of their pushed producers; changed ones are refilled.

    The three parts hold no event twice for a consumer, so no duplicate window is needed:
    refill and fan-out are disjoint by consumer, each unique as in :func:`consumer_feed_full`;
    and an unchanged consumer's D-1 feed holds only events of D-1's producer feeds (an event
    outside its producer's latest k has k newer events of the same pushed producer ahead of
    it), which are by definition not fresh."""

    changed = changed_consumers(pushed, pushed_before)
    stable_prev = previous.join(changed, "consumer_id", "left_anti").select(
        "consumer_id", "producer_id", "event_id", "created_at"
    )
    fan_out = (
        pushed.join(changed, "consumer_id", "left_anti")
        .join(fresh.select("producer_id", "event_id", "created_at"), "producer_id")
        .select("consumer_id", "producer_id", "event_id", "created_at")
    )
    refill = (
        pushed.join(changed, "consumer_id", "left_semi")
        .join(producer_feed.select("producer_id", "event_id", "created_at"), "producer_id")
        .select("consumer_id", "producer_id", "event_id", "created_at")
    )
    parts = stable_prev.unionByName(fan_out).unionByName(refill)
    return latest_k(parts, "consumer_id", k, unique=True)


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
    if state is None:
        return False, f"no materialize record for {prev}"
    if state.get("feed_k") != settings.feed_k or state.get("coherency") != settings.coherency:
        return (
            False,
            f"feed settings changed since {prev} ({state.get('feed_k')}/{state.get('coherency')})",
        )
    return True, "previous day's state present"


def run(
    spark: SparkSession,
    settings: Settings,
    ds: dt.date,
    wh: Storage,
    full_refresh: bool = False,
) -> dict[str, Any]:
    k = settings.feed_k
    ev_c = contract("clean", "events")
    pf_c, cf_c = contract("feeds", "producer_feed"), contract("feeds", "consumer_feed")
    prev = ds - dt.timedelta(days=1)
    incremental, why = (
        (False, "full refresh requested") if full_refresh else can_increment(wh, ds, settings)
    )
    log.info("materialize %s: %s (%s)", ds, "incremental" if incremental else "full", why)

    edge_plan = read_partition(spark, wh, contract("plan", "edge_plan"), ds)
    pushed = push_edges(edge_plan)
    events = read_partition(spark, wh, ev_c, ds)
    es_c = contract("feeds", "event_store")
    if incremental:
        pf_prev = read_partition(spark, wh, pf_c, prev)
        producer_feed = producer_feed_incremental(pf_prev, events, k)
    else:
        history = [d for d in partition_days(wh, ev_c) if d <= ds]
        all_events = read_partitions(spark, wh, ev_c, history)
        producer_feed = producer_feed_full(all_events, k)
    write_partition(producer_feed, wh, pf_c, ds)
    producer_feed = read_partition(spark, wh, pf_c, ds)  # read back: do not recompute the merge
    if incremental:
        store_prev = read_partition(spark, wh, es_c, prev)
        store = event_store_incremental(store_prev, events, producer_feed)
    else:
        store = event_store_full(producer_feed, all_events)
    write_partition(store, wh, es_c, ds)

    if settings.coherency == "per_producer":
        # the diversity window moves with the day: every pushed feed is chosen again from
        # the day's producer feeds (bounded by k_p rows per pushed edge)
        consumer_feed = consumer_feed_diverse(
            producer_feed,
            pushed,
            k,
            settings.feed_k_per_producer,
            recent_since(ds, settings.diversity_hours),
        )
    elif incremental:
        consumer_feed = consumer_feed_incremental(
            read_partition(spark, wh, cf_c, prev),
            push_edges(read_partition(spark, wh, contract("plan", "edge_plan"), prev)),
            pushed,
            fresh_entries(producer_feed, read_partition(spark, wh, pf_c, prev)),
            producer_feed,
            k,
        )
    else:
        consumer_feed = consumer_feed_full(producer_feed, pushed, k)
    write_partition(consumer_feed, wh, cf_c, ds)
    vf_c = contract("feeds", "view_feed")
    members = read_partition(spark, wh, contract("plan", "view_members"), ds)
    write_partition(view_feed(producer_feed, members, k), wh, vf_c, ds)

    stats = {
        "mode": "incremental" if incremental else "full",
        "reason": why,
        "feed_k": k,
        "coherency": settings.coherency,
        "feed_k_per_producer": settings.feed_k_per_producer,
        "diversity_hours": settings.diversity_hours,
    }
    return stats

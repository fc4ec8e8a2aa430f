"""Topic producers at ingest (docs/topics.md): a day's ``topics`` folder replaces the
definitions in force (else the previous day's carry over), malformed or conflicting ones are
quarantined with a reason, and the day's events are matched against the definitions
(``jobs.stages.topics.match``) into ``clean/topic_events``; each topic's matches are counted
in ``clean/event_counts`` like an account's events.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from jobs.common.config import Settings
from jobs.common.records import TopicAccount
from jobs.common.storage import Storage, ds_dir
from jobs.common.tables import (
    ContractError,
    contract,
    empty_frame,
    has_partition,
    partition_rows,
    read_partition,
    write_partition,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

from jobs.stages.landing_files import empty_landing, read_landing
from jobs.stages.rules import accounting, quarantine_rows

log = logging.getLogger(__name__)


class TopicsUnsupported(ContractError):
    """Topic definitions are in force under a setting that cannot serve them."""


def account_ids(spark: SparkSession, wh: Storage, ds: dt.date) -> DataFrame:
    """``id``: every id known as an account on ``ds``: producers of the day's events and of
    the previous day's producer feeds (every account that ever posted, topics of that day
    excepted), consumers of the day's graph and views."""
    from pyspark.sql import functions as F

    def t(layer: str, name: str, day: dt.date) -> DataFrame:
        return read_partition(spark, wh, contract(layer, name), day)

    ids = (
        t("clean", "events", ds)
        .select(F.col("producer_id").alias("id"))
        .unionByName(t("clean", "follows", ds).select(F.col("consumer_id").alias("id")))
        .unionByName(t("clean", "view_counts", ds).select(F.col("consumer_id").alias("id")))
    )
    prev = ds - dt.timedelta(days=1)
    pf_c = contract("feeds", "producer_feed")
    if has_partition(wh, pf_c, prev):
        posted = read_partition(spark, wh, pf_c, prev).select(F.col("producer_id").alias("id"))
        if has_partition(wh, contract("clean", "topics"), prev):
            topics = t("clean", "topics", prev).select(F.col("topic_id").alias("id"))
            posted = posted.join(topics, "id", "left_anti")
        ids = ids.unionByName(posted)
    return ids.distinct()


def definitions(
    spark: SparkSession, wh: Storage, landing: Storage, ds: dt.date, snapshot: bool
) -> tuple[DataFrame, int]:
    """The definitions to check on ``ds`` (``topic_id, predicate, _file, _corrupt_text,
    defined_on``) and how many rows landed: the day's ``topics`` files when it has the folder
    (``snapshot``), else the previous day's definitions in force (none landed)."""
    from pyspark.sql import functions as F

    if snapshot:
        raw, _ = read_landing(spark, landing, "topics", ds)
        raw = raw if raw is not None else empty_landing(spark, "topics")
        rows = raw.select("topic_id", "predicate", "_file", "_corrupt_text").withColumn(
            "defined_on", F.lit(ds)
        )
        return rows, raw.count()
    prev, tp_c = ds - dt.timedelta(days=1), contract("clean", "topics")
    if has_partition(wh, tp_c, prev):
        return read_partition(spark, wh, tp_c, prev).select(
            "topic_id",
            "predicate",
            F.lit(f"clean/topics ds={prev}").alias("_file"),
            F.lit(None).cast("string").alias("_corrupt_text"),
            "defined_on",
        ), 0
    return spark.createDataFrame(
        [],
        "topic_id string, predicate string, _file string, _corrupt_text string, defined_on date",
    ), 0


def ingest_topics(
    spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage, landing: Storage
) -> TopicAccount:
    """The topic definitions in force on ``ds`` (``clean/topics``) and the day's events that
    match them (``clean/topic_events``), after the day's events and graph are written.

    A day with a ``topics/ds=D`` folder replaces the definitions with its files (an empty
    folder removes them all); otherwise the previous day's definitions stay in force. Every
    definition in force is checked again (an id that became an account is quarantined)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from jobs.stages.topics import tag_definitions, topic_events

    prev = ds - dt.timedelta(days=1)
    tp_c, te_c = contract("clean", "topics"), contract("clean", "topic_events")
    snapshot = landing.is_dir("topics", ds_dir(ds))
    carried = 0
    rows, rows_in = definitions(spark, wh, landing, ds, snapshot)
    landed_or_kept = rows_in if snapshot else partition_rows(wh, tp_c, prev)
    if landed_or_kept == 0:
        # no definitions, the usual day of an accounts-only application: three empty tables,
        # with nothing to read back or check
        write_partition(
            empty_frame(spark, contract("quarantine", "rows")),
            wh,
            contract("quarantine", "rows"),
            ds,
            table="topics",
        )
        write_partition(empty_frame(spark, tp_c), wh, tp_c, ds)
        write_partition(empty_frame(spark, te_c), wh, te_c, ds)
        log.info("ingest topics %s: none in force", ds)
        return TopicAccount(clean=0, snapshot=snapshot)
    accounts = account_ids(spark, wh, ds)
    tagged = tag_definitions(rows, accounts).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        write_partition(
            quarantine_rows(tagged, "topics"),
            wh,
            contract("quarantine", "rows"),
            ds,
            table="topics",
        )
        counts = accounting(spark, wh, "topics", ds, rows_in)
        in_force = tagged.where(F.col("reason").isNull())
        write_partition(in_force, wh, tp_c, ds)
        defined = partition_rows(wh, tp_c, ds)
        if not snapshot:
            carried = counts.duplicates + counts.quarantined + defined
        if defined and settings.coherency != "global":
            raise TopicsUnsupported(
                f"{ds}: {defined} topic definition(s) are in force, but topic producers need"
                f" coherency = global (it is {settings.coherency!r})"
            )
        if defined:
            events = read_partition(spark, wh, contract("clean", "events"), ds)
            write_partition(topic_events(events, in_force), wh, te_c, ds)
        else:  # no topics in force: the day's events need not be scanned
            write_partition(spark.createDataFrame([], te_c.schema()), wh, te_c, ds)
    finally:
        tagged.unpersist()
    matches = read_partition(spark, wh, te_c, ds)
    m = matches.agg(
        F.count("*").alias("n"),
        F.countDistinct("event_id").alias("events"),
        F.countDistinct("topic_id").alias("topics"),
    ).first()
    assert m is not None
    topics = TopicAccount(
        **counts.model_dump(exclude={"clean", "snapshot"}),
        clean=defined,
        snapshot=snapshot,
        carried=carried,
        matches=int(m["n"]),
        matched_events=int(m["events"]),
        matched_topics=int(m["topics"]),
    )
    log.info("ingest topics %s: %s", ds, topics)
    return topics

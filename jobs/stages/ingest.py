"""Stage ``ingest``: one day's landing files -> ``clean/*`` (topics included) + quarantine.

Reads ``LANDING/<table>/ds=D/*`` (CSV with a header, JSON Lines or Parquet, optionally
gzip-compressed), types every column against ``schemas/landing/<table>/v1.json`` and sorts
each input row into exactly one of: clean, duplicate, quarantined (with a reason code).
Duplicates are also written to ``quarantine/<table>`` with reason ``duplicate``, so that
``rows_in = clean + duplicates + quarantined`` can be checked from the tables alone
(``rows_in`` is counted on the files, the other terms on the written tables).

Grain and keys of the outputs:
* ``clean/follows``: the whole follow graph at the end of D, one row per (consumer, producer).
  A day with snapshot files (no ``op`` column) replaces the graph; change-log rows (with ``op``)
  are applied on top of the snapshot or of the previous day's graph, the last change per edge
  winning (ties on ``ts``: unfollow wins).
* ``clean/events``: events arriving on D, unique by ``event_id``, also across days: a late
  event already ingested on an earlier day is a duplicate.
* ``clean/views``: feed views on D (views have no key and are not deduplicated).
* ``clean/topics``, ``clean/topic_events``: the topic definitions in force on D (a day's
  ``topics`` folder replaces them) and D's events that match each (:func:`ingest_topics`,
  docs/topics.md); a topic's matches are counted in ``clean/event_counts`` like an account's
  events.

The files are read by ``jobs.stages.landing_files``, the rows sorted by ``jobs.stages.rules``,
the topics ingested by ``jobs.stages.ingest_topics``; this module runs them per table.

Run: ``feedpipe ingest --ds 2026-01-01`` (or through ``spark-submit``/Airflow).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from jobs.common.config import Settings
from jobs.common.pipeline import LANDING_TABLES
from jobs.common.records import IngestRecord, TableAccount
from jobs.common.storage import Storage
from jobs.common.tables import (
    DAILY_COUNTS,
    contract,
    has_partition,
    located,
    partition_rows,
    read_partition,
    write_partition,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

from jobs.stages.ingest_topics import ingest_topics
from jobs.stages.landing_files import empty_landing, landing_errors, read_landing
from jobs.stages.rules import (
    accounting,
    apply_follows,
    check_share,
    clean_rows,
    drop_known_events,
    graph_change,
    quarantine_rows,
    tag_events,
    tag_follows,
    tag_views,
)

log = logging.getLogger(__name__)


def run(spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage) -> IngestRecord:
    with landing_errors():
        return _run(spark, settings, ds, wh)


def _run(spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage) -> IngestRecord:
    """Ingest one day: every landing table (:func:`ingest_table`), then the topics' definitions
    and matches; returns the row accounting per table (also written by ``publish``)."""
    from pyspark.sql import functions as F

    landing = Storage.at(settings.landing)
    stats: dict[str, TableAccount] = {}
    per_id: dict[str, DataFrame] = {}
    for table in LANDING_TABLES:
        stats[table], counted = ingest_table(spark, settings, ds, wh, landing, table)
        if counted is not None:
            per_id[table] = counted
    topic_stats = ingest_topics(spark, settings, ds, wh, landing)
    # a topic's stream is counted like an account's: the rates stage reads one table
    matched = read_partition(spark, wh, contract("clean", "topic_events"), ds)
    per_id["events"] = per_id["events"].unionByName(
        matched.groupBy(F.col("topic_id").alias("producer_id")).agg(F.count("*").alias("n"))
    )
    for table, counts_by_id in per_id.items():
        write_partition(counts_by_id, wh, contract("clean", DAILY_COUNTS[table][0]), ds)
    # the tables run as empty on purpose: the manifest shows them and the volume gates skip them
    return IngestRecord(tables=stats, topics=topic_stats, allowed_empty=list(settings.allow_empty))


def ingest_table(
    spark: SparkSession,
    settings: Settings,
    ds: dt.date,
    wh: Storage,
    landing: Storage,
    table: str,
) -> tuple[TableAccount, DataFrame | None]:
    """One landing table of the day: its quarantine is written first, then the accounting is
    taken from the written rows against an independent count of the rows read, and the clean
    table is written only if the quarantined share is within ``max_quarantine_share``.

    Returns the table's row accounting and, for ``events``, the clean rows counted per
    producer (written once the topics' matches are added; ``views`` writes its own)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    raw, files = read_landing(spark, landing, table, ds)
    if raw is None:
        log.info("no landing files for %s on %s", table, ds)
        raw = empty_landing(spark, table)
    cached = []
    if table == "events":
        base = tag_events(
            raw, ds, settings.max_lateness_days, settings.max_attributes_bytes
        ).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(base)
        tagged = drop_known_events(spark, wh, base, ds, settings.max_lateness_days)
    elif table == "views":
        tagged = tag_views(raw, ds, settings.max_lateness_days)
    else:
        tagged = tag_follows(raw, ds)
    if table != "views" and all(tagged is not d for d in cached):  # a window ran: do not
        tagged = tagged.persist(StorageLevel.MEMORY_AND_DISK)  # compute it twice
        cached.append(tagged)
    write_partition(
        quarantine_rows(tagged, table), wh, contract("quarantine", "rows"), ds, table=table
    )
    counts = accounting(spark, wh, table, ds, raw.count())
    clean_c = contract("clean", table)
    if table == "follows":  # its clean table is the graph: count the accepted changes
        counts = counts.model_copy(update={"clean": tagged.where(F.col("reason").isNull()).count()})
    quarantined = located(wh, contract("quarantine", "rows"), ds, table)
    assert quarantined is not None
    check_share(table, counts, settings.max_quarantine_share, wh.uri(*quarantined))
    previous = None
    if table == "follows":
        prev_day = ds - dt.timedelta(days=1)
        if has_partition(wh, clean_c, prev_day):
            previous = read_partition(spark, wh, clean_c, prev_day)
        has_snapshot = any(not f.has_op for f in files)
        if previous is None and not has_snapshot:
            log.warning("no follow graph before %s and no snapshot: starting from empty", ds)
        clean = apply_follows(previous, tagged, has_snapshot)
        counts = counts.model_copy(update={"snapshot": has_snapshot})
    else:
        clean = clean_rows(tagged, table)
    write_partition(clean, wh, clean_c, ds)
    counted = None
    if table == "follows" and previous is not None:  # the graph as written against D-1's
        if files:
            change = graph_change(previous, read_partition(spark, wh, clean_c, ds))
        else:  # no follow changes landed: the previous graph carried over as it was
            edges = partition_rows(wh, clean_c, ds)
            change = dict(edges_before=edges, edges=edges, edges_added=0, edges_removed=0)
        counts = counts.model_copy(update=change)
    if table != "follows":  # the clean rows as written
        written = read_partition(spark, wh, clean_c, ds)
        counts = counts.model_copy(update={"clean": written.count()})
        id_col = DAILY_COUNTS[table][1]
        counted = written.groupBy(id_col).agg(F.count("*").alias("n"))
        if table == "views":  # the events' counts wait for the topics' matches
            write_partition(counted, wh, contract("clean", "view_counts"), ds)
            counted = None
    for df in cached:
        df.unpersist()
    log.info("ingest %s %s: %s", table, ds, counts)
    return counts, counted

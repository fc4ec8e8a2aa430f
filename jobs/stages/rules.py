"""The row rules of ``ingest`` (docs/data-contracts.md, "Row rules and reason codes"): each
landing row tagged clean, duplicate or quarantined with its reason, the follow graph of the
day from a snapshot or a change log, events already ingested on earlier days dropped as
duplicates, and the accounting ``rows_in = clean + duplicates + quarantined``.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from jobs.common.dates import day_bounds
from jobs.common.records import TableAccount
from jobs.common.storage import Storage
from jobs.common.tables import (
    ContractError,
    contract,
    partition_days,
    read_partition,
    read_partitions,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

from jobs.stages.landing_files import raw_json, timestamp_value

log = logging.getLogger(__name__)


def _first_reason(*rules: tuple[Column, str | Column]) -> Column:
    """The reason of the first rule whose condition holds (a name, or a column of names)."""
    from pyspark.sql import functions as F

    expr = F.lit(None).cast("string")
    for cond, reason in reversed(rules):
        expr = F.when(cond, F.lit(reason) if isinstance(reason, str) else reason).otherwise(expr)
    return expr


def _blank(c: Column) -> Column:
    from pyspark.sql import functions as F

    return c.isNull() | (F.trim(c) == "")


ATTRIBUTE_REASONS = ("attributes_too_large", "attributes_not_object", "attributes_not_strings")
"""Why an event's ``attributes`` is quarantined, in the order the rules are checked."""


def parse_attributes(text: Column, max_bytes: int) -> tuple[Column, Column]:
    """``attributes`` as landed (JSON text; a Parquet map arrives as its JSON) -> the map of
    string values and the reason it is refused (null when it is not).

    The text must be a JSON object whose values are all strings (docs/data-contracts.md,
    "Attributes"); a key repeated in the object keeps its last value, as JSON parsers in most
    languages do. Values are parsed as variants first, so a number, a boolean, a null or a
    nested value is told apart from a string (a ``map<string,string>`` parse turns ``1`` into
    ``"1"``), and the keys are deduplicated by hand: ``from_json`` keeps repeated keys."""
    from pyspark.sql import functions as F

    parsed = F.from_json(text, "map<string,variant>")
    all_strings = F.forall(
        F.map_values(parsed), lambda v: F.schema_of_variant(v) == F.lit("STRING")
    )
    keys = F.array_distinct(F.map_keys(parsed))
    last = F.transform(
        keys,
        lambda k: F.variant_get(
            F.element_at(F.filter(F.map_entries(parsed), lambda e: e["key"] == k), -1)["value"],
            "$",
            "string",
        ),
    )
    reason = F.when(text.isNull(), F.lit(None).cast("string")).otherwise(
        _first_reason(
            (F.octet_length(text) > F.lit(max_bytes), ATTRIBUTE_REASONS[0]),
            (parsed.isNull(), ATTRIBUTE_REASONS[1]),
            (~all_strings, ATTRIBUTE_REASONS[2]),
        )
    )
    return F.map_from_arrays(keys, last), reason


def tag_events(
    raw: DataFrame, ds: dt.date, max_lateness_days: int, max_attributes_bytes: int = 4096
) -> DataFrame:
    """Typed events with ``reason`` (null when clean); repeats of an event_id in the day are
    tagged ``duplicate`` (the earliest created_at stays clean, then one with a payload).
    ``attributes_value`` is the parsed attribute map (:func:`parse_attributes`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    start, end = day_bounds(ds)
    oldest = start - dt.timedelta(days=max_lateness_days)
    ts = F.col("created_at_value")
    df = raw.withColumn("created_at_value", timestamp_value("created_at"))
    attrs, attrs_reason = parse_attributes(F.col("attributes"), max_attributes_bytes)
    df = df.withColumn("_attributes_reason", attrs_reason).withColumn(
        "attributes_value",
        F.when(F.col("_attributes_reason").isNull() & F.col("attributes").isNotNull(), attrs),
    )
    reason = _first_reason(
        (F.col("_corrupt_text").isNotNull(), "unparseable_row"),
        (_blank(F.col("event_id")) | _blank(F.col("producer_id")), "null_key"),
        (ts.isNull() & _blank(F.col("created_at")), "missing_timestamp"),
        (ts.isNull(), "bad_timestamp"),
        (ts >= F.lit(end), "future_timestamp"),
        (ts < F.lit(oldest), "too_late"),
        (F.col("_attributes_reason").isNotNull(), F.col("_attributes_reason")),
    )
    df = df.withColumn("reason", reason).drop("_attributes_reason")
    w = Window.partitionBy("event_id").orderBy(
        "created_at_value", F.col("payload").desc_nulls_last(), "_file"
    )
    dup = F.when(F.col("reason").isNull() & (F.row_number().over(w) > 1), F.lit("duplicate"))
    return df.withColumn("reason", F.coalesce(F.col("reason"), dup))


def tag_views(raw: DataFrame, ds: dt.date, max_lateness_days: int) -> DataFrame:
    """Typed views with ``reason``. Views have no key: two retrievals by one consumer in the
    same microsecond are both kept (see docs/data-contracts.md), so no shuffle is needed."""
    from pyspark.sql import functions as F

    start, end = day_bounds(ds)
    oldest = start - dt.timedelta(days=max_lateness_days)
    ts = F.col("viewed_at_value")
    df = raw.withColumn("viewed_at_value", timestamp_value("viewed_at"))
    reason = _first_reason(
        (F.col("_corrupt_text").isNotNull(), "unparseable_row"),
        (_blank(F.col("consumer_id")), "null_key"),
        (ts.isNull() & _blank(F.col("viewed_at")), "missing_timestamp"),
        (ts.isNull(), "bad_timestamp"),
        (ts >= F.lit(end), "future_timestamp"),
        (ts < F.lit(oldest), "too_late"),
    )
    return df.withColumn("reason", reason)


def tag_follows(raw: DataFrame, ds: dt.date) -> DataFrame:
    """Typed follow rows with ``op`` normalised; within a kind (snapshot / change log) only the
    winning row per edge stays clean: the snapshot's earliest, the change log's latest."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    start, end = day_bounds(ds)
    df = raw.withColumn("ts_value", timestamp_value("ts")).withColumn(
        "op_norm", F.lower(F.trim(F.col("op")))
    )
    ts = F.col("ts_value")
    changelog = F.col("_changelog")
    reason = _first_reason(
        (F.col("_corrupt_text").isNotNull(), "unparseable_row"),
        (_blank(F.col("consumer_id")) | _blank(F.col("producer_id")), "null_key"),
        (F.col("consumer_id") == F.col("producer_id"), "self_follow"),
        (
            changelog & ~F.coalesce(F.col("op_norm").isin("follow", "unfollow"), F.lit(False)),
            "bad_op",
        ),
        (changelog & ts.isNull() & _blank(F.col("ts")), "missing_timestamp"),
        (ts.isNull() & ~_blank(F.col("ts")), "bad_timestamp"),
        (ts >= F.lit(end), "future_timestamp"),
    )
    df = df.withColumn("reason", reason).withColumn(
        "ts_value", F.coalesce(ts, F.lit(start).cast("timestamp"))
    )
    w = Window.partitionBy("_changelog", "consumer_id", "producer_id").orderBy(
        F.when(changelog, -F.unix_micros("ts_value")).otherwise(F.unix_micros("ts_value")),
        F.when(F.col("op_norm") == "unfollow", 0).otherwise(1),
        F.col("_file").desc(),
    )
    dup = F.when(F.col("reason").isNull() & (F.row_number().over(w) > 1), F.lit("duplicate"))
    return df.withColumn("reason", F.coalesce(F.col("reason"), dup))


def apply_follows(previous: DataFrame | None, tagged: DataFrame, has_snapshot: bool) -> DataFrame:
    """The graph at the end of the day: base (snapshot, else previous graph) + changes."""
    from pyspark.sql import functions as F

    clean = tagged.where(F.col("reason").isNull())
    snapshot = clean.where(~F.col("_changelog")).select(
        "consumer_id", "producer_id", F.col("ts_value").alias("followed_at")
    )
    if has_snapshot or previous is None:
        base = snapshot
    else:
        base = previous.select("consumer_id", "producer_id", "followed_at")
    changes = clean.where(F.col("_changelog")).select(
        "consumer_id",
        "producer_id",
        F.col("ts_value").alias("change_ts"),
        F.col("op_norm").alias("op"),
    )
    merged = base.join(changes, ["consumer_id", "producer_id"], "full_outer")
    return merged.where(F.col("op").isNull() | (F.col("op") == "follow")).select(
        "consumer_id",
        "producer_id",
        F.coalesce(F.col("followed_at"), F.col("change_ts")).alias("followed_at"),
    )


def graph_change(previous: DataFrame, graph: DataFrame) -> dict[str, int]:
    """Edges of the previous graph and of the new one, and how many were added and removed (one
    full outer join of the two): what the follow gate of ``validate`` reads."""
    from pyspark.sql import functions as F

    keys = ["consumer_id", "producer_id"]
    old = previous.select(*keys, F.lit(1).alias("_old"))
    new = graph.select(*keys, F.lit(1).alias("_new"))
    row = (
        old.join(new, keys, "full_outer")
        .agg(
            F.count("_old").alias("edges_before"),
            F.count("_new").alias("edges"),
            F.count(F.when(F.col("_old").isNull(), 1)).alias("edges_added"),
            F.count(F.when(F.col("_new").isNull(), 1)).alias("edges_removed"),
        )
        .first()
    )
    assert row is not None
    return {k: int(row[k]) for k in ("edges_before", "edges", "edges_added", "edges_removed")}


def quarantine_rows(tagged: DataFrame, table: str) -> DataFrame:
    from pyspark.sql import functions as F

    detail = F.col("detail") if "detail" in tagged.columns else F.lit(None).cast("string")
    return tagged.where(F.col("reason").isNotNull()).select(
        F.col("_file").alias("source_file"),
        "reason",
        detail.alias("detail"),
        raw_json(table).alias("raw"),
    )


def clean_rows(tagged: DataFrame, table: str) -> DataFrame:
    """The clean rows of ``events`` or ``views`` in their clean table's columns."""
    from pyspark.sql import functions as F

    ok = tagged.where(F.col("reason").isNull())
    if table == "events":
        return ok.select(
            "event_id",
            "producer_id",
            F.col("created_at_value").alias("created_at"),
            "payload",
            F.col("attributes_value").alias("attributes"),
        )
    return ok.select("consumer_id", F.col("viewed_at_value").alias("viewed_at"))


class IngestRejected(ContractError):
    """Too large a share of a table's rows was quarantined: the day is held back."""


def drop_known_events(
    spark: SparkSession, wh: Storage, tagged: DataFrame, ds: dt.date, max_lateness_days: int
) -> DataFrame:
    """Tag late events (created before D) that an earlier day already ingested as duplicates.

    Only late events can repeat an earlier day's event (an event cannot arrive before it is
    created, and future timestamps are rejected), so only the partitions from the oldest late
    event's day to D-1 are searched, and only for the late ids. The joins carry no broadcast
    hint: late ids grow with the data, and Spark broadcasts them when they are small."""
    from pyspark.sql import functions as F

    start, _ = day_bounds(ds)
    late = tagged.where(F.col("reason").isNull() & (F.col("created_at_value") < F.lit(start)))
    oldest = late.agg(F.min("created_at_value").alias("t")).collect()[0]["t"]
    if oldest is None:
        return tagged
    first = max(oldest.date(), ds - dt.timedelta(days=max_lateness_days))
    days = [d for d in partition_days(wh, contract("clean", "events")) if first <= d < ds]
    if not days:
        return tagged
    late_ids = late.select("event_id").distinct()
    seen = (
        read_partitions(spark, wh, contract("clean", "events"), days)
        .join(late_ids, "event_id", "left_semi")
        .groupBy("event_id")
        .agg(F.min("ds").alias("_seen_on"))
    )
    hit = F.col("reason").isNull() & F.col("_seen_on").isNotNull()
    return (
        tagged.join(seen, "event_id", "left")
        .withColumn("detail", F.when(hit, F.concat(F.lit("ingested on "), F.col("_seen_on"))))
        .withColumn("reason", F.when(hit, F.lit("duplicate")).otherwise(F.col("reason")))
        .drop("_seen_on")
    )


def accounting(
    spark: SparkSession, wh: Storage, table: str, ds: dt.date, rows_in: int
) -> TableAccount:
    """Row accounting from the quarantine rows as written (``clean`` is filled in later)."""
    from pyspark.sql import functions as F

    q = read_partition(spark, wh, contract("quarantine", "rows"), ds, table=table)
    by = {
        r["reason"]: int(r["n"]) for r in q.groupBy("reason").agg(F.count("*").alias("n")).collect()
    }
    duplicates = by.pop("duplicate", 0)
    return TableAccount(
        rows_in=rows_in,
        duplicates=duplicates,
        quarantined=sum(by.values()),
        quarantine_reasons=dict(sorted(by.items())),
    )


def check_share(table: str, counts: TableAccount, limit: float, where: str) -> None:
    if counts.rows_in == 0:
        return
    share = counts.quarantined / counts.rows_in
    if share > limit:
        reasons = ", ".join(f"{r} {n}" for r, n in counts.quarantine_reasons.items())
        raise IngestRejected(
            f"{table}: {counts.quarantined} of {counts.rows_in} rows ({share:.1%}) were"
            f" quarantined, above max_quarantine_share {limit:.1%} ({reasons}); the rows are in"
            f" {where} and no clean data was written for this table"
        )

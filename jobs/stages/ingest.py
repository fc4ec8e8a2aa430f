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

Run: ``feedpipe ingest --ds 2026-01-01`` (or through ``spark-submit``/Airflow).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import logging
import re
import zlib
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from jobs.common.config import Settings
from jobs.common.dates import day_bounds
from jobs.common.pipeline import LANDING_TABLES
from jobs.common.storage import Storage, ds_dir
from jobs.common.tables import (
    DAILY_COUNTS,
    ContractError,
    check_columns,
    contract,
    empty_frame,
    has_partition,
    located,
    partition_days,
    partition_rows,
    read_partition,
    read_partitions,
    write_partition,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

TEXT_FORMATS = {".csv": "csv", ".jsonl": "json", ".json": "json", ".ndjson": "json"}
PARQUET_EXT = (".parquet", ".pq")


class LandingError(ContractError):
    """A landing file cannot be read as its table (named file, named problem)."""


@dataclass(frozen=True)
class LandingFile:
    path: str
    fmt: str  # csv | json | parquet
    columns: tuple[str, ...]  # header (csv), first record's keys (json), schema (parquet)
    crlf: bool = False  # csv: its rows end with CR LF (see _read_group)

    @property
    def has_op(self) -> bool:
        return "op" in self.columns


def _split_ext(name: str) -> tuple[str, str | None]:
    lower = name.lower()
    for comp in (".gz", ".gzip"):
        if lower.endswith(comp):
            return lower[: -len(comp)], "gzip"
    for comp in (".bz2", ".xz", ".zst", ".zip", ".lz4", ".snappy", ".zstd"):
        if lower.endswith(comp):
            return lower[: -len(comp)], comp[1:]
    return lower, None


def _first_line(storage: Storage, path: str, compressed: bool) -> tuple[str, bool]:
    """The file's first non-blank line, and whether it ends with CR LF."""
    with storage.fs.open_input_stream(path, compression=None) as raw:
        head = bytes(raw.read(1 << 20))
    if compressed:
        try:
            head = zlib.decompressobj(zlib.MAX_WBITS | 32).decompress(head)
        except zlib.error as exc:
            raise LandingError(f"{path}: cannot be decompressed as gzip ({exc})") from exc
    text = head.decode("utf-8-sig", errors="replace")
    for line in text.splitlines(keepends=True):
        if line.strip():
            return line.rstrip("\r\n"), line.endswith("\r\n")
    return "", False


def discover(storage: Storage, table: str, ds: dt.date) -> list[LandingFile]:
    """The day's files of one landing table, with their columns; bad files are errors."""
    out = []
    for path in storage.list_files(table, ds_dir(ds)):
        name = path.rsplit("/", 1)[-1]
        stem, comp = _split_ext(name)
        if comp not in (None, "gzip"):
            raise LandingError(f"{path}: unsupported compression {comp!r} (use gzip or none)")
        if stem.endswith(PARQUET_EXT):
            if comp:
                raise LandingError(f"{path}: Parquet files must not be gzip-wrapped")
            try:
                schema = pq.read_schema(path, filesystem=storage.fs)
            except Exception as exc:
                raise LandingError(f"{path}: not a readable Parquet file ({exc})") from exc
            out.append(LandingFile(path, "parquet", tuple(schema.names)))
            continue
        fmt = next((f for ext, f in TEXT_FORMATS.items() if stem.endswith(ext)), None)
        if fmt is None:
            raise LandingError(
                f"{path}: unknown file format (expected .csv, .jsonl, .json, .ndjson or .parquet,"
                " optionally .gz)"
            )
        line, crlf = _first_line(storage, path, comp == "gzip")
        if not line:
            log.warning("%s is empty; skipped", path)
            continue
        if fmt == "csv":
            cols = tuple(c.strip() for c in next(csv.reader([line])))
        else:
            try:
                first = json.loads(line)
            except json.JSONDecodeError:
                first = {}
            cols = tuple(first) if isinstance(first, dict) else ()
        out.append(LandingFile(path, fmt, cols, crlf=fmt == "csv" and crlf))
    return out


# -- typed parsing -----------------------------------------------------------------------------


def parse_timestamp(c: Column) -> Column:
    """ISO-8601 (UTC when no offset) or integer/decimal epoch seconds; null if neither."""
    from pyspark.sql import functions as F

    s = F.trim(c)
    return F.when(
        s.rlike(r"^-?[0-9]{1,11}(\.[0-9]+)?$"), F.timestamp_seconds(s.try_cast("double"))
    ).otherwise(s.try_cast("timestamp"))


def _read_group(
    spark: SparkSession, storage: Storage, files: list[LandingFile], table: str
) -> DataFrame:
    """Files of one format and one column layout -> one frame in the ingest layout.

    Every contract column comes out as a string (null when absent); timestamp columns also
    as ``<name>__ts``, the value of a Parquet timestamp column (null otherwise), so typed input
    is never formatted and re-parsed. ``_corrupt_text`` holds a line that did not parse."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    c = contract("landing", table)
    wanted = c.column_names
    paths = [storage.spark_path_of(f.path) for f in files]
    fmt = files[0].fmt
    corrupt = StructField("_corrupt_record", StringType())
    if fmt == "csv":
        header = files[0].columns
        schema = StructType([StructField(n, StringType()) for n in header] + [corrupt])
        reader = (
            spark.read.schema(schema)
            .option("header", True)
            .option("escape", '"')
            .option("multiLine", True)  # RFC 4180: quoted values may hold line breaks
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", "_corrupt_record")
        )
        if files[0].crlf:
            # rows end with CR LF: the parser, left to detect that, turns every CR LF inside a
            # quoted value into LF. Split rows on LF instead and drop the CR an unquoted last
            # value then ends with, so values come through byte for byte (but a quoted last
            # value that itself ends with CR loses it: docs/data-contracts.md)
            reader = reader.option("lineSep", "\n")
        df = reader.csv(paths)
        if files[0].crlf:
            last = header[-1]
            value = F.regexp_replace(F.col(last), "\r$", "")
            df = df.withColumn(last, F.when(value != "", value))
        present = [n for n in header if n in wanted]
    elif fmt == "json":
        schema = StructType([StructField(n, StringType()) for n in wanted] + [corrupt])
        df = (
            spark.read.schema(schema)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", "_corrupt_record")
            .json(paths)
        )
        present = wanted
    else:
        df = spark.read.parquet(*paths).withColumn("_corrupt_record", F.lit(None).cast("string"))
        present = [n for n in df.columns if n in wanted]
    types = dict(df.dtypes)
    cols = []
    for col in c.columns:
        name = col.name
        typed_ts = fmt == "parquet" and name in present and types[name].startswith("timestamp")
        if name not in present or typed_ts:
            cols.append(F.lit(None).cast("string").alias(name))
        elif col.type.startswith("map") and fmt == "parquet":
            cols.append(F.to_json(F.col(name)).alias(name))
        else:
            cols.append(F.col(name).cast("string").alias(name))
        if col.type == "timestamp":
            ts = F.col(name).cast("timestamp") if typed_ts else F.lit(None).cast("timestamp")
            cols.append(ts.alias(f"{name}__ts"))
    return df.select(
        *cols,
        F.regexp_replace(F.col("_metadata.file_path"), "^file:", "").alias("_file"),
        F.col("_corrupt_record").alias("_corrupt_text"),
        F.lit("op" in present).alias("_changelog"),
    )


def raw_json(table: str) -> Column:
    """The row as read: the unparsed line, or its fields as JSON (built only for the rows
    that go to quarantine)."""
    from pyspark.sql import functions as F

    fields = []
    for col in contract("landing", table).columns:
        value = F.col(col.name)
        if col.type == "timestamp":
            value = F.coalesce(value, F.col(f"{col.name}__ts").cast("string"))
        fields.append(value.alias(col.name))
    return F.coalesce(F.col("_corrupt_text"), F.to_json(F.struct(*fields)))


def timestamp_value(name: str) -> Column:
    """A typed timestamp column as is, else the string parsed (only when needed)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col(f"{name}__ts"), parse_timestamp(F.col(name)))


def read_landing(
    spark: SparkSession, storage: Storage, table: str, ds: dt.date
) -> tuple[DataFrame | None, list[LandingFile]]:
    """All of a day's files of ``table`` as one frame of string columns (None if no files)."""
    from pyspark.sql import functions as F

    files = discover(storage, table, ds)
    if not files:
        return None, files
    c = contract("landing", table)
    groups: dict[tuple[str, tuple[str, ...], bool], list[LandingFile]] = defaultdict(list)
    for f in files:
        if f.fmt != "json":
            check_columns(c, f.columns, f.path)
        key_cols = f.columns if f.fmt != "json" else ("op",) if f.has_op else ()
        groups[(f.fmt, key_cols, f.crlf)].append(f)
    frames = []
    for (fmt, _, _), group in sorted(groups.items()):
        df = _read_group(spark, storage, group, table)
        if fmt == "json":  # a JSON file is a change log when its first record has an op
            df = df.withColumn("_changelog", F.lit(any(f.has_op for f in group)))
        frames.append(df)
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out, files


# -- per-table rules ---------------------------------------------------------------------------


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


# -- the stage ---------------------------------------------------------------------------------


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


def empty_landing(spark: SparkSession, table: str) -> DataFrame:
    """A day without files for ``table``: an empty frame in the ingest layout."""
    fields = []
    for col in contract("landing", table).columns:
        fields.append(f"`{col.name}` string")
        if col.type == "timestamp":
            fields.append(f"`{col.name}__ts` timestamp")
    fields += ["_file string", "_corrupt_text string", "_changelog boolean"]
    return spark.createDataFrame([], ", ".join(fields))


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
) -> dict[str, Any]:
    """Row accounting from the quarantine rows as written (``clean`` is filled in later)."""
    from pyspark.sql import functions as F

    q = read_partition(spark, wh, contract("quarantine", "rows"), ds, table=table)
    by = {
        r["reason"]: int(r["n"]) for r in q.groupBy("reason").agg(F.count("*").alias("n")).collect()
    }
    duplicates = by.pop("duplicate", 0)
    return {
        "rows_in": rows_in,
        "clean": None,
        "duplicates": duplicates,
        "quarantined": sum(by.values()),
        "quarantine_reasons": dict(sorted(by.items())),
    }


def check_share(table: str, counts: dict[str, Any], limit: float, where: str) -> None:
    if counts["rows_in"] == 0:
        return
    share = counts["quarantined"] / counts["rows_in"]
    if share > limit:
        reasons = ", ".join(f"{r} {n}" for r, n in counts["quarantine_reasons"].items())
        raise IngestRejected(
            f"{table}: {counts['quarantined']} of {counts['rows_in']} rows ({share:.1%}) were"
            f" quarantined, above max_quarantine_share {limit:.1%} ({reasons}); the rows are in"
            f" {where} and no clean data was written for this table"
        )


def read_failure(exc: BaseException) -> LandingError | None:
    """A landing file Spark failed to read (e.g. a gzip file cut short), as an error naming the
    file and the root cause; None for any other failure."""
    text = str(exc)
    found = re.search(r"while reading file (\S+?)\.?(?:\s|$)", text)
    if "FAILED_READ_FILE" not in text or not found:
        return None
    causes = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("Caused by:")]
    cause = causes[-1].removeprefix("Caused by:").strip() if causes else "unreadable"
    return LandingError(f"{found.group(1)}: cannot be read ({cause})")


@contextmanager
def landing_errors() -> Iterator[None]:
    """A landing file Spark cannot read fails as a :class:`LandingError` naming it."""
    try:
        yield
    except Exception as exc:
        failure = read_failure(exc)
        if failure is None:
            raise
        raise failure from None


def run(spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage) -> dict[str, Any]:
    with landing_errors():
        return _run(spark, settings, ds, wh)


def _run(spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage) -> dict[str, Any]:
    """Ingest one day: every landing table (:func:`ingest_table`), then the topics' definitions
    and matches; returns the row accounting per table (also written by ``publish``)."""
    from pyspark.sql import functions as F

    landing = Storage.at(settings.landing)
    stats: dict[str, Any] = {}
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
    return {
        "tables": stats,
        "topics": topic_stats,
        "allowed_empty": list(settings.allow_empty),
    }


def ingest_table(
    spark: SparkSession,
    settings: Settings,
    ds: dt.date,
    wh: Storage,
    landing: Storage,
    table: str,
) -> tuple[dict[str, Any], DataFrame | None]:
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
        counts["clean"] = tagged.where(F.col("reason").isNull()).count()
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
        counts["snapshot"] = has_snapshot
    else:
        clean = clean_rows(tagged, table)
    write_partition(clean, wh, clean_c, ds)
    counted = None
    if table == "follows" and previous is not None:  # the graph as written against D-1's
        if files:
            counts.update(graph_change(previous, read_partition(spark, wh, clean_c, ds)))
        else:  # no follow changes landed: the previous graph carried over as it was
            edges = partition_rows(wh, clean_c, ds)
            counts.update(edges_before=edges, edges=edges, edges_added=0, edges_removed=0)
    if table != "follows":  # the clean rows as written
        written = read_partition(spark, wh, clean_c, ds)
        counts["clean"] = written.count()
        id_col = DAILY_COUNTS[table][1]
        counted = written.groupBy(id_col).agg(F.count("*").alias("n"))
        if table == "views":  # the events' counts wait for the topics' matches
            write_partition(counted, wh, contract("clean", "view_counts"), ds)
            counted = None
    for df in cached:
        df.unpersist()
    log.info("ingest %s %s: %s", table, ds, counts)
    return counts, counted


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


def ingest_topics(
    spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage, landing: Storage
) -> dict[str, Any]:
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
    if snapshot:
        raw, _ = read_landing(spark, landing, "topics", ds)
        raw = raw if raw is not None else empty_landing(spark, "topics")
        rows = raw.select("topic_id", "predicate", "_file", "_corrupt_text").withColumn(
            "defined_on", F.lit(ds)
        )
        rows_in = raw.count()
    else:
        rows_in = 0
        if has_partition(wh, tp_c, prev):
            rows = read_partition(spark, wh, tp_c, prev).select(
                "topic_id",
                "predicate",
                F.lit(f"clean/topics ds={prev}").alias("_file"),
                F.lit(None).cast("string").alias("_corrupt_text"),
                "defined_on",
            )
        else:
            rows = spark.createDataFrame(
                [],
                "topic_id string, predicate string, _file string, "
                "_corrupt_text string, defined_on date",
            )
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
        return dict(
            rows_in=0,
            clean=0,
            duplicates=0,
            quarantined=0,
            quarantine_reasons={},
            snapshot=snapshot,
            carried=0,
            matches=0,
            matched_events=0,
            matched_topics=0,
        )
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
            carried = counts["duplicates"] + counts["quarantined"] + defined
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
    counts.update(
        clean=defined,
        snapshot=snapshot,
        carried=carried,
        matches=int(m["n"]),
        matched_events=int(m["events"]),
        matched_topics=int(m["topics"]),
    )
    log.info("ingest topics %s: %s", ds, counts)
    return counts

"""Stage ``ingest``: landing files of one day -> ``clean/{follows,events,views}`` + quarantine.

Reads ``LANDING/<table>/ds=D/*`` (CSV with a header, JSON Lines or Parquet, optionally
gzip-compressed), types every column against ``schemas/landing/<table>/v1.json`` and sorts
each input row into exactly one of: clean, duplicate, quarantined (with a reason code).
Duplicates are also written to ``quarantine/<table>`` with reason ``duplicate``, so that
``rows_in = clean + duplicates + quarantined`` can be checked from the tables alone.

Grain and keys of the outputs:
* ``clean/follows``: the whole follow graph at the end of D, one row per (consumer, producer).
  A day with snapshot files (no ``op`` column) replaces the graph; change-log rows (with ``op``)
  are applied on top of the snapshot or of the previous day's graph, the last change per edge
  winning (ties on ``ts``: unfollow wins).
* ``clean/events``: events arriving on D, unique by ``event_id``.
* ``clean/views``: feed views on D, unique by (consumer_id, viewed_at).

Run: ``feedpipe ingest --ds 2026-01-01`` (or through ``spark-submit``/Airflow).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import logging
import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from jobs.common.config import Settings
from jobs.common.storage import Storage, ds_dir
from jobs.common.tables import (
    ContractError,
    check_columns,
    contract,
    read_partition,
    write_partition,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

TABLES = ("follows", "events", "views")
TEXT_FORMATS = {".csv": "csv", ".jsonl": "json", ".json": "json", ".ndjson": "json"}
PARQUET_EXT = (".parquet", ".pq")
REASONS = (
    "unparseable_row",
    "null_key",
    "missing_timestamp",
    "bad_timestamp",
    "future_timestamp",
    "too_late",
    "self_follow",
    "bad_op",
    "bad_attributes",
    "duplicate",
)


class LandingError(ContractError):
    """A landing file cannot be read as its table (named file, named problem)."""


@dataclass(frozen=True)
class LandingFile:
    path: str
    fmt: str  # csv | json | parquet
    columns: tuple[str, ...]  # header (csv), first record's keys (json), schema (parquet)

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


def _first_line(storage: Storage, path: str, compressed: bool) -> str:
    with storage.fs.open_input_stream(path, compression=None) as raw:
        head = bytes(raw.read(1 << 20))
    if compressed:
        try:
            head = zlib.decompressobj(zlib.MAX_WBITS | 32).decompress(head)
        except zlib.error as exc:
            raise LandingError(f"{path}: cannot be decompressed as gzip ({exc})") from exc
    text = head.decode("utf-8-sig", errors="replace")
    for line in text.splitlines():
        if line.strip():
            return line
    return ""


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
        line = _first_line(storage, path, comp == "gzip")
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
        out.append(LandingFile(path, fmt, cols))
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
    """Files of one format and one column layout -> string columns + ``_file``, ``_raw``."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    c = contract("landing", table)
    wanted = c.column_names
    paths = [storage.spark_path(f.path) if not storage.is_local else f.path for f in files]
    fmt = files[0].fmt
    if fmt == "csv":
        header = files[0].columns
        schema = StructType(
            [StructField(n, StringType()) for n in header]
            + [StructField("_corrupt_record", StringType())]
        )
        df = (
            spark.read.schema(schema)
            .option("header", True)
            .option("escape", '"')
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", "_corrupt_record")
            .csv(paths)
        )
        present = [n for n in header if n in wanted]
        raw = F.coalesce(
            F.col("_corrupt_record"), F.to_json(F.struct(*[F.col(f"`{n}`") for n in header]))
        )
    elif fmt == "json":
        fields = [StructField(n, StringType()) for n in wanted] + [
            StructField("_corrupt_record", StringType())
        ]
        df = (
            spark.read.schema(StructType(fields))
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", "_corrupt_record")
            .json(paths)
        )
        present = wanted
        raw = F.coalesce(F.col("_corrupt_record"), F.to_json(F.struct(*[F.col(n) for n in wanted])))
    else:
        df = spark.read.parquet(*paths)
        present = [n for n in df.columns if n in wanted]
        raw = F.to_json(F.struct(*[F.col(f"`{n}`") for n in df.columns]))
        df = df.withColumn("_corrupt_record", F.lit(None).cast("string"))
    cols = []
    for col in c.columns:
        if col.name not in present:
            cols.append(F.lit(None).cast("string").alias(col.name))
        elif col.type.startswith("map"):
            cols.append(
                F.to_json(F.col(col.name)).alias(col.name) if fmt == "parquet" else F.col(col.name)
            )
        else:
            cols.append(F.col(col.name).cast("string").alias(col.name))
    return df.select(
        *cols,
        F.regexp_replace(F.col("_metadata.file_path"), "^file:", "").alias("_file"),
        F.col("_corrupt_record").isNotNull().alias("_corrupt"),
        raw.alias("_raw"),
        F.lit("op" in present).alias("_changelog"),
    )


def read_landing(
    spark: SparkSession, storage: Storage, table: str, ds: dt.date
) -> tuple[DataFrame | None, list[LandingFile]]:
    """All of a day's files of ``table`` as one frame of string columns (None if no files)."""
    from pyspark.sql import functions as F

    files = discover(storage, table, ds)
    if not files:
        return None, files
    c = contract("landing", table)
    groups: dict[tuple[str, tuple[str, ...]], list[LandingFile]] = defaultdict(list)
    for f in files:
        if f.fmt != "json":
            check_columns(c, f.columns, f.path)
        key_cols = f.columns if f.fmt != "json" else ("op",) if f.has_op else ()
        groups[(f.fmt, key_cols)].append(f)
    frames = []
    for (fmt, _), group in sorted(groups.items()):
        df = _read_group(spark, storage, group, table)
        if fmt == "json":  # a JSON file is a change log when its first record has an op
            df = df.withColumn("_changelog", F.lit(any(f.has_op for f in group)))
        frames.append(df)
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out, files


# -- per-table rules ---------------------------------------------------------------------------


def _day_bounds(ds: dt.date) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime(ds.year, ds.month, ds.day)
    return start, start + dt.timedelta(days=1)


def _first_reason(*rules: tuple[Column, str]) -> Column:
    from pyspark.sql import functions as F

    expr = F.lit(None).cast("string")
    for cond, reason in reversed(rules):
        expr = F.when(cond, F.lit(reason)).otherwise(expr)
    return expr


def _blank(c: Column) -> Column:
    from pyspark.sql import functions as F

    return c.isNull() | (F.trim(c) == "")


def tag_events(raw: DataFrame, ds: dt.date, max_lateness_days: int) -> DataFrame:
    """Typed events with ``reason`` (null when clean); duplicates tagged ``duplicate``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    start, end = _day_bounds(ds)
    oldest = start - dt.timedelta(days=max_lateness_days)
    df = raw.withColumn("created_at_ts", parse_timestamp(F.col("created_at"))).withColumn(
        "attributes_map", F.from_json(F.col("attributes"), "map<string,string>")
    )
    reason = _first_reason(
        (F.col("_corrupt"), "unparseable_row"),
        (_blank(F.col("event_id")) | _blank(F.col("producer_id")), "null_key"),
        (_blank(F.col("created_at")), "missing_timestamp"),
        (F.col("created_at_ts").isNull(), "bad_timestamp"),
        (F.col("created_at_ts") >= F.lit(end), "future_timestamp"),
        (F.col("created_at_ts") < F.lit(oldest), "too_late"),
        (F.col("attributes").isNotNull() & F.col("attributes_map").isNull(), "bad_attributes"),
    )
    df = df.withColumn("reason", reason)
    w = Window.partitionBy("event_id").orderBy("created_at_ts", "_file", "_raw")
    dup = F.when(F.col("reason").isNull() & (F.row_number().over(w) > 1), F.lit("duplicate"))
    return df.withColumn("reason", F.coalesce(F.col("reason"), dup)).select(
        "event_id",
        "producer_id",
        F.col("created_at_ts").alias("created_at"),
        "payload",
        "reason",
        "_file",
        "_raw",
    )


def tag_views(raw: DataFrame, ds: dt.date, max_lateness_days: int) -> DataFrame:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    start, end = _day_bounds(ds)
    oldest = start - dt.timedelta(days=max_lateness_days)
    df = raw.withColumn("viewed_at_ts", parse_timestamp(F.col("viewed_at")))
    reason = _first_reason(
        (F.col("_corrupt"), "unparseable_row"),
        (_blank(F.col("consumer_id")), "null_key"),
        (_blank(F.col("viewed_at")), "missing_timestamp"),
        (F.col("viewed_at_ts").isNull(), "bad_timestamp"),
        (F.col("viewed_at_ts") >= F.lit(end), "future_timestamp"),
        (F.col("viewed_at_ts") < F.lit(oldest), "too_late"),
    )
    df = df.withColumn("reason", reason)
    w = Window.partitionBy("consumer_id", "viewed_at_ts").orderBy("_file", "_raw")
    dup = F.when(F.col("reason").isNull() & (F.row_number().over(w) > 1), F.lit("duplicate"))
    return df.withColumn("reason", F.coalesce(F.col("reason"), dup)).select(
        "consumer_id", F.col("viewed_at_ts").alias("viewed_at"), "reason", "_file", "_raw"
    )


def tag_follows(raw: DataFrame, ds: dt.date) -> DataFrame:
    """Typed follow rows with ``op`` normalised; within a kind (snapshot / change log) only the
    winning row per edge stays clean: the snapshot's earliest, the change log's latest."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    start, end = _day_bounds(ds)
    op = F.lower(F.trim(F.col("op")))
    df = raw.withColumn("ts_parsed", parse_timestamp(F.col("ts"))).withColumn("op_norm", op)
    changelog = F.col("_changelog")
    reason = _first_reason(
        (F.col("_corrupt"), "unparseable_row"),
        (_blank(F.col("consumer_id")) | _blank(F.col("producer_id")), "null_key"),
        (F.col("consumer_id") == F.col("producer_id"), "self_follow"),
        (
            changelog & ~F.coalesce(F.col("op_norm").isin("follow", "unfollow"), F.lit(False)),
            "bad_op",
        ),
        (changelog & _blank(F.col("ts")), "missing_timestamp"),
        (~_blank(F.col("ts")) & F.col("ts_parsed").isNull(), "bad_timestamp"),
        (F.col("ts_parsed") >= F.lit(end), "future_timestamp"),
    )
    df = df.withColumn("reason", reason).withColumn(
        "ts_parsed", F.coalesce(F.col("ts_parsed"), F.lit(start).cast("timestamp"))
    )
    w_snap = Window.partitionBy("_changelog", "consumer_id", "producer_id").orderBy(
        F.when(changelog, -F.unix_micros("ts_parsed")).otherwise(F.unix_micros("ts_parsed")),
        F.when(F.col("op_norm") == "unfollow", 0).otherwise(1),
        F.col("_file").desc(),
        F.col("_raw").desc(),
    )
    dup = F.when(F.col("reason").isNull() & (F.row_number().over(w_snap) > 1), F.lit("duplicate"))
    return df.withColumn("reason", F.coalesce(F.col("reason"), dup)).select(
        "consumer_id",
        "producer_id",
        F.col("ts_parsed").alias("ts"),
        F.when(changelog, F.col("op_norm")).alias("op"),
        "_changelog",
        "reason",
        "_file",
        "_raw",
    )


def apply_follows(previous: DataFrame | None, tagged: DataFrame, has_snapshot: bool) -> DataFrame:
    """The graph at the end of the day: base (snapshot, else previous graph) + changes."""
    from pyspark.sql import functions as F

    clean = tagged.where(F.col("reason").isNull())
    snapshot = clean.where(~F.col("_changelog")).select(
        "consumer_id", "producer_id", F.col("ts").alias("followed_at")
    )
    if has_snapshot or previous is None:
        base = snapshot
    else:
        base = previous.select("consumer_id", "producer_id", "followed_at")
    changes = clean.where(F.col("_changelog")).select(
        "consumer_id", "producer_id", F.col("ts").alias("change_ts"), "op"
    )
    merged = base.join(changes, ["consumer_id", "producer_id"], "full_outer")
    return merged.where(F.col("op").isNull() | (F.col("op") == "follow")).select(
        "consumer_id",
        "producer_id",
        F.coalesce(F.col("followed_at"), F.col("change_ts")).alias("followed_at"),
    )


# -- the stage ---------------------------------------------------------------------------------


def quarantine_rows(tagged: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return tagged.where(F.col("reason").isNotNull()).select(
        F.col("_file").alias("source_file"),
        "reason",
        F.lit(None).cast("string").alias("detail"),
        F.col("_raw").alias("raw"),
    )


def _counts(tagged: DataFrame) -> dict[str, int]:
    from pyspark.sql import functions as F

    rows = tagged.groupBy(F.coalesce(F.col("reason"), F.lit("clean")).alias("r")).count().collect()
    by = {r["r"]: int(r["count"]) for r in rows}
    out = {
        "rows_in": sum(by.values()),
        "clean": by.pop("clean", 0),
        "duplicates": by.pop("duplicate", 0),
    }
    out["quarantined"] = sum(by.values())
    out["quarantine_reasons"] = dict(sorted(by.items()))  # type: ignore[assignment]
    return out


def run(spark: SparkSession, settings: Settings, ds: dt.date) -> dict[str, Any]:
    """Ingest one day; returns the row accounting per table (also written by ``publish``)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    landing = Storage.at(settings.landing)
    wh = Storage.at(settings.warehouse)
    stats: dict[str, Any] = {}
    for table in TABLES:
        raw, files = read_landing(spark, landing, table, ds)
        if raw is None:
            log.info("no landing files for %s on %s", table, ds)
            raw = spark.createDataFrame(
                [],
                "consumer_id string, producer_id string, ts string, op string, event_id string, "
                "created_at string, payload string, attributes string, viewed_at string, "
                "_file string, _corrupt boolean, _raw string, _changelog boolean",
            )
        if table == "events":
            tagged = tag_events(raw, ds, settings.max_lateness_days)
        elif table == "views":
            tagged = tag_views(raw, ds, settings.max_lateness_days)
        else:
            tagged = tag_follows(raw, ds)
        tagged = tagged.persist(StorageLevel.MEMORY_AND_DISK)
        counts = _counts(tagged)
        clean_c = contract("clean", table)
        if table == "follows":
            prev_day = ds - dt.timedelta(days=1)
            previous = (
                read_partition(spark, wh, clean_c, prev_day)
                if wh.is_dir(*clean_c.parts(prev_day))
                else None
            )
            has_snapshot = any(not f.has_op for f in files)
            if previous is None and not has_snapshot:
                log.warning("no follow graph before %s and no snapshot: starting from empty", ds)
            clean = apply_follows(previous, tagged, has_snapshot)
            counts["snapshot"] = has_snapshot
        else:
            clean = tagged.where(F.col("reason").isNull())
        write_partition(clean, wh, clean_c, ds)
        write_partition(
            quarantine_rows(tagged), wh, contract("quarantine", "rows"), ds, table=table
        )
        tagged.unpersist()
        stats[table] = counts
        log.info("ingest %s %s: %s", table, ds, counts)
    return {"tables": stats}


def landing_summary(stats: dict[str, Any]) -> str:
    buf = io.StringIO()
    for table, c in stats["tables"].items():
        buf.write(
            f"{table}: {c['rows_in']} in = {c['clean']} clean + {c['duplicates']} duplicates"
            f" + {c['quarantined']} quarantined\n"
        )
    return buf.getvalue()

"""The landing files of one table-day, read as ``ingest`` reads them: discovered under
``LANDING/<table>/ds=D/`` (CSV with a header, JSON Lines or Parquet, optionally gzip-compressed;
an unreadable or unknown file is a :class:`LandingError` naming it), and typed against the
table's landing contract (``schemas/landing/<table>/v1.json``) with each row's raw text kept
for the quarantine.
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
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from jobs.common.storage import Storage, ds_dir
from jobs.common.tables import (
    ContractError,
    check_columns,
    contract,
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


def empty_landing(spark: SparkSession, table: str) -> DataFrame:
    """A day without files for ``table``: an empty frame in the ingest layout."""
    fields = []
    for col in contract("landing", table).columns:
        fields.append(f"`{col.name}` string")
        if col.type == "timestamp":
            fields.append(f"`{col.name}__ts` timestamp")
    fields += ["_file string", "_corrupt_text string", "_changelog boolean"]
    return spark.createDataFrame([], ", ".join(fields))


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

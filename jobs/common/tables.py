"""Table contracts (``schemas/<layer>/<table>/v1.json``) and partition-wise Parquet I/O.

Every write goes through :func:`write_partition`: the frame is conformed to its contract
(columns, order, types; a missing column is an error) and written into a new folder of the
running stage, ``ds=<date>/run=<id>`` (:mod:`jobs.common.versions`), which becomes the day's
table when the stage's record names it. Every read goes through :func:`located`, so a stage
reads only finished runs' versions.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.common import versions
from jobs.common.errors import FeedpipeError
from jobs.common.spark import job_description
from jobs.common.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


DAILY_COUNTS: dict[str, tuple[str, str]] = {
    "events": ("event_counts", "producer_id"),
    "views": ("view_counts", "consumer_id"),
}
"""Per landing table, the per-day count table ``ingest`` writes beside its clean rows and the
id it counts by: ``rates`` reads these instead of rescanning its window (docs/rates.md)."""

PUBLISHED_TABLES: tuple[tuple[str, str], ...] = (
    ("clean", "follows"),
    ("clean", "events"),
    ("clean", "views"),
    ("clean", "topics"),
    ("clean", "topic_events"),
    ("rates", "producer_rates"),
    ("rates", "consumer_rates"),
    ("plan", "edge_plan"),
    ("plan", "views"),
    ("plan", "view_members"),
    ("plan", "consumer_sources"),
    ("plan", "plan_cost"),
    ("feeds", "producer_feed"),
    ("feeds", "view_feed"),
    ("feeds", "consumer_feed"),
    ("feeds", "event_store"),
)
"""(layer, table) of every table a published day holds: ``publish`` refuses a day missing
one, counts them in the manifest and copies them to ``publish_to``."""


class ContractError(FeedpipeError, ValueError):
    """A frame or file does not match its table contract."""


def schemas_root() -> Path:
    """The ``schemas/`` folder (beside the ``jobs`` package; ``FEEDPIPE_SCHEMAS`` overrides)."""
    env = os.environ.get("FEEDPIPE_SCHEMAS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "schemas"


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool
    doc: str = ""
    dictionary: bool = True
    """Parquet dictionary encoding (contract ``"dictionary": false`` turns it off): for ids
    with more distinct values per file than a dictionary page holds, which Parquet would
    dictionary-encode only until the page is full and then write plain anyway."""


@dataclass(frozen=True)
class Contract:
    layer: str
    name: str
    version: int
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    sort_by: tuple[str, ...]
    files: str
    required: tuple[str, ...]
    doc: str
    row_group_mb: float | None = None
    """Parquet row group size (contract ``"row_group_mb"``; Spark's 128 MiB when absent): small
    row groups of a table sorted by its key let a reader filtering on ids read only the row
    groups whose statistics can hold them (``feeds/event_store``)."""

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def schema(self) -> StructType:
        from pyspark.sql.types import StructType

        ddl = ", ".join(f"`{c.name}` {c.type}" for c in self.columns)
        struct = StructType.fromDDL(ddl)
        assert isinstance(struct, StructType)
        nullable = {c.name: c.nullable for c in self.columns}
        for f in struct.fields:
            f.nullable = nullable[f.name]
        return struct

    def parts(self, table: str | None = None) -> tuple[str, ...]:
        """Path parts of the table's folder below the warehouse root (``table`` names a
        quarantine table); its partitions' versions are below it (:func:`located`)."""
        return (self.layer, table or self.name)

    def ref(self, table: str | None = None) -> str:
        """``layer/table``, as records and manifests name the table."""
        return versions.table_key(self.layer, table or self.name)


@functools.cache
def contract(layer: str, name: str, version: int = 1) -> Contract:
    path = schemas_root() / layer / name / f"v{version}.json"
    try:
        spec: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ContractError(f"no contract {layer}/{name} v{version} at {path}") from exc
    cols: list[Column] = []
    for c in spec["columns"]:
        dictionary = c.get("dictionary", True)
        if not isinstance(dictionary, bool):
            raise ContractError(
                f"{layer}/{name} v{version}: column {c['name']}: "
                f'"dictionary" must be true or false, not {dictionary!r}'
            )
        cols.append(Column(c["name"], c["type"], bool(c["nullable"]), c.get("doc", ""), dictionary))
    return Contract(
        layer=layer,
        name=name,
        version=int(spec["version"]),
        columns=tuple(cols),
        key=tuple(spec.get("key", ())),
        sort_by=tuple(spec.get("sort_by", ())),
        files=spec.get("files", "range"),
        required=tuple(spec.get("required", [c.name for c in cols if not c.nullable])),
        doc=spec.get("doc", ""),
        row_group_mb=spec.get("row_group_mb"),
    )


def contract_of(key: str) -> Contract:
    """The contract of the table ``layer/table`` (each ``quarantine/<table>`` has
    ``quarantine/rows``'s)."""
    layer, _, name = key.partition("/")
    return contract(layer, "rows") if layer == "quarantine" else contract(layer, name)


def conform(df: DataFrame, c: Contract) -> DataFrame:
    """Select the contract's columns in order, cast to its types; missing ones are an error."""
    from pyspark.sql import functions as F

    missing = [n for n in c.column_names if n not in df.columns]
    if missing:
        raise ContractError(f"{c.layer}/{c.name}: missing columns {missing} (have {df.columns})")
    return df.select(*[F.col(col.name).cast(col.type).alias(col.name) for col in c.columns])


def write_partition(
    df: DataFrame,
    storage: Storage,
    c: Contract,
    ds: dt.date,
    *,
    files: int = 4,
    table: str | None = None,
    keep: bool = True,
) -> None:
    """Write ``df`` as a new version of partition ``ds`` of table ``c``.

    Inside a stage's run (:func:`jobs.common.versions.stage_run`) the version becomes the
    day's working table when the stage's record is written; outside one (``eval/*`` tables)
    it replaces the partition's older versions once it is complete.

    The contract's ``files`` says how: ``single`` (one file), ``range`` (``files`` files
    range-partitioned and sorted on ``sort_by``, for readers that look up ids) or ``as_is``
    (the frame's own partitioning, no shuffle: for large tables only scanned whole).

    A range write takes its bounds from the table's latest earlier partition when that one
    is usable (:func:`previous_bounds`): ids change little from day to day, so the frame is
    computed once and shuffled straight to its file. Otherwise it samples the frame for the
    bounds, which runs the frame twice; the frame is then kept (memory, else local disk)
    between the two passes rather than computed again. ``keep=False`` is for a frame that is
    itself a cheap read of a kept one (a filter of a persisted frame): both passes scan that
    instead of building a second copy."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    out = conform(df, c)
    kept: DataFrame | None = None
    if c.files == "single" or files <= 1:
        out = out.coalesce(1)
    elif c.files == "range" and c.sort_by:
        bounds = previous_bounds(storage, c, ds, files, table)
        if bounds is not None:
            # file i holds the keys from bounds[i-1] (inclusive) to bounds[i]; a null key
            # (nulls sort first) goes to file 0, as repartitionById sends it
            first = F.col(c.sort_by[0])
            file_of = sum(((first >= F.lit(b)).cast("int") for b in bounds), F.lit(0))
            out = out.repartitionById(files, file_of)
        else:
            if keep:
                out = kept = out.persist(StorageLevel.MEMORY_AND_DISK)
            out = out.repartitionByRange(files, F.col(c.sort_by[0]))
    if c.sort_by and c.files != "as_is":
        out = out.sortWithinPartitions(*c.sort_by)
    run = versions.current()
    if run is not None and run.ds != ds:
        raise ValueError(f"a run of {run.ds} cannot write {c.ref(table)} of {ds}")
    folder = run.folder if run is not None else f"{versions.RUN_PREFIX}{versions.new_run_id()}"
    final = versions.version_parts(c.ref(table), ds, folder)
    writer = out.write.mode("overwrite").options(**plain_encoding(c))
    # names the write's jobs in the Spark UI and event logs (bench/eventlog.py), which
    # otherwise show "parquet at NativeMethodAccessorImpl.java:0" for every table
    try:
        with job_description(df.sparkSession, f"write {c.layer}/{table or c.name} ds={ds}"):
            writer.parquet(storage.spark_path(*final))
    finally:
        if kept is not None:  # only what this write kept: never the caller's cache
            kept.unpersist()
    if run is not None:
        run.outputs[c.ref(table)] = folder
    else:
        versions.drop_older(storage, c.ref(table), ds, folder)


def plain_encoding(c: Contract) -> dict[str, str]:
    """Parquet writer options of the contract: its ``"dictionary": false`` columns without a
    dictionary, and its row group size (docs/data-contracts.md)."""
    options = {
        f"parquet.enable.dictionary#{col.name}": "false" for col in c.columns if not col.dictionary
    }
    if c.row_group_mb:
        options["parquet.block.size"] = str(int(c.row_group_mb * (1 << 20)))
    return options


def previous_bounds(
    storage: Storage, c: Contract, ds: dt.date, files: int, table: str | None = None
) -> list[Any] | None:
    """The range bounds of the latest partition of the table before ``ds``: the smallest
    first sort key of each of its files but the first, from the files' Parquet footers (no
    data is read). ``None`` (sample afresh) when there is no such partition, when it does not
    have exactly ``files`` files, when a file has no rows or no statistics for the key, or
    when its files are unbalanced (the largest more than twice the mean): a sampled write
    balances the files again, so new ids that all sort after the last bound cannot keep
    growing the last file."""
    import pyarrow.parquet as pq

    earlier = [d for d in partition_days(storage, c, table) if d < ds]
    if not earlier:
        return None
    where = located(storage, c, max(earlier), table)
    assert where is not None
    paths = [p for p in storage.list_files(*where) if p.endswith(".parquet")]
    if len(paths) != files:
        return None
    lows, rows = [], []
    for path in paths:
        with storage.fs.open_input_file(path) as f:
            meta = pq.ParquetFile(f).metadata
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        if c.sort_by[0] not in names or meta.num_rows == 0:
            return None
        col = names.index(c.sort_by[0])
        mins = []
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(col).statistics
            if meta.row_group(g).num_rows == 0:
                continue
            if stats is None or not stats.has_min_max:
                return None
            mins.append(stats.min)
        lows.append(min(mins))
        rows.append(meta.num_rows)
    if max(rows) > 2 * sum(rows) / len(rows):
        return None
    bounds = sorted(lows)[1:]
    if len(set(bounds)) != len(bounds):
        return None
    return bounds


def located(
    storage: Storage, c: Contract, ds: dt.date, table: str | None = None
) -> tuple[str, ...] | None:
    """The path parts of the version of partition ``ds`` a stage reads, or None
    (:func:`jobs.common.versions.locate`)."""
    return versions.locate(storage, c.ref(table), ds)


def has_partition(storage: Storage, c: Contract, ds: dt.date, table: str | None = None) -> bool:
    return located(storage, c, ds, table) is not None


def partition_days(storage: Storage, c: Contract, table: str | None = None) -> list[dt.date]:
    """The days the table has a version of (that a stage would read), oldest first."""
    listed = storage.list_partitions(*c.parts(table))
    return [d for d in listed if located(storage, c, d, table) is not None]


def partition_rows(storage: Storage, c: Contract, ds: dt.date, table: str | None = None) -> int:
    """Rows of partition ``ds`` from its Parquet footers (0 when it has none)."""
    where = located(storage, c, ds, table)
    return int(storage.dataset(*where).count_rows()) if where else 0


def read_partition(
    spark: SparkSession, storage: Storage, c: Contract, ds: dt.date, table: str | None = None
) -> DataFrame:
    """One partition with the contract's schema (no ``ds`` column)."""
    where = located(storage, c, ds, table)
    versions.note_read(c.ref(table), ds)
    if where is None:
        raise FileNotFoundError(
            f"{c.ref(table)} has no partition {ds} in {storage.uri()}: "
            "run the stage that writes it first"
        )
    return spark.read.schema(c.schema()).parquet(storage.spark_path(*where))


def read_partitions(
    spark: SparkSession, storage: Storage, c: Contract, days: Iterable[dt.date]
) -> DataFrame:
    """Several partitions (those that exist), with a ``ds`` date column."""
    from pyspark.sql import functions as F

    found = [(d, located(storage, c, d)) for d in days]
    paths = [storage.spark_path(*where) for d, where in found if where is not None]
    for d, where in found:
        if where is not None:
            versions.note_read(c.ref(), d)
    if not paths:
        return spark.createDataFrame([], c.schema()).withColumn("ds", F.lit(None).cast("date"))
    return (
        spark.read.schema(c.schema())
        .parquet(*paths)
        .withColumn(
            "ds", F.to_date(F.regexp_extract(F.col("_metadata.file_path"), r"ds=([0-9-]{10})", 1))
        )
    )


def empty_frame(spark: SparkSession, c: Contract) -> DataFrame:
    return spark.createDataFrame([], c.schema())


def check_columns(c: Contract, present: Sequence[str], where: str) -> None:
    """A landing file must carry every required column of its contract."""
    missing = [n for n in c.required if n not in present]
    if missing:
        raise ContractError(
            f"{where}: missing required column(s) {', '.join(missing)} "
            f"(found: {', '.join(present) or 'none'}; contract {c.layer}/{c.name} v{c.version})"
        )

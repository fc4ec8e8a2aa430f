"""The published tables, for queries: each published day's version of a table, and nothing else.

A table's folder holds every run's version of each day (``ds=D/run=R/``) while a day is being
rebuilt, and killed runs leave theirs until the day is next published; reading the folder
whole would mix them. These helpers name only what the days' manifests publish
(:mod:`jobs.common.versions`), as ``feedpipe tables`` prints it::

    from jobs.serving import published
    published.dataset("var/warehouse", "plan/plan_cost").to_table().to_pandas()  # has ``ds``
    published.folders("var/warehouse", "feeds/consumer_feed", ds)               # for Spark
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.common import ledger, versions
from jobs.common.storage import Storage

if TYPE_CHECKING:
    import pyarrow.dataset as pads


@dataclass(frozen=True)
class Location:
    ds: dt.date
    table: str
    uri: str
    rows: int | None
    parts: tuple[str, ...]


def published_days(wh: Storage) -> list[dt.date]:
    """Every published day, oldest first."""
    return [d for d in wh.list_partitions(ledger.MANIFESTS) if ledger.is_published(wh, d)]


def locations(
    warehouse: str | Storage,
    table: str | None = None,
    ds: dt.date | None = None,
    unpublished: bool = False,
) -> list[Location]:
    """The published folder of ``table`` (every table when None) on day ``ds`` (every
    published day when None); ``unpublished``: the day's latest complete run instead."""
    wh = warehouse if isinstance(warehouse, Storage) else Storage.at(warehouse)
    days = [ds] if ds is not None else published_days(wh)
    out = []
    for d in days:
        day = versions.working(wh, d) if unpublished else versions.published(wh, d)
        if day is None:
            continue
        rows = {k: v.get("rows") for k, v in (day.manifest or {}).get("tables", {}).items()}
        for key in sorted(day.folders) if table is None else [table]:
            parts = day.parts(key)
            if parts is not None:
                out.append(Location(d, key, wh.uri(*parts), rows.get(key), parts))
    return out


def folders(warehouse: str, table: str, ds: dt.date | None = None) -> list[str]:
    """The published folders of one table (Spark spells S3 ones ``s3a://``)."""
    wh = Storage.at(warehouse)
    return [
        loc.uri if wh.is_local else "s3a://" + loc.uri.removeprefix("s3://")
        for loc in locations(wh, table, ds)
    ]


def dataset(warehouse: str, table: str, ds: dt.date | None = None) -> pads.Dataset:
    """One table over its published days as a pyarrow dataset with ``ds`` (and ``run``)
    columns: pandas, DuckDB and Polars read it directly."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    wh = Storage.at(warehouse)
    files = [f for loc in locations(wh, table, ds) for f in wh.list_files(*loc.parts)]
    hive = pads.partitioning(pa.schema([("ds", pa.date32()), ("run", pa.string())]), flavor="hive")
    return pads.dataset(
        files,
        filesystem=wh.fs,
        format="parquet",
        partitioning=hive,
        partition_base_dir=wh.path(*table.split("/")),
    )

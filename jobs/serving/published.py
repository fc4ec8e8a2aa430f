"""The published tables, for queries: each published day's version of a table, and nothing else.

A table's folder holds every run's version of each day (``ds=D/run=R/``) while a day is being
rebuilt, and killed runs leave theirs until the day is next published; reading the folder
whole would mix them. These helpers name only what the days' manifests publish
(:mod:`jobs.common.versions`), as ``feedpipe tables`` prints it::

    from jobs.serving import published
    published.dataset("var/demo/warehouse", "plan.plan_cost").to_table().to_pandas()  # has ds
    published.folders("var/demo/warehouse", "feeds/consumer_feed", ds)                # for Spark

A table is named ``<layer>.<table>`` or ``<layer>/<table>``. A warehouse that does not exist
or has no published day, a day that is not published and a table that no published day has
raise :class:`NotPublished`, naming what exists instead: nothing is silently empty.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.common import ledger, versions
from jobs.common.storage import Storage, StorageError

if TYPE_CHECKING:
    import pyarrow.dataset as pads

SHOWN_DAYS = 5
"""Published days an error message lists one by one (more are shown as a range)."""


class NotPublished(StorageError):
    """The warehouse, day or table asked for has no published version."""


@dataclass(frozen=True)
class Location:
    ds: dt.date
    table: str
    uri: str
    rows: int | None
    parts: tuple[str, ...]


def table_key(name: str) -> str:
    """``layer/table`` from either spelling of a table's name, ``plan.plan_cost`` (SQL) or
    ``plan/plan_cost`` (its folder)."""
    name = name.strip()
    if "/" not in name and "." in name:
        layer, _, table = name.partition(".")
        return f"{layer}/{table}"
    return name


def _storage(warehouse: str | Storage) -> Storage:
    return warehouse if isinstance(warehouse, Storage) else Storage.at(warehouse)


def published_days(wh: Storage) -> list[dt.date]:
    """Every published day, oldest first (none for a warehouse that does not exist)."""
    return [d for d in wh.list_partitions(ledger.MANIFESTS) if ledger.is_published(wh, d)]


def days_text(days: list[dt.date]) -> str:
    """Days for a message: each of a few, else the first and the last."""
    if len(days) <= SHOWN_DAYS:
        return ", ".join(str(d) for d in days) or "none"
    return f"{days[0]} to {days[-1]} ({len(days)} days)"


def require_warehouse(wh: Storage) -> None:
    """:class:`NotPublished` when there is nothing at the warehouse root."""
    if not wh.exists():
        raise NotPublished(f"no warehouse at {wh.uri()}: the folder does not exist")


def require_days(warehouse: str | Storage) -> list[dt.date]:
    """Every published day, oldest first; :class:`NotPublished` when there is none."""
    wh = _storage(warehouse)
    require_warehouse(wh)
    days = published_days(wh)
    if not days:
        raise NotPublished(f"no published day in the warehouse {wh.uri()}")
    return days


def latest_day(warehouse: str | Storage) -> dt.date:
    """The newest published day (``manifests/latest``); :class:`NotPublished` when none."""
    wh = _storage(warehouse)
    found = ledger.latest(wh)
    return found if found is not None else require_days(wh)[-1]


def day_version(warehouse: str | Storage, ds: dt.date, hint: str = "") -> versions.DayVersion:
    """The published version of day ``ds``; :class:`NotPublished` (the published days named,
    then ``hint``) when the day is not published."""
    wh = _storage(warehouse)
    require_warehouse(wh)
    day = versions.published(wh, ds)
    if day is None:
        days = published_days(wh)
        raise NotPublished(
            f"{ds} is not published in {wh.uri()}; published days: {days_text(days)}{hint}"
        )
    return day


def _version(wh: Storage, ds: dt.date, unpublished: bool) -> versions.DayVersion:
    if not unpublished:
        return day_version(wh, ds)
    day = versions.working(wh, ds)
    if not day.folders:
        raise NotPublished(f"no stage has run for {ds} in {wh.uri()}")
    return day


def locations(
    warehouse: str | Storage,
    table: str | None = None,
    ds: dt.date | None = None,
    unpublished: bool = False,
) -> list[Location]:
    """The published folder of ``table`` (every table when None) on day ``ds`` (every
    published day when None); ``unpublished``: the day's latest complete run instead.
    :class:`NotPublished` when the warehouse, the day or the table is not there."""
    wh = _storage(warehouse)
    require_warehouse(wh)
    key = table_key(table) if table is not None else None
    days = [ds] if ds is not None else require_days(wh)
    out: list[Location] = []
    present: set[str] = set()
    for d in days:
        day = _version(wh, d, unpublished)
        present.update(day.folders)
        rows = {k: v.rows for k, v in day.manifest.tables.items()} if day.manifest else {}
        for name in sorted(day.folders) if key is None else [key]:
            parts = day.parts(name)
            if parts is not None:
                out.append(Location(d, name, wh.uri(*parts), rows.get(name), parts))
    if key is not None and key not in present:
        where = (
            f"the published days of {wh.uri()}"
            if ds is None
            else f"the {'latest complete run' if unpublished else 'published version'} of {ds}"
            f" in {wh.uri()}"
        )
        raise NotPublished(f"no table {table!r} in {where}; tables: {', '.join(sorted(present))}")
    return out


def folders(warehouse: str, table: str, ds: dt.date | None = None) -> list[str]:
    """The published folders of one table (Spark spells S3 ones ``s3a://``)."""
    wh = Storage.at(warehouse)
    return [
        loc.uri if wh.is_local else "s3a://" + loc.uri.removeprefix("s3://")
        for loc in locations(wh, table, ds)
    ]


def dataset(warehouse: str, table: str, ds: dt.date | None = None) -> pads.Dataset:
    """One table over its published days (or day ``ds``) as a pyarrow dataset with ``ds``
    (and ``run``) columns: pandas, DuckDB and Polars read it directly."""
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
        partition_base_dir=wh.path(*table_key(table).split("/")),
    )

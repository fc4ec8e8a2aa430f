"""The published tables by name, for analysts: a DuckDB database of views, and catalog
statements for Spark SQL and Hive (Trino reads what Hive registers).

Names are ``<layer>.<table>`` (``feeds.consumer_feed``, ``plan.plan_cost``, ``clean.events``),
each over the published versions of every published day only (:mod:`jobs.serving.published`),
with a ``ds`` column. The tables are those the published days' manifests name, the same
``feedpipe tables`` lists (quarantine and count tables included). DuckDB's database also has
``feeds.assembled``: every consumer's feed as the feed reader returns it (its sources merged,
latest k, or k,t-diverse under per-producer coherency), with each event's ``payload`` and
``attributes`` (and ``feeds.feed_settings``, how each day's feeds were built, which it reads).
A warehouse without a published day has no catalog: :class:`~jobs.serving.published.NotPublished`.

``<warehouse>/catalog/feedpipe.duckdb`` is rewritten after every publish (written beside, then
renamed over the old file); local warehouses only, since DuckDB reads S3 only through its
``httpfs`` extension (docs/operations.md, "Tables by name").
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.common import versions
from jobs.common.dates import recent_since
from jobs.common.records import MaterializeRecord
from jobs.common.storage import Storage
from jobs.common.tables import contract_of
from jobs.serving.published import Location, locations, published_days

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DUCKDB_FILE = ("catalog", "feedpipe.duckdb")
"""Path parts of the DuckDB database below the warehouse root."""

DIALECTS = ("spark", "hive")

DUCKDB_ONLY = ("feeds.feed_settings", "feeds.assembled")
"""The DuckDB database's tables beside the published ones: how each day's feeds were built,
and every consumer's assembled feed."""

HIVE_TYPES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _by_table(wh: Storage) -> dict[str, list[Location]]:
    """Every table of the published days (``layer/table``, sorted) and its published folders;
    :class:`~jobs.serving.published.NotPublished` when there is no published day."""
    out: dict[str, list[Location]] = {}
    for loc in locations(wh):
        out.setdefault(loc.table, []).append(loc)
    return dict(sorted(out.items()))


def _name(table: str) -> str:
    return table.replace("/", ".")


def _layers(tables: dict[str, list[Location]]) -> list[str]:
    return list(dict.fromkeys(t.split("/", 1)[0] for t in tables))


def assembled_sql() -> str:
    """``feeds.assembled``: the reader's merge (jobs/serving/reader.py) in SQL. Items are the
    consumer's own feed, its pulled producers' feeds and its views' feeds, each event once;
    under per-producer coherency the pool is each producer's latest ``k_p`` and each recent
    producer's newest event goes first (``select_diverse``); the first k by that order are
    shown newest first."""
    return """
CREATE OR REPLACE VIEW feeds.assembled AS
WITH items AS (
    SELECT ds, consumer_id, event_id, producer_id, created_at FROM feeds.consumer_feed
    UNION ALL
    SELECT s.ds, s.consumer_id, p.event_id, p.author_id AS producer_id, p.created_at
    FROM plan.consumer_sources s JOIN feeds.producer_feed p
      ON s.source_type = 'producer' AND p.producer_id = s.source_id AND p.ds = s.ds
    UNION ALL
    SELECT s.ds, s.consumer_id, v.event_id, v.producer_id, v.created_at
    FROM plan.consumer_sources s JOIN feeds.view_feed v
      ON s.source_type = 'view' AND v.view_id = s.source_id AND v.ds = s.ds
),
pool AS (
    SELECT i.*, f.k, f.per_producer, f.k_p, f.recent_since,
           row_number() OVER (PARTITION BY i.ds, i.consumer_id, i.producer_id
                              ORDER BY i.created_at DESC, i.event_id DESC) AS prank
    FROM (SELECT DISTINCT * FROM items) i JOIN feeds.feed_settings f USING (ds)
),
picked AS (
    SELECT *, row_number() OVER (
        PARTITION BY ds, consumer_id
        ORDER BY (per_producer AND prank = 1 AND created_at >= recent_since) DESC,
                 created_at DESC, event_id DESC) AS pick
    FROM pool
    WHERE NOT per_producer OR prank <= k_p
),
ranked AS (
    SELECT ds, consumer_id, event_id, producer_id, created_at,
           row_number() OVER (PARTITION BY ds, consumer_id
                              ORDER BY created_at DESC, event_id DESC) AS rank
    FROM picked WHERE pick <= k
)
SELECT r.ds, r.consumer_id, r.rank, r.event_id, r.producer_id, r.created_at,
       e.payload, e.attributes
FROM ranked r LEFT JOIN feeds.event_store e ON e.ds = r.ds AND e.event_id = r.event_id
"""


def feed_settings(wh: Storage) -> list[tuple[dt.date, int, bool, int, dt.datetime]]:
    """Per published day, how its feeds were materialized (the materialize record): k,
    per-producer coherency or not, k_p and the start of the diversity window."""
    out = []
    for ds in published_days(wh):
        day = versions.published(wh, ds)
        state = day.records.get("materialize") if day else None
        if not isinstance(state, MaterializeRecord) or state.feed_k is None:
            continue
        out.append(
            (
                ds,
                state.feed_k,
                state.coherency == "per_producer",
                state.k_per_producer,
                recent_since(ds, state.window_hours).replace(tzinfo=None),
            )
        )
    return out


def duckdb_statements(wh: Storage) -> list[str]:
    """The statements that build the database: one schema per layer, one view per published
    table over its published files, ``feeds.feed_settings`` and ``feeds.assembled``."""
    tables = _by_table(wh)
    out = [f"CREATE SCHEMA IF NOT EXISTS {layer}" for layer in _layers(tables)]
    for table, locs in tables.items():
        files = [f for loc in locs for f in wh.list_files(*loc.parts) if f.endswith(".parquet")]
        name = _name(table)
        if not files:
            columns = ", ".join(
                f"NULL::{_duck_type(c.type)} AS {c.name}" for c in contract_of(table).columns
            )
            out.append(
                f"CREATE OR REPLACE VIEW {name} AS SELECT {columns}, NULL::DATE AS ds, "
                "NULL::VARCHAR AS run WHERE false"
            )
            continue
        listed = ", ".join(_quote(f) for f in files)
        out.append(
            f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet([{listed}], "
            "hive_partitioning = true, hive_types = {'ds': DATE, 'run': VARCHAR}, "
            "union_by_name = true)"
        )
    out.append(
        "CREATE OR REPLACE TABLE feeds.feed_settings (ds DATE, k INTEGER, per_producer BOOLEAN, "
        "k_p INTEGER, recent_since TIMESTAMPTZ)"
    )
    for ds, k, per_producer, k_p, since in feed_settings(wh):
        out.append(
            f"INSERT INTO feeds.feed_settings VALUES (DATE '{ds}', {k}, {str(per_producer).lower()}"
            f", {k_p}, TIMESTAMPTZ '{since:%Y-%m-%d %H:%M:%S.%f}+00:00')"
        )
    out.append(assembled_sql())
    return out


def _duck_type(spark_type: str) -> str:
    t = spark_type.lower()
    if t.startswith("map<"):
        return "MAP(VARCHAR, VARCHAR)"
    return {
        "string": "VARCHAR",
        "long": "BIGINT",
        "int": "INTEGER",
        "integer": "INTEGER",
        "double": "DOUBLE",
        "boolean": "BOOLEAN",
        "timestamp": "TIMESTAMP WITH TIME ZONE",
        "date": "DATE",
    }.get(t, "VARCHAR")


def write_duckdb(warehouse: str | Storage) -> Path | None:
    """Rewrite ``<warehouse>/catalog/feedpipe.duckdb`` from the published days; None (nothing
    written) for a warehouse on S3."""
    import duckdb

    wh = warehouse if isinstance(warehouse, Storage) else Storage.at(warehouse)
    if not wh.is_local:
        return None
    statements = duckdb_statements(wh)  # refused before anything is written: no published day
    final = Path(wh.path(*DUCKDB_FILE))
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
    con = duckdb.connect(str(tmp))
    try:
        for statement in statements:
            con.execute(statement)
    finally:
        con.close()
    os.replace(tmp, final)  # a reader opens the old database or the new one, never a mix
    return final


def spark_statements(
    warehouse: str | Storage, dialect: str = "spark", replace: bool = False
) -> list[str]:
    """The statements that register every published table in a Spark SQL or Hive catalog:
    ``CREATE TABLE IF NOT EXISTS ... PARTITIONED BY (ds) LOCATION '<table folder>'``, then for
    each published day its partition added if missing and set to the day's published folder.
    Run again, they register the days published since and move a republished day to its new
    version; they never drop anything. ``replace``: drop each table first (the tables are
    external: dropping one leaves its files), for a table whose columns have changed."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; one of {', '.join(DIALECTS)}")
    wh = warehouse if isinstance(warehouse, Storage) else Storage.at(warehouse)
    return _statements(wh, _by_table(wh), dialect, replace)


def _statements(
    wh: Storage, tables: dict[str, list[Location]], dialect: str, replace: bool
) -> list[str]:
    def uri(parts: tuple[str, ...] | list[str]) -> str:
        return _quote(wh.spark_path(*parts))

    out = [f"CREATE DATABASE IF NOT EXISTS {layer}" for layer in _layers(tables)]
    for table, locs in tables.items():
        name = _name(table)
        if replace:
            out.append(f"DROP TABLE IF EXISTS {name}")
        out.append(_create_table(name, table, uri(table.split("/")), dialect))
        for loc in locs:
            spec = f"PARTITION (ds = '{loc.ds}')"
            out.append(f"ALTER TABLE {name} ADD IF NOT EXISTS {spec} LOCATION {uri(loc.parts)}")
            out.append(f"ALTER TABLE {name} {spec} SET LOCATION {uri(loc.parts)}")
    return out


def _create_table(name: str, table: str, location: str, dialect: str) -> str:
    columns = contract_of(table).columns
    if dialect == "spark":
        cols = ", ".join(f"`{col.name}` {col.type.upper()}" for col in columns)
        return (
            f"CREATE TABLE IF NOT EXISTS {name} ({cols}, `ds` DATE) USING PARQUET "
            f"PARTITIONED BY (ds) LOCATION {location}"
        )
    cols = ", ".join(f"`{c.name}` {HIVE_TYPES.get(c.type, c.type).upper()}" for c in columns)
    return (
        f"CREATE EXTERNAL TABLE IF NOT EXISTS {name} ({cols}) PARTITIONED BY (`ds` DATE) "
        f"STORED AS PARQUET LOCATION {location}"
    )


def register(spark: SparkSession, warehouse: str | Storage, replace: bool = False) -> list[str]:
    """Run :func:`spark_statements` in ``spark``'s catalog (its Hive metastore when it has
    one, else the session's own in-memory catalog); returns the tables registered."""
    wh = warehouse if isinstance(warehouse, Storage) else Storage.at(warehouse)
    tables = _by_table(wh)
    for statement in _statements(wh, tables, "spark", replace):
        spark.sql(statement)
    return [_name(t) for t in tables]

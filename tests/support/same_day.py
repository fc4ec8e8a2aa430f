"""A day's tables built elsewhere (a cluster, a Spark Connect server) against a local run."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow.dataset as pads

from jobs.common.tables import PUBLISHED_TABLES
from jobs.serving.reader import FeedReader
from support import naive
from support.paths import version


def rows(
    warehouse: str, layer: str, table: str, day: dt.date, published: bool = True
) -> list[tuple]:
    """The rows of the day's published version of a table (or of its working version)."""
    folder = version(warehouse, layer, table, day, published=published)
    data = pads.dataset(str(folder), format="parquet", ignore_prefixes=["_", "."]).to_table()
    return sorted(tuple(r.values()) for r in data.to_pylist())


def assert_same_day(got: str, local: str, landing: Path, day: dt.date, k: int, where: str) -> None:
    """Every published table of ``got`` equals the local run's row for row, something was
    materialized, the feeds are the naive answer and the day is published."""
    differing = [
        f"{layer}/{table}"
        for layer, table in PUBLISHED_TABLES
        if rows(got, layer, table, day) != rows(local, layer, table, day)
    ]
    assert not differing, f"tables differ between {where} and the local run: {differing}"
    feeds = ("producer_feed", "view_feed", "consumer_feed")
    assert sum(len(rows(got, "feeds", t, day)) for t in feeds), "nothing was materialized"

    expected = naive.feeds(landing, day, day, k)
    served = FeedReader(got, day).feeds(sorted(expected), k)
    assert {c: [i.event_id for i in f] for c, f in served.items()} == expected
    assert (Path(got) / "manifests" / f"ds={day}" / "_SUCCESS").exists()

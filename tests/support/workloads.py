"""The generated workloads the stage and end-to-end tests build on.

``churn``: five days of ``ff2010`` at scale 0.004 (about 800 consumers) with 3% of edges
unfollowed and as many followed every day, its tables in mixed formats (CSV follows, JSON
Lines events, Parquet views, gzipped text), two popular producers posting 30 times their
rate on the third day (a flash event, Feeding Frenzy 5.5), plus a producer that posts far
faster than the others, followed from day 2 by 25 consumers. ``build`` runs the stages over
it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from support import naive

START = dt.date(2026, 1, 1)
DAYS = 5
LAST = START + dt.timedelta(days=DAYS - 1)
K = 5
K_P = 2
HOURS = 6.0
FAST = "fast-producer"
BUILD = ("ingest", "rates", "plan", "materialize")
SEED = 11
FLASH_DAY = START + dt.timedelta(days=2)
PURE = ("push-all", "pull-all")


def add_fast_producer(landing: Path, consumers: list[str]) -> None:
    """A producer posting 40 events a day, all in the last four hours (about 20 times the
    usual rate), followed from day 2 by ``consumers``."""
    day2 = START + dt.timedelta(days=1)
    rows = [
        {"consumer_id": c, "producer_id": FAST, "ts": f"{day2}T00:30:00Z", "op": "follow"}
        for c in consumers
    ]
    pd.DataFrame(rows).to_csv(landing / "follows" / f"ds={day2}" / "fast.csv", index=False)
    for i in range(DAYS):
        day = START + dt.timedelta(days=i)
        lines = [
            {
                "event_id": f"fast-{day}-{j:02d}",
                "producer_id": FAST,
                "created_at": f"{day}T{20 + j // 10:02d}:{(j % 10) * 6:02d}:00Z",
            }
            for j in range(40)
        ]
        text = "\n".join(json.dumps(x) for x in lines) + "\n"
        (landing / "events" / f"ds={day}" / "fast.jsonl").write_text(text)


def profile():
    """The churn days' generator profile."""
    from jobs.workloads.generate import PROFILES, scaled

    return dataclasses.replace(
        scaled(PROFILES["ff2010"], 0.004),
        unfollow_share=0.03,
        flash_producers=2,
        flash_day=(FLASH_DAY - START).days,
        flash_factor=30.0,
    )


def flashing() -> set[str]:
    """The producers with a flash event on ``FLASH_DAY``."""
    from jobs.workloads.generate import flash_producer_ids

    return set(flash_producer_ids(profile(), SEED))


def churn(landing: Path) -> Path:
    from jobs.common.storage import Storage
    from jobs.workloads.generate import generate

    formats = {"follows": "csv", "events": "jsonl", "views": "parquet"}
    generate(
        Storage.at(str(landing)), START, DAYS, profile(), seed=SEED, formats=formats, gzip_text=True
    )
    first = naive.graph(landing, START, START)
    add_fast_producer(landing, sorted({c for c, _ in first})[:25])
    return landing


def table_rows(spark, settings, layer: str, table: str, ds: dt.date) -> list[tuple]:
    """A table's partition of day ``ds`` as sorted tuples."""
    from jobs.common.storage import Storage
    from jobs.common.tables import contract, read_partition

    df = read_partition(spark, Storage.at(settings.warehouse), contract(layer, table), ds)
    return sorted(tuple(r) for r in df.collect())


def edge_modes(spark, settings, ds: dt.date) -> dict[tuple[str, str], str]:
    """The served edge plan of day ``ds``: (consumer, producer) -> mode."""
    return {(c, p): mode for c, p, mode, *_ in table_rows(spark, settings, "plan", "edge_plan", ds)}


def days(n: int = DAYS) -> list[dt.date]:
    return [START + dt.timedelta(days=i) for i in range(n)]


def build(spark, settings, on: Iterable[dt.date], stages: tuple[str, ...] = BUILD, **kw) -> None:
    """Run ``stages`` for each day of ``on``, in order, in the test's Spark session."""
    from jobs.stages import runner

    for ds in on:
        for stage in stages:
            runner.run_stage(stage, settings, ds, spark, **kw)


def assembled(
    warehouse: str, ds: dt.date, consumers: list[str], k: int = K, published: bool = False
) -> dict[str, list[str]]:
    """The reader's feeds of ``consumers``, as event ids: of the day's latest complete run
    (what the stages just built), or of its published version."""
    from jobs.serving.reader import FeedReader

    got = FeedReader(warehouse, ds, unpublished=not published).feeds(consumers, k)
    return {c: [it.event_id for it in feed] for c, feed in got.items()}

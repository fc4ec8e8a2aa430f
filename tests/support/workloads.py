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

from jobs.common.config import STRATEGIES
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
SERVED = tuple(STRATEGIES)
"""The strategies the per-strategy feed tests serve: every one the plan knows."""
STAGE_TIER = ("ff-per-pair", "cz-lp")
"""Of :data:`SERVED`, the strategies the stage tier (``make check``) serves: the default
strategies' two kinds of plan, pushes and pulls and shared views. The end-to-end tier
(tests/e2e/test_strategies.py) serves the others on the same days."""
OTHER_SERVED = tuple(s for s in SERVED if s not in STAGE_TIER)


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


TOPIC_DAYS = 3
TOPIC_LAST = START + dt.timedelta(days=TOPIC_DAYS - 1)
TOPIC_SEED = 13
HAND_TOPICS = {
    # id -> (predicate, what ingest must make of it on day 1)
    "not-eu": ("region != eu", None),  # != only: met through every event
    "broken": ("category = ", "malformed_predicate"),
    "u0000003": ("region = eu", "topic_id_is_account"),  # a user's id
    "sport-or-tech": ("category IN (c01, 'c02') AND score > 50", None),
}
CONFLICTING = ("twice", "region = eu", "region = na")
CHANGED, REMOVED = "topic000030", "topic000031"
TOPIC_DATES = [START + dt.timedelta(days=i) for i in range(TOPIC_DAYS)]
TOPICS = {f"topic{i:06d}" for i in range(40)} | {t for t, (_, w) in HAND_TOPICS.items() if not w}
"""The topics in force on the last topic day."""


def topic_settings(landing: Path | str, warehouse: Path | str, **kw):
    """The topic days' settings: FF-PerPair served, the only strategy computed."""
    from jobs.common.config import Settings

    return Settings(
        landing=str(landing),
        warehouse=str(warehouse),
        feed_k=K,
        strategy="ff-per-pair",
        strategies=("ff-per-pair",),
        shuffle_partitions=4,
        **kw,
    )


def topics_profile():
    """``cz2015`` at scale 0.01 (300 consumers, 100 producers) with 40 generated topics."""
    from jobs.workloads.generate import PROFILES, scaled

    return dataclasses.replace(
        scaled(PROFILES["cz2015"], 0.01), topics=40, topic_follows=2.0, unfollow_share=0.02
    )


def topics_workload(landing: Path) -> Path:
    """Three days of :func:`topics_profile`, and on day 1 the definitions a user may get
    wrong beside the generated ones (:data:`HAND_TOPICS`; an id defined two ways; an
    identical definition landed twice), with followers for each; day 2 has no topics folder
    (the definitions stay in force); day 3 lands them again with :data:`CHANGED`'s predicate
    changed and :data:`REMOVED` gone."""
    from jobs.common.storage import Storage
    from jobs.workloads.generate import generate

    generate(Storage.at(str(landing)), START, TOPIC_DAYS, topics_profile(), seed=TOPIC_SEED)
    day1, day3 = landing / "topics" / f"ds={START}", landing / "topics" / f"ds={TOPIC_LAST}"
    generated = pd.read_csv(next(day1.glob("*.csv")), dtype=str)
    extra = [(t, pred) for t, (pred, _) in HAND_TOPICS.items()]
    extra += [(CONFLICTING[0], CONFLICTING[1]), (CONFLICTING[0], CONFLICTING[2])]
    extra += [tuple(generated.iloc[5])]  # an identical repeat: a duplicate
    pd.DataFrame(extra, columns=["topic_id", "predicate"]).to_json(
        day1 / "hand.jsonl", orient="records", lines=True
    )
    consumers = sorted({c for c, _ in naive.graph(landing, START, START)})
    follows = [
        (c, t, f"{START}T00:00:00Z")
        for i, t in enumerate([*HAND_TOPICS, CONFLICTING[0]])
        for c in consumers[i * 7 : i * 7 + 40]
    ]
    pd.DataFrame(follows, columns=["consumer_id", "producer_id", "ts"]).to_csv(
        landing / "follows" / f"ds={START}" / "hand.csv", index=False
    )
    day3.mkdir(parents=True)
    again = generated[generated["topic_id"] != REMOVED].copy()
    again.loc[again["topic_id"] == CHANGED, "predicate"] = "region = eu AND score <= 40"
    again = pd.concat(
        [again, pd.DataFrame([("not-eu", "region != eu")], columns=["topic_id", "predicate"])]
    )
    again.to_csv(day3 / "part-00000.csv", index=False)
    return landing


def published_consumers(warehouse: str, ds: dt.date) -> list[str]:
    """Every consumer of published day ``ds``, from its consumer_sources files (pyarrow)."""
    import pyarrow.dataset as pads

    from jobs.common import versions
    from jobs.common.storage import Storage

    wh = Storage.at(warehouse)
    day = versions.published(wh, ds)
    assert day is not None, f"{ds} is not published"
    parts = day.parts("plan/consumer_sources")
    assert parts is not None
    ids = pads.dataset(wh.path(*parts)).to_table(columns=["consumer_id"])["consumer_id"]
    return sorted(set(ids.to_pylist()))

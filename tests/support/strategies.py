"""The per-strategy feed checks: a strategy plans the last day of a built warehouse alone
and its assembled feeds equal the naive answer from the landing files (``support.naive``).

The stage tier serves ``support.workloads.STAGE_TIER`` through them (tests/stages/test_plan.py
on the churn days, tests/stages/test_topics.py on the topic days); the end-to-end tier the
other strategies (tests/e2e/test_strategies.py).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pandas as pd

from jobs.common.config import GLOBAL_ONLY, SHARED_VIEW_STRATEGIES, Settings
from jobs.serving.reader import FeedReader
from jobs.stages import runner
from support import naive
from support.workloads import (
    HOURS,
    K_P,
    LAST,
    START,
    TOPIC_LAST,
    TOPICS,
    K,
    assembled,
    edge_modes,
    table_rows,
)


@functools.cache
def naive_feeds(landing: str, coherency: str) -> dict[str, list[str]]:
    """The naive answer for the churn days' last day (computed once per coherency mode)."""
    if coherency == "global":
        return naive.feeds(Path(landing), LAST, START, K)
    return naive.feeds_per_producer(Path(landing), LAST, START, K, K_P, HOURS)


def check_plan_feeds(
    spark, churn_landing: Path, built_copy: Settings, strategy: str, store_url: str
) -> None:
    """The churn days' last day planned with ``strategy`` alone and materialized from the
    previous day's FF-PerPair state (so edges move between push and pull): every consumer's
    assembled feed equals the naive answer, and so does every consumer's feed from the feed
    store at ``store_url`` once the day is published and loaded into it (emptied first); then,
    where the strategy offers per-producer
    coherency, the same plan materialized under it (a full rebuild: the previous day's feeds
    were made under global coherency) equals the naive k,t-diverse answer. The plan's edges
    are of the kinds the strategy makes."""
    ds = LAST
    # only the strategy under test is computed
    s = dataclasses.replace(built_copy, strategy=strategy, strategies=(strategy,))
    runner.run_stage("plan", s, ds, spark)
    coherencies = ("global",) if strategy in GLOBAL_ONLY else ("global", "per_producer")
    for coherency in coherencies:
        m = dataclasses.replace(s, coherency=coherency)
        runner.run_stage("materialize", m, ds, spark)
        expected = naive_feeds(str(churn_landing), coherency)
        consumers = sorted(expected)
        got = assembled(m.warehouse, ds, [*consumers, "nobody-follows-nothing"])
        assert got.pop("nobody-follows-nothing") == []
        mismatched = [c for c in consumers if got[c] != expected[c]]
        assert not mismatched, (
            f"{coherency}: {len(mismatched)} of {len(consumers)} feeds differ, "
            f"e.g. {mismatched[:3]}"
        )
        if coherency == "global":
            check_store_feeds(spark, dataclasses.replace(m, store=store_url), expected)
    plan = edge_modes(spark, s, ds)
    pulled_consumers = {c for (c, _), m in plan.items() if m == "pull"}
    if strategy == "pull-all":
        assert set(plan.values()) == {"pull"}
    elif strategy == "push-all":
        # only consumers without a feed view in the last 7 days (from the landing files) pull
        views = pd.concat(
            [
                naive.read_table(churn_landing, "views", day)
                for day in pd.date_range(end=ds, periods=7).date
                if day >= START
            ]
        )
        idle = {c for c, _ in plan} - set(views["consumer_id"])
        assert pulled_consumers == idle
    elif strategy in SHARED_VIEW_STRATEGIES:
        # shared views are read; parts where they would cost more serve FF-PerPair's plan
        assert "view" in set(plan.values()) and set(plan.values()) <= {"view", "push", "pull"}
        members = table_rows(spark, s, "plan", "view_members", ds)
        follows: dict[str, set[str]] = {}
        for c, p in plan:
            follows.setdefault(c, set()).add(p)
        view_of: dict[str, set[str]] = {}
        for v, p in members:
            view_of.setdefault(v, set()).add(p)
        for c, kind, v in table_rows(spark, s, "plan", "consumer_sources", ds):
            if kind == "view":  # a consumer reads only views over producers it follows
                assert view_of[v] <= follows[c]
    else:
        assert set(plan.values()) == {"push", "pull"}
    (row,) = table_rows(spark, s, "plan", "plan_cost", ds)
    assert row[:2] == (strategy, True)  # one row, for the one strategy computed, served


def check_store_feeds(spark, s: Settings, expected: dict[str, list[str]]) -> None:
    """The last day validated, published and loaded into the (emptied) store ``s.store``:
    every consumer's feed read from the store is the naive one."""
    from jobs.common import store
    from jobs.serving.store_reader import StoreReader

    store.connect(s.store).flushdb()
    for stage in ("validate", "publish", "store"):
        runner.run_stage(stage, s, LAST, spark)
    consumers = sorted(expected)
    got = StoreReader(s.store).feeds([*consumers, "nobody-follows-nothing"], K)
    assert got.pop("nobody-follows-nothing") == []
    ids = {c: [it.event_id for it in f] for c, f in got.items()}
    mismatched = [c for c in consumers if ids[c] != expected[c]]
    assert not mismatched, f"store: {len(mismatched)} of {len(consumers)} feeds differ"


@functools.cache
def naive_topic_feeds(landing: str) -> dict[str, list[str]]:
    """The naive answer for the topic days' last day."""
    return naive.feeds(Path(landing), TOPIC_LAST, START, K)


@functools.cache
def author_of(landing: str) -> dict[str, str]:
    """Event id -> its author, over the topic days."""
    ev = naive.events(Path(landing), TOPIC_LAST, START)
    return dict(zip(ev["event_id"], ev["producer_id"], strict=True))


def check_topic_feeds(spark, topics_copy: Settings, strategy: str) -> None:
    """The topic days' last day planned with ``strategy`` alone and materialized: every
    assembled feed equals the naive answer, each event once although many reach a consumer
    through their author and a topic, topic items name their author, and topic edges are
    planned like any edge."""
    s = dataclasses.replace(topics_copy, strategy=strategy, strategies=(strategy,))
    for stage in ("plan", "materialize"):
        runner.run_stage(stage, s, TOPIC_LAST, spark)
    expected = naive_topic_feeds(s.landing)
    consumers = sorted(expected)
    got = FeedReader(s.warehouse, TOPIC_LAST, unpublished=True).feeds(consumers, K)
    ids = {c: [it.event_id for it in f] for c, f in got.items()}
    mismatched = [c for c in consumers if ids[c] != expected[c]]
    assert not mismatched, f"{len(mismatched)} of {len(consumers)} feeds differ: {mismatched[:3]}"
    author = author_of(s.landing)
    assert all(it.producer_id == author[it.event_id] for f in got.values() for it in f)
    # topic edges are planned like any edge: the strategies that mix modes mix them on topics
    topic_modes = {m for (_, p), m in edge_modes(spark, s, TOPIC_LAST).items() if p in TOPICS}
    if strategy in ("ff-per-pair", "ff-latency-pair"):
        assert topic_modes == {"push", "pull"}
    elif strategy.startswith("cz-"):
        assert "view" in topic_modes, topic_modes

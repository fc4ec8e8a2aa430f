"""Stage ``plan``: every strategy's plan of a day with churn, and the feeds it serves.

Core correctness: for every strategy, the last day is planned with that strategy alone and
materialized from the previous day's FF-PerPair state (so edges move between push and pull),
and every consumer's assembled feed equals the naive answer computed from the landing files
alone (``support.naive``); then, for every strategy per-producer coherency offers, the same
plan is materialized under it (a full rebuild: the previous day's feeds were made under
global coherency) and checked against the naive k,t-diverse answer. The plan does not depend
on the coherency mode.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pandas as pd
import pytest

from jobs.common.config import GLOBAL_ONLY, SHARED_VIEW_STRATEGIES
from jobs.common.tables import contract
from jobs.stages import runner
from support import naive
from support.workloads import (
    HOURS,
    K_P,
    LAST,
    SERVED,
    START,
    K,
    assembled,
    edge_modes,
    table_rows,
)


@functools.cache
def naive_feeds(landing: str, coherency: str) -> dict[str, list[str]]:
    """The naive answer for the last day (computed once per coherency mode)."""
    if coherency == "global":
        return naive.feeds(Path(landing), LAST, START, K)
    return naive.feeds_per_producer(Path(landing), LAST, START, K, K_P, HOURS)


@pytest.mark.parametrize("strategy", SERVED)
def test_assembled_feed_equals_the_naive_answer(spark, churn_landing, built_copy, strategy):
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


def test_plan_cost_carries_a_bound_no_strategy_goes_below(spark, built):
    """The certificate of the shared build's last day: the bound the plan computed (on the
    driver: a small day, ``bound.DRIVER_LIMIT``; tests/unit/test_views.py checks the Spark
    computation against it) equals the sequential ``views.lower_bound`` over the day's
    active edges (plus the inactive consumers' reads, which every plan pays), lies at or
    below every strategy's cost, and each gap is ``(cost - bound) / bound``."""
    from jobs.common import ledger
    from jobs.common.storage import Storage
    from jobs.selection import views
    from jobs.stages.plan import day_edges

    wh = Storage.at(built.warehouse)
    edges = day_edges(spark, built, LAST, wh)[0].toPandas()
    expected = views.edges_lower_bound(edges, built.push_cost, built.pull_cost)
    record = ledger.read_record(wh, LAST, "plan")
    assert record is not None and record["certificate"]["computed"] == "driver"

    rows = {r[0]: r for r in table_rows(spark, built, "plan", "plan_cost", LAST)}
    cols = [c.name for c in contract("plan", "plan_cost").columns]
    got = {s: dict(zip(cols, r, strict=True)) for s, r in rows.items()}
    assert set(got) == set(built.strategies)
    bounds = {r["lower_bound"] for r in got.values()}
    # rounded down to the costs' 6 decimals
    assert len(bounds) == 1 and expected - 1e-6 <= bounds.pop() <= expected
    for s, r in got.items():
        assert r["bound"] == "overlap"  # the churn graph fits the pair budget
        assert r["lower_bound"] <= r["total_cost"] + 1e-9, s
        assert r["gap"] == pytest.approx((r["total_cost"] - expected) / expected)
    # the served FF-PerPair is within reach of the bound on this graph (pull-all is not)
    assert got["ff-per-pair"]["gap"] < got["pull-all"]["gap"]

"""Stage ``plan``: a strategy's plan of a day with churn, the feeds it serves, and the
certificate every plan carries.

The feeds (``support.strategies.check_plan_feeds``): the last churn day is planned with one
strategy alone and materialized from the previous day's FF-PerPair state (so edges move
between push and pull), and every consumer's assembled feed equals the naive answer computed
from the landing files alone (``support.naive``), under global and, where the strategy offers
it, per-producer coherency. Here for the default strategies' two kinds of plan
(``support.workloads.STAGE_TIER``); every other strategy in tests/e2e/test_strategies.py.
"""

from __future__ import annotations

import pytest

from jobs.common.tables import contract
from support.strategies import check_plan_feeds
from support.workloads import LAST, STAGE_TIER, table_rows


@pytest.mark.parametrize("strategy", STAGE_TIER)
def test_assembled_feed_equals_the_naive_answer(spark, churn_landing, built_copy, strategy):
    check_plan_feeds(spark, churn_landing, built_copy, strategy)


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

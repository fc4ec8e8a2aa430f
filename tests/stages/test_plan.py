"""Stage ``plan``: a strategy's plan of a day with churn, the feeds it serves, and the
certificate every plan carries.

The feeds (``support.strategies.check_plan_feeds``): the last churn day is planned with one
strategy alone and materialized from the previous day's FF-PerPair state (so edges move
between push and pull), and every consumer's assembled feed equals the naive answer computed
from the landing files alone (``support.naive``), under global and, where the strategy offers
it, per-producer coherency; under global coherency, so does every consumer's feed read from
the feed store once the day is published and loaded into it. Here for the default
strategies' two kinds of plan (``support.workloads.STAGE_TIER``); every other strategy in
tests/e2e/test_strategies.py.
"""

from __future__ import annotations

import pytest

from jobs.common.tables import contract
from support.strategies import check_plan_feeds
from support.workloads import LAST, STAGE_TIER, table_rows


@pytest.mark.parametrize("strategy", STAGE_TIER)
def test_assembled_feed_equals_the_naive_answer(
    spark, churn_landing, built_copy, redis_server, strategy
):
    check_plan_feeds(spark, churn_landing, built_copy, strategy, redis_server.url)


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
    assert record is not None and record.certificate.computed == "driver"

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


def test_the_certificate_is_below_the_exact_optimum_of_a_small_day(spark, tmp_path):
    """A hand-made day small enough to enumerate (4 producers, 7 consumers whose follow sets
    overlap): the plan stage's certified bound is at or below the cheapest plan of all found
    by brute force (``support.brute``, every set of views), which the integer program agrees
    with, and that optimum is at or below every strategy's cost (the bound is computed by
    ``jobs.selection.bound``; the optimum by enumeration, independently of it)."""
    import datetime as dt

    from jobs.common import ledger
    from jobs.common.config import Settings
    from jobs.common.storage import Storage
    from jobs.selection import exact, views
    from jobs.stages import runner
    from jobs.stages.plan import day_edges
    from support import brute

    d = dt.date(2026, 2, 1)
    follows = {
        "c0": "p0 p1 p2",
        "c1": "p0 p1 p2",
        "c2": "p0 p1 p2 p3",
        "c3": "p1 p2",
        "c4": "p0 p3",
        "c5": "p2 p3",
        "c6": "p0 p1 p3",
    }
    posts = {"p0": 2, "p1": 5, "p2": 1, "p3": 8}
    reads = {"c0": 40, "c1": 30, "c2": 25, "c3": 2, "c4": 9, "c5": 1, "c6": 12}
    landing = tmp_path / "landing"
    for table, header, lines in (
        (
            "follows",
            "consumer_id,producer_id",
            [f"{c},{p}" for c, ps in follows.items() for p in ps.split()],
        ),
        (
            "events",
            "event_id,producer_id,created_at",
            [
                f"e-{p}-{i},{p},{d}T{1 + i % 20:02d}:00:00Z"
                for p, n in posts.items()
                for i in range(n)
            ],
        ),
        (
            "views",
            "consumer_id,viewed_at",
            [f"{c},{d}T{1 + i % 20:02d}:30:00Z" for c, n in reads.items() for i in range(n)],
        ),
    ):
        folder = landing / table / f"ds={d}"
        folder.mkdir(parents=True)
        (folder / "part-0.csv").write_text("\n".join([header, *lines]) + "\n")
    s = Settings(
        landing=str(landing),
        warehouse=str(tmp_path / "wh"),
        shuffle_partitions=4,
        strategies=("push-all", "pull-all", "ff-per-pair", "ff-consumer", "cz-lp"),
    )
    for stage in ("ingest", "rates", "plan"):
        runner.run_stage(stage, s, d, spark)

    wh = Storage.at(s.warehouse)
    edges = day_edges(spark, s, d, wh)[0].toPandas()  # the priced inputs every plan sees
    assert edges["active"].all() and len(edges) == 19
    p = views.Problem(
        edges.groupby("consumer_id")["theta"].first().to_dict(),
        edges.groupby("consumer_id")["producer_id"].agg(frozenset).to_dict(),
        edges.groupby("producer_id")["phi"].first().to_dict(),
        s.push_cost,
        s.pull_cost,
    )
    optimum = brute.exact_optimum(p)
    assert exact.solve(p, exact.every_view(p)).cost == pytest.approx(optimum)
    rows = {r[0]: r for r in table_rows(spark, s, "plan", "plan_cost", d)}
    cols = [c.name for c in contract("plan", "plan_cost").columns]
    got = {st: dict(zip(cols, r, strict=True)) for st, r in rows.items()}
    (bound,) = {r["lower_bound"] for r in got.values()}
    assert 0 < bound <= optimum + 1e-6
    for st, r in got.items():
        assert optimum <= r["total_cost"] + 1e-6, st
    # shared views pay here: the optimum is below the per-edge rule's plan
    assert optimum < got["ff-per-pair"]["total_cost"] - 1e-6
    assert ledger.read_record(wh, d, "plan").certificate.lower_bound == pytest.approx(
        bound, abs=1e-6
    )

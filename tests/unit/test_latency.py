"""Latency-constrained MinCost (Feeding Frenzy 3.3) and the inactive-consumer rule, worked by
hand on the graph of ``test_selection``.

Producers p1 (phi=1), p2 (phi=4), p3 (phi=0.5); H=3, L=1. Consumers c1 (theta=6) follows p1,
p2; c2 (theta=3) follows p1; c3 (theta=1.5) follows p1, p2, p3. Feed views weigh 10.5/hour.

MinCost (FF-PerPair): c1 push p1, pull p2 (2 sources, 1 pull); c2 push p1 (1 source);
c3 push p3, pull p1, p2 (3 sources, 2 pulls). Extra cost of pushing a pulled edge,
epsilon = H phi - L theta, and the rank key theta/epsilon:

    (c1, p2): 12 - 6   = 6     key 1
    (c3, p1): 3 - 1.5  = 1.5   key 1
    (c3, p2): 12 - 1.5 = 10.5  key 1/7
"""

from __future__ import annotations

import random

import pytest

from jobs.selection import cost, feeding_frenzy, latency

H, L = 3.0, 1.0
PHI = {"p1": 1.0, "p2": 4.0, "p3": 0.5}
THETA = {"c1": 6.0, "c2": 3.0, "c3": 1.5}
FOLLOWS = [("c1", "p1"), ("c1", "p2"), ("c2", "p1"), ("c3", "p1"), ("c3", "p2"), ("c3", "p3")]
MINCOST_PUSH = {("c1", "p1"), ("c2", "p1"), ("c3", "p3")}


def edges(spark, inactive=()):
    follows = spark.createDataFrame(FOLLOWS, "consumer_id string, producer_id string")
    pr = spark.createDataFrame(list(PHI.items()), "producer_id string, events_per_hour double")
    cr = spark.createDataFrame(
        [(c, t, c not in inactive) for c, t in THETA.items()],
        "consumer_id string, views_per_hour double, active boolean",
    )
    return feeding_frenzy.edge_inputs(follows, pr, cr)


def plan(spark, metric, bound, quantile, per_consumer, inactive=()):
    base = latency.pull_inactive(feeding_frenzy.ff_per_pair(edges(spark, inactive), H / L))
    name = "ff-latency-consumer" if per_consumer else "ff-latency-pair"
    target = cost.LatencyTarget(metric, bound, quantile)
    out = latency.latency_constrained(base, name, cost.CostModel(H, L), target, per_consumer)
    # computed once, as the plan stage keeps its plans: the checks below read it several times
    return out.localCheckpoint()


def pushed(df) -> set[tuple[str, str]]:
    return {(r.consumer_id, r.producer_id) for r in df.collect() if r.mode == "push"}


def price(spark, df, metric, bound, quantile):
    members = spark.createDataFrame(
        [], "strategy string, view_id string, producer_id string, phi double"
    )
    strategy = df.first().strategy
    target = cost.LatencyTarget(metric, bound, quantile)
    return cost.plan_costs(df, members, cost.CostModel(H, L), [strategy], target).first().asDict()


@pytest.mark.parametrize("per_consumer", [False, True])
def test_mincost_that_meets_the_target_is_left_alone(spark, per_consumer):
    # 1 - 1.5/10.5 = 0.857 of feed views read at most 2 sources already
    got = plan(spark, "sources", 2, 0.85, per_consumer)
    assert pushed(got) == MINCOST_PUSH


def test_per_pair_shifts_the_best_ranked_consumer_only(spark):
    # at most 1 source for 85% of views: 8.925 weight, c2 (3) meets it, 5.925 more needed.
    # c1 needs its 1st edge (key 1) -> 6 >= 5.925 at tau = 1. The literal prefix at tau = 1
    # would also shift (c3, p1) (key 1), which leaves c3 at 2 sources: it is not shifted.
    got = plan(spark, "sources", 1, 0.85, False)
    assert pushed(got) == MINCOST_PUSH | {("c1", "p2")}
    row = price(spark, got, "sources", 1, 0.85)
    assert row["latency_share"] == pytest.approx(9 / 10.5)
    assert row["latency_met"] is True
    # c1 push{p1,p2}: M 15, EV 0; c2: M 3; c3 push{p3} pull{p1,p2}: M 1.5, EV 1.5*3
    assert row["total_cost"] == pytest.approx(24.0)


def test_per_pair_reaches_down_the_ranking_when_it_must(spark):
    # 90%: 9.45 - 3 = 6.45 > 6, so c3 (needs 2 shifts, its 2nd edge has key 1/7) joins
    got = plan(spark, "sources", 1, 0.9, False)
    assert pushed(got) == {e for e in FOLLOWS}
    row = price(spark, got, "sources", 1, 0.9)
    assert row["latency_share"] == pytest.approx(1.0) and row["sources_p99"] == 1.0
    assert row["total_cost"] == pytest.approx(3 * (5 + 1 + 5.5))


def test_pull_share_target(spark):
    # "at most 50% of feed views need any pull": pulls <= 0 for half the views. c2 has none
    # (3 of 10.5); c1's single pull has the best key -> shifted; c3 keeps its pulls.
    got = plan(spark, "pulls", 0, 0.5, False)
    assert pushed(got) == MINCOST_PUSH | {("c1", "p2")}
    row = price(spark, got, "pulls", 0, 0.5)
    assert row["pull_view_share"] == pytest.approx(1.5 / 10.5)


def test_per_consumer_moves_whole_consumers(spark):
    # epsilon_c: c1 6 (key 1), c3 1.5 + 10.5 = 12 (key 1/8). 85%: c1 is enough.
    got = plan(spark, "sources", 1, 0.85, True)
    assert pushed(got) == MINCOST_PUSH | {("c1", "p2")}
    got = plan(spark, "sources", 1, 0.9, True)
    assert pushed(got) == set(FOLLOWS)


@pytest.mark.parametrize("per_consumer", [False, True])
def test_an_unreachable_target_shifts_what_helps_and_says_so(spark, per_consumer):
    # no consumer can read 0 sources: nothing to gain, nothing shifted, target not met
    got = plan(spark, "sources", 0, 0.5, per_consumer)
    assert pushed(got) == MINCOST_PUSH
    assert price(spark, got, "sources", 0, 0.5)["latency_met"] is False


@pytest.mark.parametrize("per_consumer", [False, True])
def test_never_shifts_a_mincost_push_to_pull_and_never_touches_inactive(spark, per_consumer):
    got = plan(spark, "sources", 1, 1.0, per_consumer, inactive=("c3",))
    # c3 is inactive: all its edges pull (even p3, a MinCost push), and it stays so
    assert pushed(got) == {("c1", "p1"), ("c1", "p2"), ("c2", "p1")}
    row = price(spark, got, "sources", 1, 1.0)
    assert row["inactive_consumers"] == 1
    assert row["latency_met"] is False  # c3's 3 pulls keep 1.5/10.5 of views above 1 source


def test_inactive_consumers_are_pulled_under_every_strategy(spark):
    e = edges(spark, inactive=("c1",))
    for df in (feeding_frenzy.push_all(e), feeding_frenzy.ff_consumer(e, H / L)):
        got = latency.pull_inactive(df)
        assert all(
            r.mode == "pull" and r.source_id == r.producer_id
            for r in got.collect()
            if r.consumer_id == "c1"
        )
        assert any(r.mode == "push" for r in got.collect() if r.consumer_id == "c2")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_weighted_threshold_matches_a_sort(spark, seed):
    rng = random.Random(seed)
    rows = [
        (rng.choice([rng.lognormvariate(0, 3), 0.5, 2.0]), rng.uniform(0, 5)) for _ in range(2000)
    ]
    df = spark.createDataFrame(rows, "key double, w double")
    total = sum(w for _, w in rows)
    for share in (0.01, 0.3, 0.77, 1.0):
        need = share * total
        # the brute force: walk keys from the top until the weight reaches need
        acc, expected = 0.0, None
        for key, w in sorted(rows, reverse=True):
            acc += w
            if acc >= need - 1e-9:
                expected = key
                break
        assert latency.weighted_threshold(df, need) == expected
    assert latency.weighted_threshold(df, total * 1.01) is None

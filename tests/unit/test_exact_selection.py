"""The integer program of view selection (jobs/selection/exact.py) against brute force and
a hand-worked instance; what each bound bounds."""

from __future__ import annotations

import random

import pytest
from test_views import A, B, C, problem

from jobs.selection import exact, views
from support.brute import exact_optimum, random_problem


def test_the_worked_instance_has_hierarchy_1s_plan_as_its_optimum():
    # tests/unit/test_views.py works it by hand: Hierarchy-1 materializes A and B (M 27),
    # u1 and u2 read one view each, u3 reads A and B (24): 51, and brute force finds no
    # cheaper plan
    p = problem()
    s = exact.solve(p, exact.every_view(p))
    assert s.optimal and s.cost == pytest.approx(51.0) and s.bound == pytest.approx(51.0)
    assert set(s.views) == {A, B}
    assert s.plans == {"u1": [A], "u2": [B], "u3": [A, B]}
    # over Algorithm 1's candidates only C's two halves are missing: PushPrefer of u3 is
    # all four feeds (theta 12 against phi <= 3: ratios >= 4), PullPrefer empty; u1 pushes
    # f1 only, u2 f4 only: the candidates are {C}, and the best plan from them costs more
    cands = [c.feeds for c in views.candidate_views(p)]
    assert cands == [C]
    restricted = exact.solve(p, cands)
    assert restricted.optimal and restricted.cost == pytest.approx(27 + 8 * 2 + 6 * 2)
    assert restricted.cost > s.cost


def test_every_view_lists_the_subsets_and_refuses_a_large_instance():
    p = views.Problem(
        {"u": 1.0, "w": 1.0},
        {"u": frozenset("abc"), "w": frozenset("cd")},
        dict.fromkeys("abcd", 1.0),
        3.0,
        1.0,
    )
    got = {"".join(sorted(v)) for v in exact.every_view(p)}
    assert got == {"abc", "ab", "ac", "bc", "cd"}
    with pytest.raises(exact.TooLarge, match=r"5 \(user, view\) pairs over the limit of 4"):
        exact.every_view(p, limit=4)


@pytest.mark.parametrize("seed", range(30))
def test_the_optimum_over_every_view_is_the_brute_force_optimum(seed):
    p = random_problem(seed, n_feeds=4, n_users=random.Random(seed).randint(2, 6))
    best = exact_optimum(p)
    s = exact.solve(p, exact.every_view(p))
    assert s.optimal
    assert s.cost == pytest.approx(best)
    # the plan it returns is a real plan of that cost (plan_cost checks the covers)
    assert exact.plan_cost(p, s.views, s.plans) == pytest.approx(best)
    # the LP relaxation and the combinatorial bound bound it from below
    lp = exact.solve(p, exact.every_view(p), relax=True)
    assert lp.bound <= best + 1e-9
    assert views.lower_bound(p) <= best + 1e-9


@pytest.mark.parametrize("seed", range(30))
def test_a_candidate_sets_optimum_is_no_better_than_every_views_and_no_worse_than_its_plans(
    seed,
):
    p = random_problem(seed)
    every = exact.solve(p, exact.every_view(p))
    for full in (False, True, "union"):
        cands = views.candidate_views(p, full=full)
        mine = exact.solve(p, [c.feeds for c in cands])
        assert mine.optimal and every.cost <= mine.cost + 1e-9
        lp = exact.solve(p, [c.feeds for c in cands], relax=True)
        assert lp.bound <= mine.cost + 1e-9
        for select in (views.greedy, views.hierarchy):
            s = select(p, cands)
            # a selection from the candidates is a plan over them: never below their optimum
            assert mine.cost <= s.cost(p) + 1e-9
            assert exact.plan_cost(p, s.views, s.plans) == pytest.approx(s.cost(p))


def test_a_plan_that_does_not_cover_or_reads_an_unmaterialized_view_is_refused():
    p = problem()
    with pytest.raises(ValueError, match="u1 reads"):
        exact.plan_cost(p, [], {"u1": [A], "u2": [B], "u3": [C]})
    with pytest.raises(ValueError, match="plan of u3 does not cover"):
        exact.plan_cost(p, [A, B], {"u1": [A], "u2": [B], "u3": [A]})


def test_a_time_limit_keeps_a_plan_and_a_valid_bound():
    p = random_problem(3, n_feeds=7, n_users=16)
    full = exact.solve(p, exact.every_view(p), time_limit=120)
    assert full.optimal
    short = exact.solve(p, exact.every_view(p), time_limit=0.01)
    assert short.bound <= full.cost + 1e-6
    assert short.cost >= full.cost - 1e-6

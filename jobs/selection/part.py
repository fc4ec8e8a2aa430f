"""Planning one part of the user-view graph (docs/shared-views.md, "Planning at scale"): a
strategy's selection, the linear program's plan where the part is small enough, and
FF-PerPair's guard, turned into edge assignments.

``cz-lp`` plans every part with Hierarchy-2 (Chen & Zhou, Section IV.B, over Algorithm 1's
candidates); on a part of at most ``UNION_EDGES`` follows also with Greedy (Section IV.A) over
Algorithm 1's candidates and the users' whole follow sets; and on a part of at most
``lp_pairs`` (user, view) pairs whose plan is above the part's combinatorial bound
(:func:`jobs.selection.views.lower_bound`), with the LP relaxation of the integer program of
:mod:`jobs.selection.exact` over every view a user could read (every subset of two feeds or
more of a follow set). An integral LP solution is the optimum over every plan of that part,
whatever its views; a fractional one is rounded (:func:`_rounded`). The LP's value bounds
every plan of the part, so a plan at it is proven optimal. The cheapest plan is kept, so the
strategy never costs more than Hierarchy-2 on any part.

The integer program itself is not solved here: HiGHS can take tens of seconds on a dense part
of a few thousand pairs, and only a time limit would stop it, so the plan would depend on the
machine's speed. Simplex on the LP has no limit and gives the same plan on every run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.common.config import Settings
from jobs.selection import exact
from jobs.selection.views import (
    ALGORITHMS,
    Candidate,
    Feeds,
    Problem,
    candidate_views,
    greedy,
    hierarchy,
    lower_bound,
    query_plan,
    view_id,
)

if TYPE_CHECKING:
    import numpy as np

LP_PAIRS: int = Settings.view_lp_pairs
"""The default ``view_lp_pairs``: parts with at most this many (user, view) pairs, every
subset of two feeds or more of each follow set, get the LP's plan from ``cz-lp``. On the
200 parts of ``python -m bench.optimality --graph higgs`` (up to 12 users following up to 10
feeds, at most 12,264 pairs) it is at the optimum on 199 and 0.5% above it on one."""

UNION_EDGES = 100_000
"""``cz-lp`` also runs Greedy over both candidate sets (``cz-greedy-union``'s selection) on
parts of at most this many follows: the cheapest heuristic on the real graphs, whose time on
one part of ``gplus`` (32,000 users, about 3.5M follows) is what keeps it out of the default
strategies (docs/benchmarks.md, "Shared-view planning")."""


PLANNER_VERSION = 1
"""Raised whenever :func:`plan_part` may plan the same inputs differently (or
:func:`fingerprint` digests them differently): a part's plan is carried over to the next day
only under the same version."""


def fingerprint(
    p: Problem,
    candidates: Sequence[Candidate],
    ff_push: Mapping[str, Feeds],
    algorithm: str,
    lp_pairs: int = LP_PAIRS,
) -> str:
    """A digest of everything :func:`plan_part` plans a part from but the rates: its users'
    follow sets and FF-PerPair's pushes, its candidate views and their users, the algorithm,
    H, L, the LP's size limit, :data:`UNION_EDGES` and :data:`PLANNER_VERSION`. Two parts
    with the same fingerprint differ at most in θ and φ. It digests the ``repr`` of nested
    tuples of strings and numbers, which quotes every string, so no id can pass for a
    separator."""
    users = tuple(
        (u, tuple(sorted(p.follows[u])), tuple(sorted(ff_push.get(u, ()))))
        for u in sorted(p.follows)
    )
    views = sorted((tuple(sorted(c.feeds)), c.users) for c in candidates)
    head = (PLANNER_VERSION, algorithm, p.push_cost, p.pull_cost, lp_pairs, UNION_EDGES)
    h = hashlib.sha1(repr((head, users, views)).encode())
    return h.hexdigest()[:20]


def within_band(rate: np.ndarray, reference: np.ndarray, margin: float) -> np.ndarray:
    """Whether each ``rate`` is within a factor ``1 + margin`` of its ``reference`` either
    way: the hysteresis band of Feeding Frenzy Section 4.3 (only change a decision when it
    really changes) applied to the rates a part was planned with. With ``margin = 0`` only
    the same rate is within; a missing rate (NaN) never is."""
    return (reference / (1 + margin) <= rate) & (rate <= reference * (1 + margin))


@dataclass
class PartPlan:
    """The outcome for one part: every edge's (mode, source), the materialized views, and
    the part's modeled cost under the selection and under FF-PerPair."""

    edges: list[tuple[str, str, str, str]]
    views: list[Feeds]
    cost: float
    ff_cost: float
    fallback: bool
    optimal: bool = False  # the plan is proven optimal over every plan of the part


def view_pairs(p: Problem, limit: int) -> int:
    """The (user, view) pairs of the program over every view (``2^n - n - 1`` for a follow
    set of ``n`` feeds), or ``limit + 1`` as soon as they exceed ``limit``."""
    total = 0
    for fs in p.follows.values():
        n = len(fs)
        if n > 1:
            total += (1 << n) - n - 1 if n < 62 else limit + 1
            if total > limit:
                return limit + 1
    return total


def select(
    p: Problem, candidates: list[Candidate], algorithm: str, lp_pairs: int = LP_PAIRS
) -> tuple[dict[str, list[Feeds]], float, bool]:
    """``algorithm``'s plans of the part's users and their cost (Eq. 5), and whether they are
    proven optimal over every plan (``cz-lp`` on a part small enough: HiGHS' optimum, or a
    plan already at the part's lower bound)."""
    how = ALGORITHMS[algorithm][1]
    s = greedy(p, candidates) if how == "greedy" else hierarchy(p, candidates)
    plans, cost = s.plans, s.cost(p)
    if how != "lp":
        return plans, cost, False
    if sum(map(len, p.follows.values())) <= UNION_EDGES:
        both = {c.feeds: c for c in candidate_views(p, full=True)}
        both.update((c.feeds, c) for c in candidates)
        g = greedy(p, sorted(both.values(), key=lambda c: (-len(c.feeds), sorted(c.feeds))))
        if g.cost(p) < cost - 1e-9 * max(1.0, cost):
            plans, cost = g.plans, g.cost(p)
    if lp_pairs < 1 or view_pairs(p, lp_pairs) > lp_pairs:
        return plans, cost, False
    if cost <= lower_bound(p) * (1 + 1e-9):
        return plans, cost, True  # already at a bound on every plan
    lp = exact.solve(p, exact.every_view(p, lp_pairs), relax=True)
    if lp.optimal:  # the LP's solution is integral: the optimum
        better, value = _trimmed(p, lp.plans), lp.cost
    else:
        better, value = _rounded(p, lp.views)
    if value < cost - 1e-9 * max(1.0, cost):
        plans, cost = better, value
    return plans, cost, cost <= lp.bound * (1 + 1e-9)


def _rounded(p: Problem, fractional: list[Feeds]) -> tuple[dict[str, list[Feeds]], float]:
    """A plan from a fractional LP solution: the views it uses at all, each user reading its
    greedy cover by them (:func:`jobs.selection.views.query_plan`), then, in the views'
    order, every view dropped whose readers are better off without it, until none is."""
    kept = list(fractional)
    while True:
        plans = {u: query_plan(fs, kept) for u, fs in p.follows.items()}
        used = {v for plan in plans.values() for v in plan if len(v) > 1}
        kept = [v for v in kept if v in used]
        cost = exact.plan_cost(p, kept, plans)
        for v in kept:
            rest = [w for w in kept if w != v]
            trial = {u: query_plan(fs, rest) for u, fs in p.follows.items()}
            if exact.plan_cost(p, rest, trial) < cost - 1e-9 * max(1.0, cost):
                kept = rest
                break
        else:
            return plans, cost


def _trimmed(p: Problem, plans: dict[str, list[Feeds]]) -> dict[str, list[Feeds]]:
    """Each plan without the native views its other sources already cover (the program may
    keep one where reading it costs nothing), views first."""
    out = {}
    for u, plan in plans.items():
        big = [v for v in plan if len(v) > 1]
        covered = frozenset().union(*big)
        out[u] = [*big, *(v for v in plan if len(v) == 1 and not v <= covered)]
    for u, fs in p.follows.items():
        out.setdefault(u, [frozenset([f]) for f in sorted(fs)])
    return out


def plan_part(
    p: Problem,
    candidates: list[Candidate],
    algorithm: str,
    ff_push: Mapping[str, Feeds],
    lp_pairs: int = LP_PAIRS,
) -> PartPlan:
    """Run ``algorithm`` over one part (:func:`select`) and turn the plans into edge
    assignments ``(consumer, producer, mode, source)``: a view of one feed is a pull of that
    producer, a larger view is mode ``view`` with the view's id; where plans overlap, an edge
    goes to the first view of the plan that holds it.

    ``ff_push``: the producers FF-PerPair pushes to each user. When the selection would cost
    more than FF-PerPair on this part (the algorithms are heuristics; see docs/shared-views.md),
    the part is served FF-PerPair's plan instead, so the strategy never costs more than
    FF-PerPair. Parts do not interact, so the guard holds for the sum."""
    plans, cost, optimal = select(p, candidates, algorithm, lp_pairs)
    ff_cost = 0.0
    for u, fs in p.follows.items():
        pushed = ff_push.get(u, frozenset())
        sources = len(fs - pushed) + (1 if pushed else 0)
        ff_cost += p.maintenance(pushed) + p.evaluation(u, sources)
    edges: list[tuple[str, str, str, str]] = []
    if cost > ff_cost + 1e-9 * max(1.0, ff_cost):
        for u in sorted(p.follows):
            pushed = ff_push.get(u, frozenset())
            for f in sorted(p.follows[u]):
                edges.append((u, f, "push", u) if f in pushed else (u, f, "pull", f))
        return PartPlan(edges, [], cost, ff_cost, True)
    used: set[Feeds] = set()
    for u in sorted(plans):
        assigned: set[str] = set()
        for v in plans[u]:
            if len(v) == 1:
                (f,) = v
                edges.append((u, f, "pull", f))
                assigned.add(f)
                continue
            used.add(v)
            vid = view_id(v)
            for f in sorted(v - assigned):
                edges.append((u, f, "view", vid))
            assigned |= v
    return PartPlan(edges, sorted(used, key=sorted), cost, ff_cost, False, optimal)

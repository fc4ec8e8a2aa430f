"""Exact view selection: the cost model as an integer program, solved with HiGHS.

The view selection problem of Chen & Zhou (Section III.C, Eq. 3-5): materialize views ``V``
(each at ``M(v) = H * sum_{f in v} phi_f``, Eq. 4) and give every user ``u`` a query plan
``V_u`` of materialized views and native views covering its follow set ``F_u``, each view a
subset of ``F_u``, at ``EV(u) = theta_u * L * |V_u|`` when ``|V_u| > 1``, else 0 (Eq. 3);
minimize ``sum M(v) + sum EV(u)`` (Eq. 5). Their proof of NP-hardness (Section III.C) reduces
from minimum set cover: a plan is a cover of ``F_u``; views of one plan may overlap.

Over a set ``W`` of views (feed sets of two feeds or more) the program is, with binaries
``x_v`` (materialize ``v``), ``y_uv`` (``u`` reads ``v``, for ``v`` a subset of ``F_u``) and
``n_uf`` (``u`` reads ``f``'s native view)::

    min  sum_v H phi(v) x_v + sum_u theta_u L (sum_f n_uf + sum_v y_uv - y_u,F_u)
    s.t. n_uf + sum_{v in W: f in v, v <= F_u} y_uv >= 1      for every edge (u, f)
         y_uv <= x_v

``- y_u,F_u`` (present when ``F_u`` itself is in ``W``) makes a plan of that one view free,
as Eq. 3 does; a plan with it and more sources is priced one source low, which never helps
a minimum (the other sources add cost and cover nothing new). Users who follow one feed read
its native view for free and are left out.

What a figure bounds (the distinction docs/shared-views.md draws):

* over :func:`every_view` (every subset of two feeds or more of some follow set: a view no
  user can read only adds maintenance), the optimum is the optimum over every plan, and the
  program's LP relaxation, or HiGHS' dual bound when it stops early, bounds every plan;
* over a smaller ``W`` (Algorithm 1's candidates, or full follow sets), the optimum and its
  bounds are those of plans built from ``W`` only: a plan with other views may cost less.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jobs.selection.views import Feeds, Problem


class TooLarge(ValueError):
    """The instance exceeds the size the caller allowed for exact solving."""


def every_view(p: Problem, limit: int = 200_000) -> list[Feeds]:
    """Every feed set of two feeds or more that some user could read: the subsets of its
    follow set. Raises :class:`TooLarge` beyond ``limit`` (user, view) pairs, before
    enumerating them (a follow set of ``n`` feeds has ``2^n - n - 1`` such subsets)."""
    pairs = sum(2 ** len(fs) - len(fs) - 1 for fs in p.follows.values() if len(fs) > 1)
    if pairs > limit:
        raise TooLarge(f"{pairs:,} (user, view) pairs over the limit of {limit:,}")
    out: set[Feeds] = set()
    for fs in p.follows.values():
        feeds = sorted(fs)
        for size in range(2, len(feeds) + 1):
            out.update(frozenset(c) for c in itertools.combinations(feeds, size))
    return sorted(out, key=lambda v: (-len(v), sorted(v)))


@dataclass(frozen=True)
class Solution:
    """The outcome of :func:`solve`.

    ``cost``: the best plan found (``math.inf`` when none, as an LP relaxation has none);
    ``bound``: a lower bound on every plan over the view set (the optimum when ``optimal``);
    ``views``: the materialized views of the best plan; ``plans``: each user's sources
    (materialized views, then native views of one feed); ``seconds``: HiGHS' wall time."""

    cost: float
    bound: float
    optimal: bool
    views: list[Feeds]
    plans: dict[str, list[Feeds]]
    seconds: float

    def gap(self, cost: float) -> float:
        """``(cost - bound) / bound``: how far above the bound a plan of ``cost`` is."""
        return (cost - self.bound) / self.bound if self.bound > 0 else 0.0


@dataclass(frozen=True)
class _Program:
    """The integer program of :func:`solve`: each variable's cost, what the variables stand
    for (a view's ``x``, a user's read of a view ``y``, a user's read of a native feed ``n``),
    the users planned and the constraints (cover rows, ``y <= x`` links)."""

    cost: list[float]
    x_of: dict[Feeds, int]
    y_of: dict[int, tuple[str, Feeds]]
    n_of: dict[int, tuple[str, str]]
    users: list[str]
    constraints: list[Any]


def _program(p: Problem, views: Iterable[Feeds]) -> _Program:
    """Variables and constraints of the view selection program over ``views`` (Eq. 3-5)."""
    import numpy as np
    from scipy import sparse
    from scipy.optimize import LinearConstraint

    H, L = p.push_cost, p.pull_cost
    pool = sorted({v for v in views if len(v) > 1}, key=lambda v: (-len(v), sorted(v)))
    users = sorted(u for u, fs in p.follows.items() if len(fs) > 1)
    cost: list[float] = []
    x_of: dict[Feeds, int] = {}  # view -> its x variable
    y_of: dict[int, tuple[str, Feeds]] = {}  # y variable -> (user, view)
    n_of: dict[int, tuple[str, str]] = {}  # n variable -> (user, feed)
    rows: list[list[int]] = []  # cover rows: variable indices
    links: list[tuple[int, int]] = []  # (y, x): y <= x

    def var(c: float) -> int:
        cost.append(c)
        return len(cost) - 1

    by_feed: dict[str, list[Feeds]] = {}
    for v in pool:
        for f in v:
            by_feed.setdefault(f, []).append(v)
    for u in users:
        fs, read = p.follows[u], p.theta[u] * L
        usable: dict[Feeds, int] = {}
        for f in sorted(fs):
            for v in by_feed.get(f, ()):
                if v not in usable and v <= fs:
                    if v not in x_of:
                        x_of[v] = var(H * sum(p.phi[g] for g in v))
                    usable[v] = var(0.0 if v == fs else read)
                    y_of[usable[v]] = (u, v)
                    links.append((usable[v], x_of[v]))
        for f in sorted(fs):
            native = var(read)
            n_of[native] = (u, f)
            rows.append([native, *(usable[v] for v in by_feed.get(f, ()) if v in usable)])

    n = len(cost)
    cover = sparse.csr_array(
        (
            np.ones(sum(map(len, rows))),
            np.concatenate([np.array(r, dtype=np.int64) for r in rows])
            if rows
            else np.zeros(0, dtype=np.int64),
            np.cumsum([0, *map(len, rows)]),
        ),
        shape=(len(rows), n),
    )
    constraints = [LinearConstraint(cover, 1, np.inf)]
    if links:
        ys, xs = zip(*links, strict=True)
        k = len(links)
        link = sparse.coo_array(
            (np.r_[np.ones(k), -np.ones(k)], (np.r_[np.arange(k), np.arange(k)], np.r_[ys, xs])),
            shape=(k, n),
        ).tocsr()
        constraints.append(LinearConstraint(link, -np.inf, 0))
    return _Program(cost, x_of, y_of, n_of, users, constraints)


def solve(
    p: Problem, views: Iterable[Feeds], relax: bool = False, time_limit: float = 60.0
) -> Solution:
    """The minimum-cost plan over ``views`` (see the module's docstring), or with ``relax``
    the LP relaxation's value as ``bound``: when the LP's solution is integral it is the
    optimum (``optimal``, with its plan), else ``views`` are those it uses at all and there is
    no plan. ``time_limit`` seconds of HiGHS for the integer program (the LP has none); when
    it runs out, ``cost`` is the best plan found and ``bound`` HiGHS' dual bound."""
    import time

    import numpy as np
    from scipy.optimize import Bounds, milp

    prog = _program(p, views)
    cost, x_of, y_of, n_of, users = prog.cost, prog.x_of, prog.y_of, prog.n_of, prog.users
    constraints = prog.constraints
    n = len(cost)
    if n == 0:
        return Solution(0.0, 0.0, True, [], {u: [] for u in users}, 0.0)
    t = time.perf_counter()
    res = milp(
        np.array(cost),
        integrality=np.zeros(n) if relax else np.ones(n),
        bounds=Bounds(0, 1),
        constraints=constraints,
        # an LP has no time limit: simplex is deterministic, and so is its answer
        options={"mip_rel_gap": 0.0} if relax else {"time_limit": time_limit, "mip_rel_gap": 0.0},
    )
    seconds = time.perf_counter() - t
    if relax:
        if res.status != 0:
            raise RuntimeError(f"the LP relaxation did not solve: {res.message}")
        used = [v for v, i in x_of.items() if res.x[i] > 1e-9]
        if np.all(np.abs(res.x - np.round(res.x)) <= 1e-9):  # integral: the optimum itself
            chosen, plans = _plans(res.x, x_of, y_of, n_of, users)
            value = plan_cost(p, chosen, plans)
            return Solution(value, min(float(res.fun), value), True, chosen, plans, seconds)
        # fractional: no plan, the views the LP uses at all
        return Solution(math.inf, float(res.fun), False, used, {}, seconds)
    if res.x is None:  # no plan within the time limit (natives alone are always one)
        bound = float(res.mip_dual_bound) if res.mip_dual_bound is not None else 0.0
        return Solution(math.inf, bound, False, [], {}, seconds)
    chosen, plans = _plans(res.x, x_of, y_of, n_of, users)
    value = plan_cost(p, chosen, plans)
    optimal = res.status == 0
    bound = value if optimal else float(res.mip_dual_bound)
    return Solution(value, min(bound, value), optimal, chosen, plans, seconds)


def _plans(
    x: Any,
    x_of: dict[Feeds, int],
    y_of: dict[int, tuple[str, Feeds]],
    n_of: dict[int, tuple[str, str]],
    users: list[str],
) -> tuple[list[Feeds], dict[str, list[Feeds]]]:
    """The materialized views and each user's sources of a 0/1 solution ``x``."""
    chosen = [v for v, i in x_of.items() if x[i] > 0.5]
    plans: dict[str, list[Feeds]] = {u: [] for u in users}
    for i, (u, v) in y_of.items():
        if x[i] > 0.5:
            plans[u].append(v)
    for i, (u, f) in n_of.items():
        if x[i] > 0.5:
            plans[u].append(frozenset([f]))
    return chosen, plans


def plan_cost(p: Problem, views: Iterable[Feeds], plans: dict[str, list[Feeds]]) -> float:
    """Eq. 5 for materialized ``views`` and users' ``plans`` (checked: each plan covers its
    user's follow set with views that are materialized, or native, and followed)."""
    chosen = set(views)
    total = sum(p.maintenance(v) for v in chosen)
    for u, fs in p.follows.items():
        plan = plans.get(u, [])
        if len(fs) < 2 and not plan:
            continue
        for v in plan:
            if not (v <= fs and (len(v) == 1 or v in chosen)):
                raise ValueError(f"{u} reads {sorted(v)}, not a materialized view it follows")
        if frozenset().union(*plan) != fs:
            raise ValueError(f"the plan of {u} does not cover its follow set")
        total += p.evaluation(u, len(plan))
    return total

"""Global view selection with shared views (Chen & Zhou, Section IV), for one group of
interacting users and views, in plain Python.

This is the sequential core that the ``plan`` stage runs per independent part (views with no
subset relation and no shared users do not interact, Section IV.E) through ``applyInPandas``
(``jobs.selection.shared.select_views``); a part holds a bounded number of users.


Model (Section III.C): every feed f has its native view (kept anyway, free); a materialized
view v over feeds ``F_v`` costs ``M(v) = H * sum_{f in F_v} phi_f`` (Eq. 4); user u reads a
query plan ``V_u``, a set of materialized views covering ``F_u`` whose feeds are all followed by
u, at ``EV(u) = theta_u * L * |V_u|`` when ``|V_u| > 1``, else 0 (Eq. 3).

* :func:`candidate_views`: Algorithm 1. Per user, PushPrefer (``Profit = theta_u L /
  (phi_f H) >= 1``) and PullPrefer (the rest); identical feed sets merged; the users of a view
  are all users whose follow set contains it. ``full=True`` takes each user's whole follow set
  instead (Hierarchy-1 and the paper's Greedy).
* :func:`query_plan`: the greedy minimum set cover of ``F_u`` by usable views (Section IV.D).
* :func:`greedy`: Algorithm 2 with the benefit ``B(v, V)`` of Eq. 6; after each choice the
  benefits of the candidates that share a user with it are recomputed (the paper recomputes
  the supersets of the chosen view; every candidate whose users' plans changed can lose
  benefit, so all of those are refreshed), candidates with benefit <= 0 are dropped.
* :func:`hierarchy`: Algorithm 3's bottom-up depth-first order over the transitive reduction
  of the subset order, then one pass in that order materializing every view whose benefit is
  positive when it is visited.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Feeds = frozenset[str]


@dataclass(frozen=True)
class Problem:
    """Users (theta, follow set) and feed rates of one component; H and L."""

    theta: Mapping[str, float]
    follows: Mapping[str, Feeds]
    phi: Mapping[str, float]
    push_cost: float
    pull_cost: float

    def maintenance(self, feeds: Iterable[str]) -> float:
        return self.push_cost * sum(self.phi[f] for f in feeds)

    def evaluation(self, user: str, sources: int) -> float:
        return self.theta[user] * self.pull_cost * sources if sources > 1 else 0.0


@dataclass
class Candidate:
    feeds: Feeds
    users: tuple[str, ...]
    query_freq: float
    update_freq: float


def candidate_views(p: Problem, full: bool = False) -> list[Candidate]:
    """Algorithm 1 (``full``: each user's whole follow set, Hierarchy-1's candidates).

    Sets of one feed are left out: a feed's native view already serves them. A candidate's
    users are found among the followers of its least-followed feed."""
    followers: dict[str, set[str]] = {}
    for u, fs in p.follows.items():
        for f in fs:
            followers.setdefault(f, set()).add(u)
    sets: dict[Feeds, float] = {}
    for u in sorted(p.follows):
        fs = p.follows[u]
        if full:
            groups = [fs]
        else:
            push = frozenset(f for f in fs if p.theta[u] * p.pull_cost >= p.phi[f] * p.push_cost)
            groups = [push, fs - push]
        for g in groups:
            if len(g) > 1:
                sets[g] = sets.get(g, 0.0) + p.theta[u]  # merged: query frequencies add up
    out = []
    for feeds, q in sets.items():
        rare = min(feeds, key=lambda f: (len(followers[f]), f))
        users = tuple(sorted(u for u in followers[rare] if feeds <= p.follows[u]))
        out.append(Candidate(feeds, users, q, sum(p.phi[f] for f in feeds)))

    return sorted(out, key=lambda c: (-len(c.feeds), sorted(c.feeds)))


def query_plan(follows: Feeds, views: Iterable[Feeds]) -> list[Feeds]:
    """Greedy set cover of ``follows`` by the usable ``views`` (subsets of it) and the native
    views: repeatedly the view covering most uncovered feeds (ties: the larger view, then
    the smaller sorted feed list), natives last."""
    usable = sorted(
        (v for v in set(views) if len(v) > 1 and v <= follows),
        key=lambda v: (-len(v), sorted(v)),
    )
    left = set(follows)
    plan: list[Feeds] = []
    while left:
        best = max(usable, key=lambda v: len(v & left), default=None)
        if best is None or len(best & left) <= 1:
            break
        plan.append(best)
        left -= best
    plan.extend(frozenset([f]) for f in sorted(left))
    return plan


@dataclass
class Selection:
    """Chosen views, each user's query plan, and per user the chosen views it may use
    (those whose feeds it all follows), so a plan is recomputed from those alone."""

    views: list[Feeds] = field(default_factory=list)
    plans: dict[str, list[Feeds]] = field(default_factory=dict)
    usable: dict[str, list[Feeds]] = field(default_factory=dict)

    def cost(self, p: Problem) -> float:
        m = sum(p.maintenance(v) for v in self.views)
        return m + sum(p.evaluation(u, len(plan)) for u, plan in self.plans.items())


def start(p: Problem) -> Selection:
    """No view materialized: every user reads its feeds' native views."""
    return Selection([], {u: query_plan(fs, []) for u, fs in p.follows.items()})


def benefit(p: Problem, s: Selection, c: Candidate) -> tuple[float, dict[str, list[Feeds]]]:
    """Eq. 6: the evaluation cost the candidate saves its users, minus its maintenance; and
    the users' new plans."""
    saved, plans = 0.0, {}
    for u in c.users:
        plan = query_plan(p.follows[u], [*s.usable.get(u, ()), c.feeds])
        gain = p.evaluation(u, len(s.plans[u])) - p.evaluation(u, len(plan))
        if gain > 0:
            saved += gain
            plans[u] = plan
    return saved - p.maintenance(c.feeds), plans


def take(s: Selection, c: Candidate, plans: dict[str, list[Feeds]]) -> None:
    """Materialize ``c``: its users may use it from now on; ``plans`` are the new plans."""
    s.views.append(c.feeds)
    for u in c.users:
        s.usable.setdefault(u, []).append(c.feeds)
    s.plans.update(plans)


def greedy(p: Problem, candidates: list[Candidate]) -> Selection:
    """Algorithm 2."""
    s = start(p)
    live = {c.feeds: c for c in candidates}
    scores = {f: benefit(p, s, c)[0] for f, c in live.items()}
    live = {f: c for f, c in live.items() if scores[f] > 0}
    of_user: dict[str, list[Feeds]] = {}
    for f, c in live.items():
        for u in c.users:
            of_user.setdefault(u, []).append(f)
    # a heap of (-benefit, -size, sorted feeds): the largest benefit first, ties to the
    # larger view, then the smaller sorted feed list; entries whose benefit changed since
    # they were pushed are skipped when popped
    heap = [(-scores[f], -len(f), tuple(sorted(f)), f) for f in live]
    heapq.heapify(heap)
    while heap:
        neg, _, _, best = heapq.heappop(heap)
        if best not in live or -neg != scores[best]:
            continue
        c = live.pop(best)
        gain, plans = benefit(p, s, c)
        if gain <= 0:  # stale after earlier choices: recompute and go on
            continue
        take(s, c, plans)
        # only candidates sharing a user with the chosen view can change benefit
        touched = {f for u in c.users for f in of_user.get(u, ()) if f in live}
        for f in sorted(touched, key=sorted):
            scores[f] = benefit(p, s, live[f])[0]
            if scores[f] <= 0:
                del live[f]
            else:
                heapq.heappush(heap, (-scores[f], -len(f), tuple(sorted(f)), f))
    return s


def bottom_up_order(candidates: list[Candidate]) -> list[Candidate]:
    """Algorithm 3: depth-first from the largest views down the transitive reduction of the
    subset order, each view listed after all views below it.

    A view's subsets are looked for among the candidates of one of its users only: a subset
    of v is contained in every follow set that contains v, so it shares all of v's users.
    This keeps the order linear in the candidates times the views per user, not quadratic
    in the candidates."""
    by_feeds = {c.feeds: c for c in candidates}
    views = sorted(by_feeds, key=lambda v: (-len(v), sorted(v)))
    of_user: dict[str, list[Feeds]] = {}
    for v in views:
        for u in by_feeds[v].users:
            of_user.setdefault(u, []).append(v)

    def below(v: Feeds) -> list[Feeds]:
        users = by_feeds[v].users
        pool = of_user[users[0]] if users else views
        return [w for w in pool if w < v]

    children: dict[Feeds, list[Feeds]] = {}
    for v in views:
        # transitive reduction: keep w < v only when no x with w < x < v
        b = below(v)
        children[v] = [w for w in b if not any(w < x for x in b if x != w)]
    order: list[Feeds] = []
    done: set[Feeds] = set()
    processed: set[Feeds] = set()
    for root in views:
        stack = [root]
        while stack:
            v = stack[-1]
            if v in processed:
                stack.pop()
                if v not in done:
                    done.add(v)
                    order.append(v)
            else:
                processed.add(v)
                stack.extend(children[v])
    return [by_feeds[v] for v in order]


def hierarchy(p: Problem, candidates: list[Candidate]) -> Selection:
    """Algorithm 3's order, materializing each view whose benefit is positive when visited."""
    s = start(p)
    for c in bottom_up_order(candidates):
        gain, plans = benefit(p, s, c)
        if gain > 0:
            take(s, c, plans)
    return s


ALGORITHMS: dict[str, tuple[bool, str]] = {
    "cz-greedy": (True, "greedy"),
    "cz-hierarchy1": (True, "hierarchy"),
    "cz-hierarchy2": (False, "hierarchy"),
}
"""Strategy -> (candidates from full follow sets, selection). The paper's Greedy uses full
follow sets (Section V.A); Hierarchy-1 full sets, Hierarchy-2 Algorithm 1's candidates."""


def view_id(feeds: Iterable[str]) -> str:
    """The id ``jobs.selection.shared.view_id`` computes in Spark, for the same feed set."""
    import hashlib

    return "v" + hashlib.sha1("\u001f".join(sorted(feeds)).encode()).hexdigest()[:16]


@dataclass
class PartPlan:
    """The outcome for one part: every edge's (mode, source), the materialized views, and
    the part's modeled cost under the selection and under FF-PerPair."""

    edges: list[tuple[str, str, str, str]]
    views: list[Feeds]
    cost: float
    ff_cost: float
    fallback: bool


def plan_part(
    p: Problem, candidates: list[Candidate], algorithm: str, ff_push: Mapping[str, Feeds]
) -> PartPlan:
    """Run ``algorithm`` over one part and turn the selection into edge assignments
    ``(consumer, producer, mode, source)``: a view of one feed is a pull of that producer, a
    larger view is mode ``view`` with the view's id; where plans overlap, an edge goes to the
    first view of the plan that holds it.

    ``ff_push``: the producers FF-PerPair pushes to each user. When the selection would cost
    more than FF-PerPair on this part (the algorithms are heuristics; see docs/shared-views.md),
    the part is served FF-PerPair's plan instead, so the strategy never costs more than
    FF-PerPair. Parts do not interact, so the guard holds for the sum."""
    select = greedy if ALGORITHMS[algorithm][1] == "greedy" else hierarchy
    s = select(p, candidates)
    cost = s.cost(p)
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
    for u in sorted(s.plans):
        assigned: set[str] = set()
        for v in s.plans[u]:
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
    return PartPlan(edges, sorted(used, key=sorted), cost, ff_cost, False)

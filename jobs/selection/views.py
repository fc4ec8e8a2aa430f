"""Global view selection with shared views (Chen & Zhou, Section IV), for one group of
interacting users and views, in plain Python.

This is the sequential core that the ``plan`` stage will run per independent component (views
with no subset relation and no shared users do not interact, Section IV.E) through
``applyInPandas``; a component holds a bounded number of users and candidate views.

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

    Sets of one feed are left out: a feed's native view already serves them."""
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
        users = tuple(sorted(u for u, fs in p.follows.items() if feeds <= fs))
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
    views: list[Feeds] = field(default_factory=list)
    plans: dict[str, list[Feeds]] = field(default_factory=dict)

    def cost(self, p: Problem) -> float:
        m = sum(p.maintenance(v) for v in self.views)
        return m + sum(p.evaluation(u, len(plan)) for u, plan in self.plans.items())


def _start(p: Problem) -> Selection:
    return Selection([], {u: query_plan(fs, []) for u, fs in p.follows.items()})


def benefit(p: Problem, s: Selection, c: Candidate) -> tuple[float, dict[str, list[Feeds]]]:
    """Eq. 6: the evaluation cost the candidate saves its users, minus its maintenance; and
    the users' new plans."""
    new_views = [*s.views, c.feeds]
    saved, plans = 0.0, {}
    for u in c.users:
        plan = query_plan(p.follows[u], new_views)
        gain = p.evaluation(u, len(s.plans[u])) - p.evaluation(u, len(plan))
        if gain > 0:
            saved += gain
            plans[u] = plan
    return saved - p.maintenance(c.feeds), plans


def _take(s: Selection, c: Candidate, plans: dict[str, list[Feeds]]) -> None:
    s.views.append(c.feeds)
    s.plans.update(plans)


def greedy(p: Problem, candidates: list[Candidate]) -> Selection:
    """Algorithm 2."""
    s = _start(p)
    live = {c.feeds: c for c in candidates}
    scores = {f: benefit(p, s, c)[0] for f, c in live.items()}
    live = {f: c for f, c in live.items() if scores[f] > 0}
    while live:
        best = max(live, key=lambda f: (scores[f], len(f), sorted(f)))
        c = live.pop(best)
        gain, plans = benefit(p, s, c)
        if gain <= 0:  # stale after earlier choices: recompute and go on
            continue
        _take(s, c, plans)
        touched = set(c.users)
        for f, other in list(live.items()):
            if touched.intersection(other.users):
                scores[f] = benefit(p, s, other)[0]
                if scores[f] <= 0:
                    del live[f]
    return s


def bottom_up_order(candidates: list[Candidate]) -> list[Candidate]:
    """Algorithm 3: depth-first from the largest views down the transitive reduction of the
    subset order, each view listed after all views below it."""
    by_feeds = {c.feeds: c for c in candidates}
    views = sorted(by_feeds, key=lambda v: (-len(v), sorted(v)))
    below = {v: [w for w in views if w < v] for v in views}
    # transitive reduction: keep w < v only when no x with w < x < v
    children = {
        v: [w for w in below[v] if not any(w < x for x in below[v] if x != w)] for v in views
    }
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
    s = _start(p)
    for c in bottom_up_order(candidates):
        gain, plans = benefit(p, s, c)
        if gain > 0:
            _take(s, c, plans)
    return s

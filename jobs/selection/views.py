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
  During selection a user's plan is re-covered with its current plan's views plus the view
  being weighed (:func:`benefit`).

* :func:`greedy`: Algorithm 2 with the benefit ``B(v, V)`` of Eq. 6; after each choice the
  benefits of the candidates that share a user with it are recomputed (the paper recomputes
  the supersets of the chosen view; every candidate whose users' plans changed can lose
  benefit, so all of those are refreshed), candidates with benefit <= 0 are dropped.
* :func:`hierarchy`: Algorithm 3's bottom-up depth-first order over the transitive reduction
  of the subset order, then one pass in that order materializing every view whose benefit is
  positive when it is visited.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

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


def candidate_views(
    p: Problem, full: bool | str = False, per_user: int | None = None
) -> list[Candidate]:
    """Algorithm 1 (``full``: each user's whole follow set, Hierarchy-1's candidates;
    ``"union"``: both, the candidates of ``cz-greedy-union``).

    Sets of one feed are left out: a feed's native view already serves them. A candidate's
    users are found among the followers of its least-followed feed. With ``per_user``, a
    user is a user of at most that many candidates, its largest (ties by :func:`view_id`);
    candidates left with no user are dropped."""
    followers: dict[str, set[str]] = {}
    for u, fs in p.follows.items():
        for f in fs:
            followers.setdefault(f, set()).add(u)
    sets: dict[Feeds, float] = {}
    for u in sorted(p.follows):
        fs = p.follows[u]
        groups = [fs] if full else []
        if full is not True:
            push = frozenset(f for f in fs if p.theta[u] * p.pull_cost >= p.phi[f] * p.push_cost)
            groups += [push, fs - push]
        for g in groups:
            if len(g) > 1:
                sets[g] = sets.get(g, 0.0) + p.theta[u]  # merged: query frequencies add up
    out = []
    for feeds, q in sets.items():
        rare = min(feeds, key=lambda f: (len(followers[f]), f))
        users = tuple(sorted(u for u in followers[rare] if feeds <= p.follows[u]))
        out.append(Candidate(feeds, users, q, sum(p.phi[f] for f in feeds)))
    if per_user is not None:
        of_user: dict[str, list[tuple[int, str, Feeds]]] = {}
        for c in out:
            for u in c.users:
                of_user.setdefault(u, []).append((-len(c.feeds), view_id(c.feeds), c.feeds))
        kept: dict[Feeds, list[str]] = {}
        for u, cs in of_user.items():
            for _, _, feeds in sorted(cs)[:per_user]:
                kept.setdefault(feeds, []).append(u)
        out = [
            Candidate(c.feeds, tuple(sorted(kept[c.feeds])), c.query_freq, c.update_freq)
            for c in out
            if c.feeds in kept
        ]

    return sorted(out, key=lambda c: (-len(c.feeds), sorted(c.feeds)))


def _order(v: Feeds) -> tuple[int, list[str]]:
    return (-len(v), sorted(v))


def query_plan(follows: Feeds, views: Iterable[Feeds]) -> list[Feeds]:
    """Greedy set cover of ``follows`` by the usable ``views`` (subsets of it) and the native
    views: repeatedly the view covering most uncovered feeds (ties: the larger view, then
    the smaller sorted feed list), natives last."""
    usable = sorted((v for v in set(views) if len(v) > 1 and v <= follows), key=_order)
    return _cover(follows, usable)


def _cover(follows: Feeds, usable: list[Feeds]) -> list[Feeds]:
    views, covered = _greedy_cover(usable)
    views.extend(frozenset([f]) for f in sorted(follows - covered))
    return views


def _cover_len(follows: Feeds, usable: list[Feeds]) -> int:
    views, covered = _greedy_cover(usable)
    return len(views) + len(follows) - len(covered)


def _greedy_cover(usable: list[Feeds]) -> tuple[list[Feeds], set[str]]:
    """The greedy part of :func:`query_plan` over ``usable`` (distinct subsets of the
    follow set of two feeds or more, in :func:`_order`): the views picked, and the feeds
    they cover (the rest go to their native views).

    Lazy greedy: a view's count of uncovered feeds only falls as the cover grows, so a heap of
    stale counts (ties by position) yields the same choice as a scan of all views, after
    recounting only the views that reach the top. Counting against the covered feeds keeps
    the work independent of the size of the follow set."""
    heap = [(-len(v), i) for i, v in enumerate(usable)]  # sorted, hence a heap
    covered: set[str] = set()
    plan: list[Feeds] = []
    while heap:
        neg, i = heap[0]
        n = len(usable[i].difference(covered)) if covered else len(usable[i])
        if n == -neg:
            if n <= 1:
                break
            heapq.heappop(heap)
            plan.append(usable[i])
            covered |= usable[i]
        elif n <= 1:
            heapq.heappop(heap)  # can never be chosen: counts only fall
        else:
            heapq.heapreplace(heap, (-n, i))
    return plan, covered


@dataclass
class Selection:
    """Chosen views and each user's query plan: the materialized views it reads (in the
    order the cover picked them) and the number of sources it reads, natives included. The
    natives are spelled out only by :attr:`plans`."""

    follows: Mapping[str, Feeds]
    views: list[Feeds] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)
    picked: dict[str, list[Feeds]] = field(default_factory=dict)
    # per user, the views of ``picked`` in _order, and their _order keys
    _sorted: dict[str, tuple[list[tuple[int, list[str]]], list[Feeds]]] = field(
        default_factory=dict
    )

    @property
    def plans(self) -> dict[str, list[Feeds]]:
        """Every user's plan: its materialized views, then the natives of the rest."""
        out = {}
        for u, fs in self.follows.items():
            views = self.picked.get(u, [])
            rest = fs.difference(*views)
            out[u] = [*views, *(frozenset([f]) for f in sorted(rest))]
        return out

    def cost(self, p: Problem) -> float:
        m = sum(p.maintenance(v) for v in self.views)
        return m + sum(p.evaluation(u, n) for u, n in self.sizes.items())

    def pool(self, u: str, v: Feeds, key: tuple[int, list[str]]) -> list[Feeds]:
        """The materialized views of ``u``'s plan and ``v`` (of :func:`_order` ``key``), in
        :func:`_order`."""
        keys, picked = self._sorted.get(u, ([], []))
        at = bisect.bisect_left(keys, key)
        return [*picked[:at], v, *picked[at:]]

    def replan(self, u: str, v: Feeds, key: tuple[int, list[str]]) -> None:
        """Give ``u`` the greedy cover by its plan's views and ``v``."""
        views, covered = _greedy_cover(self.pool(u, v, key))
        self.picked[u] = views
        self.sizes[u] = len(views) + len(self.follows[u]) - len(covered)
        ordered = sorted((_order(w), w) for w in views)
        self._sorted[u] = ([k for k, _ in ordered], [w for _, w in ordered])


def start(p: Problem) -> Selection:
    """No view materialized: every user reads its feeds' native views."""
    return Selection(p.follows, sizes={u: len(fs) for u, fs in p.follows.items()})


def benefit(p: Problem, s: Selection, c: Candidate) -> tuple[float, dict[str, int]]:
    """Eq. 6: the evaluation cost the candidate saves its users, minus its maintenance; and
    the number of views in the new plan of each user it saves cost.

    A user's new plan is the greedy cover of its follow set by the views of its current
    plan and the candidate: Algorithm 2 (lines 15-16, Section IV.D) gives the users "whose
    query evaluation cost can be reduced by putting v in its query plan" the new, cheaper
    plan. Covering with the current plan's views rather than every materialized view the
    user could read keeps a benefit linear in the plan's length; a view the plan dropped is
    not taken back. A user whose plan reads one view gains nothing."""
    saved, sizes = 0.0, {}
    key = _order(c.feeds)
    for u in c.users:
        old = s.sizes[u]
        if old <= 1:
            continue
        new = _cover_len(p.follows[u], s.pool(u, c.feeds, key))
        gain = p.evaluation(u, old) - p.evaluation(u, new)
        if gain > 0:
            saved += gain
            sizes[u] = new
    return saved - p.maintenance(c.feeds), sizes


def take(p: Problem, s: Selection, c: Candidate, gainers: Iterable[str]) -> None:
    """Materialize ``c``; the ``gainers`` (the users :func:`benefit` found to gain) get
    their new plans."""
    s.views.append(c.feeds)
    key = _order(c.feeds)
    for u in gainers:
        s.replan(u, c.feeds, key)


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
        take(p, s, c, plans)
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
        # transitive reduction: keep w < v only when no x with w < x < v, i.e. the maximal
        # views below v. ``below`` lists larger views first, so a view is maximal when it is
        # in none of the maximal views listed before it (any larger view it is in is, or is
        # in, one of those).
        tops: list[Feeds] = []
        for w in below(v):
            if not any(w < x for x in tops):
                tops.append(w)
        children[v] = tops

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
            take(p, s, c, plans)
    return s


ALGORITHMS: dict[str, tuple[bool | str, str]] = {
    "cz-greedy": (True, "greedy"),
    "cz-hierarchy1": (True, "hierarchy"),
    "cz-hierarchy2": (False, "hierarchy"),
    "cz-greedy-union": ("union", "greedy"),
    "cz-lp": (False, "lp"),
}
"""Strategy -> (candidates: ``True`` full follow sets, ``False`` Algorithm 1's, ``"union"``
both; selection). The paper's Greedy uses full follow sets (Section V.A); Hierarchy-1 full
sets, Hierarchy-2 Algorithm 1's candidates. ``cz-greedy-union`` is Greedy over both sets:
on parts solved exactly it is the closest of the heuristics to the optimum
(docs/shared-views.md). ``cz-lp`` is Hierarchy-2 improved part by part by Greedy over
both sets and, on small parts, the LP over every view (``jobs.selection.part``)."""


def lower_bound(p: Problem) -> float:
    """A lower bound on the modeled cost (Eq. 5) of every plan over ``p``, whatever views it
    materializes: no selection, Section IV's algorithms or any other, can cost less.

    Each view's maintenance ``M(v)`` (Eq. 4) is split evenly among the users that read it,
    and a user's evaluation, ``theta_u L`` per source (Eq. 3), evenly among the source's
    feeds. A user ``u`` who reads two sources or more then pays for each feed ``f`` at least
    the cheapest of:

    * ``f``'s native view: ``theta_u L``;
    * a view read by ``k >= 2`` users: ``H phi_f / k + theta_u L / |v|``. The view lies in
      every reader's follow set, so ``|v|`` is at most the ``(k-1)``-th largest overlap
      ``|F_u & F_w|`` among the other followers ``w`` of ``f``;
    * its personal view (read by ``u`` alone): ``H phi_f``, and ``theta_u L`` once for it.

    A user who reads one source reads a view of its whole follow set (or its one feed's
    native view, free), read by at most the users whose follow sets contain it.

    Where no two follow sets overlap in two feeds, this is each user's best plan alone (a
    personal view over its least active feeds); shared views lower it only as far as the
    overlaps allow. It is not tight: each feed is priced in its own best view."""
    H, L = p.push_cost, p.pull_cost
    followers: dict[str, list[str]] = {}
    for u, fs in p.follows.items():
        for f in fs:
            followers.setdefault(f, []).append(u)
    total = 0.0
    for u, fs in p.follows.items():
        n = len(fs)
        if n < 2:
            continue  # its one feed's native view, no evaluation
        overlap: dict[str, int] = {}
        for f in fs:
            for w in followers[f]:
                overlap[w] = overlap.get(w, 0) + 1
        del overlap[u]
        containing = sum(1 for x in overlap.values() if x == n)
        one = H * sum(p.phi[f] for f in fs) / (1 + containing)
        read = p.theta[u] * L
        shared, personal = 0.0, read
        for f in fs:
            maint = H * p.phi[f]
            best = read
            sizes = sorted((overlap[w] for w in followers[f] if w != u), reverse=True)
            for k, size in enumerate(sizes, 2):
                best = min(best, maint / k + read / size)
            shared += best
            personal += min(best, maint)
        total += min(one, shared, personal)
    return total


def edges_lower_bound(edges: Any, push_cost: float, pull_cost: float) -> float:
    """:func:`lower_bound` over a day's follow edges as the plan prices them (a pandas frame
    of ``consumer_id, producer_id, theta, phi, active``, ``feeding_frenzy.edge_inputs``),
    sequentially: the reference :mod:`jobs.selection.bound` is checked against. Inactive
    consumers pull every feed under every strategy, so they add their reads as they are."""
    active = edges["active"].astype(bool)
    on = edges.loc[active]
    p = Problem(
        on.groupby("consumer_id")["theta"].first().to_dict(),
        on.groupby("consumer_id")["producer_id"].agg(frozenset).to_dict(),
        on.groupby("producer_id")["phi"].first().to_dict(),
        push_cost,
        pull_cost,
    )
    idle = edges.loc[~active].groupby("consumer_id").agg(n=("phi", "size"), theta=("theta", "max"))
    idle = idle[idle.n > 1]
    return lower_bound(p) + pull_cost * float((idle.theta * idle.n).sum())


def view_id(feeds: Iterable[str]) -> str:
    """The id ``jobs.selection.shared.view_id`` computes in Spark, for the same feed set."""
    import hashlib

    return "v" + hashlib.sha1("\u001f".join(sorted(feeds)).encode()).hexdigest()[:16]

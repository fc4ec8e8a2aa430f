"""Brute-force view selection for tests: random small instances of Chen & Zhou's problem and
the cheapest plan of all found by enumeration (``jobs.selection.exact`` solves it as an
integer program; this is the independent oracle)."""

from __future__ import annotations

import random

from jobs.selection import views

H, L = 3.0, 1.0


def random_problem(seed: int, n_feeds: int | None = None, n_users: int | None = None):
    r = random.Random(seed)
    feeds = [f"f{i}" for i in range(n_feeds or r.randint(3, 8))]
    users = [f"u{i}" for i in range(n_users or r.randint(2, 8))]
    phi = {f: r.choice([0.5, 1.0, 2.0, 3.0, 5.0]) for f in feeds}
    theta = {u: r.choice([1.0, 2.0, 4.0, 8.0, 16.0]) for u in users}
    follows = {u: frozenset(r.sample(feeds, r.randint(1, len(feeds)))) for u in users}
    return views.Problem(theta, follows, phi, H, L)


def exact_optimum(p: views.Problem) -> float:
    """The cheapest plan of all, by brute force: every set of materialized views (feed sets
    of two or more), each user reading the fewest sources that cover its follow set."""
    import itertools

    feeds = sorted(p.phi)
    subsets = [
        frozenset(c) for n in range(2, len(feeds) + 1) for c in itertools.combinations(feeds, n)
    ]

    def fewest(fs: frozenset[str], usable: list[frozenset[str]]) -> int:
        best = len(fs)  # every feed native
        for n in range(1, len(usable) + 1):
            for combo in itertools.combinations(usable, n):
                covered = frozenset().union(*combo)
                best = min(best, n + len(fs - covered))
        return best

    best = float("inf")
    for n in range(len(subsets) + 1):
        for chosen in itertools.combinations(subsets, n):
            cost = sum(p.maintenance(v) for v in chosen)
            for u, fs in p.follows.items():
                cost += p.evaluation(u, fewest(fs, [v for v in chosen if v <= fs]))
            best = min(best, cost)
    return best

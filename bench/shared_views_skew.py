"""Modeled cost of the shared-view strategies against feed-popularity skew (Chen & Zhou,
Figure 6b), with the sequential planner on generated graphs (no Spark).

    python -m bench.shared_views_skew [--profile cz2015] [--scale 0.2] \
        [--skews 0.39,0.6,0.8,1.0,1.2,1.43]

For each skew of users per feed, draws the profile's follow graph and its true rates (the
generator's), then prices PushAll, PullAll, FF-PerPair, the per-user optimum (the best
personal view for each user alone) and Greedy / Hierarchy-1 / Hierarchy-2 (each planned over
the whole graph at once, without parts and without the FF-PerPair guard), relative to
FF-PerPair, as a Markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from jobs.selection import views
from jobs.workloads.generate import PROFILES, Population, scaled, stochastic_round


def problem(profile_name: str, scale: float, skew: float, seed: int, H: float, L: float):
    prof = dataclasses.replace(scaled(PROFILES[profile_name], scale), fan_out_zipf=skew)
    pop = Population.draw(prof, seed)
    rng = np.random.default_rng([seed, 0, 1])
    P = prof.producers
    deg = np.clip(stochastic_round(pop.fan_in, rng), 1, P - 1)
    keys = pop.draw_edges(np.arange(prof.consumers), deg, rng, fill=prof.fill_degrees)
    follows: dict[str, set[str]] = {}
    for c, p in zip((keys // P).tolist(), (keys % P).tolist(), strict=True):
        follows.setdefault(f"u{c}", set()).add(f"f{p}")
    theta = {u: float(pop.view_rate[int(u[1:])]) for u in follows}
    phi = {f"f{p}": float(pop.event_rate[p]) for p in range(P)}
    return views.Problem(theta, {u: frozenset(fs) for u, fs in follows.items()}, phi, H, L)


def baselines(p: views.Problem) -> dict[str, float]:
    H, L = p.push_cost, p.pull_cost
    out = {"push-all": 0.0, "pull-all": 0.0, "ff-per-pair": 0.0, "per-user optimum": 0.0}
    for u, fs in p.follows.items():
        t, phis = p.theta[u], sorted(p.phi[f] for f in fs)
        n = len(phis)
        out["push-all"] += H * sum(phis)
        out["pull-all"] += p.evaluation(u, n)
        push = [x for x in phis if t * L >= x * H]
        out["ff-per-pair"] += H * sum(push) + p.evaluation(u, n - len(push) + (1 if push else 0))
        best, acc = p.evaluation(u, n), 0.0
        for k, x in enumerate(phis, 1):  # the personal view holds the k least active feeds
            acc += x
            best = min(best, H * acc + p.evaluation(u, n - k + 1))
        out["per-user optimum"] += best
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cz2015", choices=sorted(PROFILES))
    ap.add_argument("--scale", type=float, default=0.2)
    ap.add_argument("--skews", default="0.39,0.6,0.8,1.0,1.2,1.43")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--push-cost", type=float, default=3.0)
    ap.add_argument("--pull-cost", type=float, default=1.0)
    args = ap.parse_args()
    names = ["push-all", "pull-all", "lower bound", "per-user optimum", "cz-greedy"]
    names += ["cz-hierarchy1", "cz-hierarchy2"]
    print(
        f"{args.profile} x{args.scale:g}, H/L = {args.push_cost / args.pull_cost:g}; "
        "modeled cost / FF-PerPair"
    )
    print("| users-per-feed skew | edges | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for skew in (float(x) for x in args.skews.split(",")):
        p = problem(args.profile, args.scale, skew, args.seed, args.push_cost, args.pull_cost)
        costs = baselines(p)
        costs["lower bound"] = views.lower_bound(p)
        seconds = {}
        for name, (full, how) in views.ALGORITHMS.items():
            if how == "lp":
                continue  # the LP only on small parts: Hierarchy-2 on a whole graph
            t = time.perf_counter()
            select = views.greedy if how == "greedy" else views.hierarchy
            costs[name] = select(p, views.candidate_views(p, full)).cost(p)
            seconds[name] = time.perf_counter() - t
        ff = costs["ff-per-pair"]
        edges = sum(len(fs) for fs in p.follows.values())
        cells = " | ".join(f"{costs[n] / ff:.3f}" for n in names)
        print(f"| {skew:g} | {edges:,} | {cells} |", flush=True)


if __name__ == "__main__":
    main()

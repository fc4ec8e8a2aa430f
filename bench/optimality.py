"""How far the view-selection strategies are from the optimum, on parts small enough to solve
exactly (``jobs.selection.exact``: the cost model as an integer program, HiGHS), without Spark.

    python -m bench.optimality [--graph cz2015|ff2010|gplus|wiki-vote|higgs] [--scale 0.05] \
        [--parts 200] [--part-users 12] [--max-follows 10] [--seed 7]

A graph's follows and true rates (generated profiles as ``feedpipe generate`` draws them;
wiki-Vote, from ``../shared/data`` unless ``--wiki-vote PATH``, with the ``cz2015`` profile's
rates drawn for its users and feeds as ``feedpipe import snap --activity`` does; the Higgs
week, from ``../shared/data`` unless ``--higgs PATH``, with its users' own activity as rates:
:func:`higgs`). A part is
the followers of one random feed that follow at most ``--max-follows`` feeds, at most
``--part-users`` of them, with their whole follow sets: users who share a feed, the
interaction shared views exploit. On each part, every strategy's modeled cost (Eq. 5) against:

* the optimum over every plan (every subset of a follow set as a possible view);
* the LP relaxation of that program and the combinatorial ``views.lower_bound``, both bounds
  over every plan;
* the optimum over Algorithm 1's candidates (plans Hierarchy-2 could build).

Each shared-view strategy is guarded by FF-PerPair as ``plan`` guards it; ``auto (default)``
is what ``auto`` serves on the part with the default strategies (the cheapest of those
priced here), ``auto (all)`` with every strategy enabled. Prints a Markdown
table and writes
``bench/results/optimality_<graph>[_<scale>]_<part users>x<max follows>.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import numpy as np

from bench import provenance
from jobs.common.config import DEFAULT_STRATEGIES
from jobs.selection import exact, part, views
from jobs.workloads.generate import PROFILES, Population, scaled

WIKI_VOTE = Path("../shared/data/wiki-vote/wiki-Vote.txt.gz")
HIGGS = Path("../shared/data/higgs-twitter")
PRICED = ("push-all", "pull-all", "ff-per-pair", *views.ALGORITHMS)
STRATEGIES = (*PRICED, "auto (default)", "auto (all)")


def generated(name: str, scale: float, seed: int, H: float, L: float) -> views.Problem:
    from bench.shared_views_skew import problem

    prof = scaled(PROFILES[name], scale)
    return problem(name, scale, prof.fan_out_zipf, seed, H, L)


def wiki_vote(path: Path, seed: int, H: float, L: float) -> views.Problem:
    """wiki-Vote as ``feedpipe import snap`` lands it (a voter follows whom it voted on), with
    the ``cz2015`` profile's rates drawn for its users and feeds."""
    from jobs.workloads.importers import EdgeStats, read_snap_edges

    follows: dict[str, set[str]] = {}
    for c, p in read_snap_edges(path, EdgeStats()):
        follows.setdefault(c, set()).add(p)
    cons = sorted(follows)
    prods = sorted({p for fs in follows.values() for p in fs})
    prof = dataclasses.replace(PROFILES["cz2015"], consumers=len(cons), producers=len(prods))
    pop = Population.draw(prof, seed)
    theta = {u: float(pop.view_rate[i]) for i, u in enumerate(cons)}
    phi = {f: float(pop.event_rate[i]) for i, f in enumerate(prods)}
    return views.Problem(theta, {u: frozenset(fs) for u, fs in follows.items()}, phi, H, L)


def higgs(src: Path, H: float, L: float) -> views.Problem:
    """The Higgs week as ``feedpipe import higgs`` lands it: the retweet network as the
    follows, and each user's actions of the week (retweets, mentions, replies) as both its
    events and its views, as the importer writes them. Rates are actions per day, the
    posterior mean under Jeffreys' prior (``(actions + 0.5) / 7``), so that a user seen only
    as a follow target still has a small rate, as the ``rates`` stage gives one."""
    import gzip
    from collections import Counter

    from jobs.workloads.importers import EdgeStats, read_snap_edges

    actions: Counter[str] = Counter()
    with gzip.open(src / "higgs-activity_time.txt.gz", "rt") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 4:
                actions[parts[0]] += 1
    follows: dict[str, set[str]] = {}
    for c, p in read_snap_edges(src / "higgs-retweet_network.edgelist.gz", EdgeStats()):
        follows.setdefault(c, set()).add(p)
    prods = {p for fs in follows.values() for p in fs}
    rate = {u: (actions[u] + 0.5) / 7 for u in {*follows, *prods}}
    return views.Problem(
        {u: rate[u] for u in follows},
        {u: frozenset(fs) for u, fs in follows.items()},
        {f: rate[f] for f in prods},
        H,
        L,
    )


def parts(p: views.Problem, n: int, users: int, max_follows: int, seed: int):
    """``n`` parts: the followers of a random feed with at most ``max_follows`` follows (and
    more than one), at most ``users`` of them; feeds with fewer than two such followers are
    passed over."""
    rng = np.random.default_rng(seed)
    followers: dict[str, list[str]] = {}
    for u, fs in sorted(p.follows.items()):
        if 1 < len(fs) <= max_follows:
            for f in sorted(fs):
                followers.setdefault(f, []).append(u)
    feeds = sorted(f for f, us in followers.items() if len(us) > 1)
    for f in rng.choice(feeds, size=min(n, len(feeds)), replace=False):
        us = followers[str(f)]
        if len(us) > users:
            us = sorted(rng.choice(us, size=users, replace=False).tolist())
        fs = {u: p.follows[u] for u in us}
        feeds_in = {g for s in fs.values() for g in s}
        yield views.Problem(
            {u: p.theta[u] for u in us},
            fs,
            {g: p.phi[g] for g in feeds_in},
            p.push_cost,
            p.pull_cost,
        )


def costs(p: views.Problem) -> dict[str, float]:
    from bench.shared_views_skew import baselines

    out = baselines(p)
    del out["per-user optimum"]
    ff = out["ff-per-pair"]
    for name, (full, _) in views.ALGORITHMS.items():
        cost = part.select(p, views.candidate_views(p, full), name)[1]
        out[name] = min(cost, ff)  # plan's guard
    out["auto (default)"] = min(out[n] for n in PRICED if n in DEFAULT_STRATEGIES)
    out["auto (all)"] = min(out[n] for n in PRICED)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", default="cz2015", choices=[*sorted(PROFILES), "wiki-vote", "higgs"])
    ap.add_argument("--scale", type=float, default=0.05, help="generated graphs only")
    ap.add_argument("--wiki-vote", type=Path, default=WIKI_VOTE)
    ap.add_argument("--higgs", type=Path, default=HIGGS, help="the SNAP higgs-twitter folder")
    ap.add_argument("--parts", type=int, default=200)
    ap.add_argument("--part-users", type=int, default=12)
    ap.add_argument("--max-follows", type=int, default=10)
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds of HiGHS a part")
    ap.add_argument("--view-limit", type=int, default=200_000, help="(user, view) pairs a part")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--push-cost", type=float, default=3.0)
    ap.add_argument("--pull-cost", type=float, default=1.0)
    args = ap.parse_args()
    H, L = args.push_cost, args.pull_cost
    if args.graph == "wiki-vote":
        g = wiki_vote(args.wiki_vote, args.seed, H, L)
    elif args.graph == "higgs":
        g = higgs(args.higgs, H, L)
    else:
        g = generated(args.graph, args.scale, args.seed, H, L)

    rows, too_large = [], 0
    for p in parts(g, args.parts, args.part_users, args.max_follows, args.seed):
        try:
            every = exact.every_view(p, limit=args.view_limit)
        except exact.TooLarge:
            too_large += 1
            continue
        opt = exact.solve(p, every, time_limit=args.time_limit)
        lp = exact.solve(p, every, relax=True)
        t = time.perf_counter()
        cand = exact.solve(p, [c.feeds for c in views.candidate_views(p)])
        rows.append(
            {
                "users": len(p.follows),
                "feeds": len(p.phi),
                "edges": sum(map(len, p.follows.values())),
                "optimal": opt.optimal,
                "optimum": opt.cost,
                "bound": opt.bound,
                "lp": lp.bound,
                "combinatorial": views.lower_bound(p),
                "candidates_optimum": cand.cost,
                "milp_s": opt.seconds,
                "candidates_s": time.perf_counter() - t,
                "costs": costs(p),
            }
        )
    solved = [r for r in rows if r["optimal"] and r["optimum"] > 0]
    if not solved:
        fewest = min((len(fs) for fs in g.follows.values()), default=0)
        raise SystemExit(
            f"{args.graph}: no part solved exactly ({len(rows)} parts, {too_large} too large; "
            f"the fewest follows of a consumer: {fewest}, --max-follows {args.max_follows})"
        )
    summary = {}
    for name in [*STRATEGIES, "candidates_optimum", "lp", "combinatorial"]:

        def value(r: dict, name: str = name) -> float:
            return r["costs"][name] if name in r["costs"] else r[name]

        gaps = [value(r) / r["optimum"] - 1 for r in solved]
        summary[name] = {
            "mean": statistics.fmean(gaps),
            "max": max(gaps),
            "min": min(gaps),
            "within_5pct": sum(abs(x) <= 0.05 + 1e-12 for x in gaps) / len(gaps),
            "vs_ff": sum(value(r) for r in solved) / sum(r["costs"]["ff-per-pair"] for r in solved),
        }
    result = {
        "graph": args.graph,
        "scale": args.scale if args.graph in PROFILES else None,
        **provenance({k: str(v) for k, v in vars(args).items()}),
        "parts": len(rows),
        "too_large": too_large,
        "solved": len(solved),
        "part_edges": {
            "median": statistics.median(r["edges"] for r in rows),
            "max": max(r["edges"] for r in rows),
        },
        "milp_s": {
            "median": statistics.median(r["milp_s"] for r in rows),
            "max": max(r["milp_s"] for r in rows),
        },
        "summary": summary,
        "rows": rows,
    }
    print(
        f"{args.graph}: {len(solved)} of {len(rows)} parts solved exactly, {too_large} too large "
        f"(median {result['part_edges']['median']} edges, max {result['part_edges']['max']}; "
        f"HiGHS median {result['milp_s']['median']:.2f} s, max {result['milp_s']['max']:.1f} s)"
    )
    print("| plan or bound | total / optimum | mean gap | max gap | parts within 5% |")
    print("|---|---|---|---|---|")
    for name, s in summary.items():
        total = sum(r["costs"][name] if name in r["costs"] else r[name] for r in solved) / sum(
            r["optimum"] for r in solved
        )
        print(
            f"| {name} | {total:.3f} | {s['mean']:+.1%} | {s['max']:+.1%} | "
            f"{s['within_5pct']:.0%} |"
        )
    out = Path("bench/results")
    out.mkdir(parents=True, exist_ok=True)
    tag = f"_{args.scale:g}" if args.graph in PROFILES else ""
    tag += f"_{args.part_users}x{args.max_follows}"
    (out / f"optimality_{args.graph}{tag}.json").write_text(dumps(result))


def dumps(result: dict) -> str:
    """The results as indented JSON, with one line per part."""
    head = json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2)
    rows = ",\n".join("    " + json.dumps(r) for r in result["rows"])
    return f'{head[:-2]},\n  "rows": [\n{rows}\n  ]\n}}\n'


if __name__ == "__main__":
    main()

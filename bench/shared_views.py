"""Shared-view planning at scale (Chen & Zhou, Section V): planning wall time per strategy
and modeled cost relative to FF-PerPair, on a generated workload or a real graph.

    python -m bench.shared_views --profile gplus [--scale 1] [--work var/bench/gplus] \
        [--strategies cz-hierarchy2,cz-greedy] [--part-users 32000] [--lower-bound] \
        [--bound-pairs 6000000] [--tag NAME]
    python -m bench.shared_views --graph higgs|wiki-vote [--strategies ...] [--lower-bound]

Generates one day of the profile, or imports a real graph as ``feedpipe import`` does (the
Higgs week: its seven days, the retweet network as follows and the users' actions as
events and views; wiki-Vote: its votes as follows with seven days of the ``cz2015``
profile's activity, ``import snap --activity``), from ``../shared/data`` (skipped when the
landing data is there). Runs ``ingest`` and ``rates`` on every day, then the ``plan`` stage
of the last day once for the Feeding Frenzy baselines and once per shared-view strategy
(each with FF-PerPair beside it, which the shared-view strategies fall back to part by
part). Prints a Markdown table and writes
``bench/results/shared_views_<profile>_<scale>.json`` (``shared_views_<graph>.json``).

``--lower-bound`` also prices ``jobs.selection.views.lower_bound`` on the day's graph and rates:
no plan, whatever its views, costs less. It is computed in this process over the whole graph
(every user's overlaps with the other followers of its feeds), so it suits graphs of a few
hundred thousand edges, like ``cz2015``, not ``gplus``. The plan stage's own certificate
(``plan_cost.lower_bound``, ``jobs.selection.bound``, within ``--bound-pairs``) is printed
beside it on every run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import resource
import time
from pathlib import Path

from bench import provenance
from jobs.common.config import load_settings
from jobs.common.records import PlanRecord
from jobs.common.spark import build_session
from jobs.common.storage import Storage
from jobs.common.tables import contract, has_partition, read_partition
from jobs.selection import views
from jobs.stages import runner
from jobs.stages.plan import day_edges
from jobs.workloads.generate import PROFILES, generate, scaled

DAY = dt.date(2026, 1, 1)
DATA = Path("../shared/data")


def import_higgs_week(out: Storage) -> None:
    from jobs.workloads.importers import import_higgs

    import_higgs(DATA / "higgs-twitter", out)


def import_wiki_vote(out: Storage) -> None:
    from jobs.workloads.importers import import_snap_edges

    src = DATA / "wiki-vote" / "wiki-Vote.txt.gz"
    import_snap_edges(src, out, DAY, activity_profile="cz2015", days=7, seed=7)


REAL = {"higgs": import_higgs_week, "wiki-vote": import_wiki_vote}
"""The real graphs ``--graph`` names, each landed as ``feedpipe import`` lands it."""
BASELINES = ("push-all", "pull-all", "ff-per-pair", "ff-consumer")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="gplus", choices=sorted(PROFILES))
    ap.add_argument("--graph", choices=sorted(REAL), help="a real graph instead of a profile")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--work", default=None, help="landing and warehouse go under this folder")
    ap.add_argument("--strategies", default="cz-hierarchy2,cz-hierarchy1,cz-greedy")
    ap.add_argument("--part-users", type=int, default=32000)
    ap.add_argument("--user-views", type=int, default=30)
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--shuffle-partitions", type=int, default=16)
    ap.add_argument("--lower-bound", action="store_true", help="price the bound on any plan")
    ap.add_argument("--tag", default="", help="appended to the result file's name")
    ap.add_argument(
        "--bound-pairs", type=int, default=6_000_000, help="the plan's certificate budget"
    )
    args = ap.parse_args()

    label = args.graph or f"{args.profile}-{args.scale:g}"
    work = Path(args.work or f"var/bench/{label}")
    landing, warehouse = work / "landing", work / "warehouse"
    profile = None if args.graph else scaled(PROFILES[args.profile], args.scale)
    result: dict = {
        "graph": args.graph,
        "profile": None if args.graph else args.profile,
        "scale": None if args.graph else args.scale,
        "consumers": profile.consumers if profile else None,
        "producers": profile.producers if profile else None,
        "part_users": args.part_users,
        "user_views": args.user_views,
        **provenance({k: v for k, v in vars(args).items() if k != "work"}),
        "stages": {},
        "strategies": {},
    }
    if not (landing / "follows").is_dir():
        t = time.perf_counter()
        if args.graph:
            REAL[args.graph](Storage.at(str(landing)))
        else:
            assert profile is not None
            generate(Storage.at(str(landing)), DAY, 1, profile, seed=7)
        result["stages"]["generate" if profile else "import"] = round(time.perf_counter() - t, 1)
    days = sorted(dt.date.fromisoformat(d.name[3:]) for d in (landing / "events").glob("ds=*"))
    last = days[-1]
    result["days"] = [str(d) for d in days]

    base = load_settings(
        overrides={
            "landing": str(landing),
            "warehouse": str(warehouse),
            "view_part_users": args.part_users,
            "view_user_views": args.user_views,
            "bound_pairs": args.bound_pairs,
            "shuffle_partitions": args.shuffle_partitions,
            "spark_conf": {"spark.driver.memory": args.driver_memory},
        }
    )
    spark = build_session(base, "bench-shared-views")
    wh = Storage.at(base.warehouse)
    for day in days:
        for layer, table, stage in (
            ("clean", "follows", "ingest"),
            ("rates", "producer_rates", "rates"),
        ):
            if not has_partition(wh, contract(layer, table), day):
                t = time.perf_counter()
                runner.run_stage(stage, base, day, spark)
                took = round(time.perf_counter() - t, 1)
                result["stages"][stage] = round(result["stages"].get(stage, 0.0) + took, 1)
    edges = read_partition(spark, wh, contract("clean", "follows"), last).count()
    result["edges"] = edges

    def plan(strategies: tuple[str, ...], strategy: str) -> tuple[float, dict, PlanRecord]:
        s = dataclasses.replace(base, strategies=strategies, strategy=strategy)
        t = time.perf_counter()
        stats = runner.run_stage("plan", s, last, spark)
        assert isinstance(stats, PlanRecord)
        wall = time.perf_counter() - t
        costs = read_partition(spark, wh, contract("plan", "plan_cost"), last).collect()
        return wall, {r["strategy"]: r.asDict() for r in costs}, stats

    wall, rows, stats = plan(BASELINES, "ff-per-pair")
    result["stages"]["plan_baselines"] = round(wall, 1)
    ff = rows["ff-per-pair"]["total_cost"]
    result["certificate"] = stats.certificate.as_dict() if stats.certificate else None
    for name in BASELINES:
        result["strategies"][name] = {"cost": rows[name]["total_cost"], "plan_s": None}
    result["strategies"]["ff-per-pair"]["plan_s"] = round(wall, 1)
    for name in [x for x in args.strategies.split(",") if x]:
        wall, rows, stats = plan(("ff-per-pair", name), name)
        r = rows[name]
        parts = stats.shared_view_parts.get(name, {})
        result["strategies"][name] = {
            "cost": r["total_cost"],
            "plan_s": round(wall, 1),
            "views": r["views"],
            "view_edges": r["view_edges"],
            "sources_p95": r["sources_p95"],
            **parts,
        }
        print(f"{name}: {wall:.0f} s, cost {r['total_cost'] / ff:.3f} x FF-PerPair", flush=True)
    if args.lower_bound:
        t = time.perf_counter()
        bound = lower_bound(spark, base, last)
        result["lower_bound"] = {"cost": bound, "seconds": round(time.perf_counter() - t, 1)}
    spark.stop()
    result["driver_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)

    print(f"\n{args.graph or f'{args.profile} x{args.scale:g}'} {last}: {edges:,} follow edges")
    print("| strategy | plan (s) | cost / FF-PerPair | views | parts (fallback, optimal) |")
    print("|---|---|---|---|---|")
    for name, r in result["strategies"].items():
        parts = (
            f"{r['parts']} ({r['fallback_parts']}, {r.get('optimal_parts', 0)})"
            if "parts" in r
            else ""
        )
        wall_s = "" if r["plan_s"] is None else f"{r['plan_s']:.0f}"
        print(f"| {name} | {wall_s} | {r['cost'] / ff:.3f} | {r.get('views', '')} | {parts} |")
    cert = result["certificate"]
    print(
        f"| certified bound in plan_cost ({cert['bound']}, {cert['pairs']:,} pairs,"
        f" {cert['seconds']:.0f} s) | | {cert['lower_bound'] / ff:.3f} | | |"
    )
    if "lower_bound" in result:
        print(f"| lower bound, any plan | | {result['lower_bound']['cost'] / ff:.3f} | | |")
    out = Path("bench/results")
    out.mkdir(parents=True, exist_ok=True)
    stem = args.graph or f"{args.profile}_{args.scale:g}"
    name = f"shared_views_{stem}{'_' + args.tag if args.tag else ''}.json"
    (out / name).write_text(json.dumps(result, indent=2) + "\n")


def lower_bound(spark, settings, day: dt.date) -> float:
    """``views.lower_bound`` over the day's follow graph and rates as ``plan`` prices them,
    in this process (``views.edges_lower_bound``)."""
    edges = day_edges(spark, settings, day, Storage.at(settings.warehouse))[0]
    cols = edges.select("consumer_id", "producer_id", "theta", "phi", "active").toPandas()
    return views.edges_lower_bound(cols, settings.push_cost, settings.pull_cost)


if __name__ == "__main__":
    main()

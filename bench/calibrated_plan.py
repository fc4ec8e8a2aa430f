"""How the H/L measured on a store changes the plan served on the demo's workload
(docs/cost-model.md, "The calibrated ratio on the demo workload").

    python -m bench.calibrated_plan [--bound-ms 1.0] [--work var/bench]

Generates the workload of ``make demo`` (``ff2010`` at scale 0.05, seed 7, three days) and
builds days 1 and 2 with the settings as configured (H = 3, L = 1, every default strategy,
``auto``). Starts a throwaway Redis server on 127.0.0.1 and calibrates it (``feedpipe
calibrate``'s function). Then plans day 3 three ways, each materialized, validated, published
and loaded into the store, whose read probe times 1,000 reads after the switch:

* ``configured``: H = 3, L = 1, ``auto``;
* ``calibrated``: ``push_cost`` = the measured H/L, ``auto`` (the day the calibration is
  written: hysteresis runs from day 2's plan, made with H = 3);
* ``calibrated, ms target``: the same costs, ``ff-latency-pair`` served with 95% of feed views
  within ``--bound-ms`` milliseconds by the read-latency fit (default: the fit's read of
  3.5 sources, rounded to 0.01 ms).

Prints, per way: the strategy served, every strategy's cost under that way's H and L, the
served plan's edges, its sources per feed view (p50/p95/p99, weighted by feed views) and the
read latency the probe measured. Writes ``bench/results/calibrated_plan_ff2010_0.05.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from bench import ROOT, provenance
from jobs.common import ledger
from jobs.common.config import Settings
from jobs.common.records import StoreRecord
from jobs.common.storage import Storage
from jobs.dev import store_server
from jobs.evaluation import calibrate
from jobs.serving import published
from jobs.workloads.generate import PROFILES, generate, scaled

START = dt.date(2026, 1, 1)
LAST = START + dt.timedelta(days=2)
SCALE = 0.05
SEED = 7  # the demo's
DAY_STAGES = ("ingest", "rates", "plan", "materialize", "validate", "publish")


def prepare(spark: Any, base: Path) -> Settings:
    """The demo's landing, and days 1 and 2 built and published as configured (once)."""
    from jobs.stages import runner

    s = Settings(landing=str(base / "landing"), warehouse=str(base / "warehouse"))
    if not (base / "landing" / "views" / f"ds={LAST}").is_dir():
        generate(Storage.at(s.landing), START, 3, scaled(PROFILES["ff2010"], SCALE), seed=SEED)
    wh = Storage.at(s.warehouse)
    for ds in (START, START + dt.timedelta(days=1)):
        for name in DAY_STAGES:
            if ledger.read_record(wh, ds, name) is None:
                runner.run_stage(name, s, ds, spark, wh=wh)
    if ledger.read_record(wh, LAST, "rates") is None:
        for name in ("ingest", "rates"):
            runner.run_stage(name, s, LAST, spark, wh=wh)
    return s


def serve(spark: Any, s: Settings) -> dict[str, Any]:
    """Day 3 planned, built, published and loaded with ``s``; what the plan and the probe
    say."""
    from jobs.stages import runner

    wh = Storage.at(s.warehouse)
    for name in ("plan", "materialize", "validate", "publish", "store"):
        runner.run_stage(name, s, LAST, spark, wh=wh)
    rows = published.dataset(s.warehouse, "plan/plan_cost", LAST).to_table().to_pylist()
    served = next(r for r in rows if r["chosen"])
    load = ledger.read_record(wh, LAST, "store")
    probe = load.probe if isinstance(load, StoreRecord) else None
    return {
        "push_cost": s.push_cost,
        "pull_cost": s.pull_cost,
        "latency_target": f"{s.latency_bound:g} {s.latency_metric}",
        "latency_bound_sources": s.latency_bound_sources,
        "served": served["strategy"],
        "costs": {r["strategy"]: r["total_cost"] for r in rows},
        "edges": {k: served[k] for k in ("push_edges", "pull_edges", "view_edges", "views")},
        "sources": [served[f"sources_p{q}"] for q in (50, 95, 99)],
        "latency_share": served["latency_share"],
        "latency_met": served["latency_met"],
        "probe_ms": [getattr(probe, f"p{q}_ms") for q in (50, 95, 99)] if probe else None,
    }


def table(r: dict[str, Any]) -> str:
    cal = r["calibration"]
    ways = r["ways"]
    strategies = sorted(next(iter(ways.values()))["costs"])
    rows = [
        f"demo workload (ff2010 x{SCALE:g}, seed {SEED}), day {LAST}; {r['server']}; calibrated "
        f"H {cal['push_us']:.2f} us, L {cal['pull_us']:.2f} us (H/L {cal['ratio']:.2f}); read "
        f"latency {cal['latency_ms_base']:.3f} ms + {cal['latency_ms_per_source']:.4f} ms a source",
        "",
        "| | " + " | ".join(ways) + " |",
        "|---|" + "---|" * len(ways),
        "| H / L | "
        + " | ".join(f"{w['push_cost']:g} / {w['pull_cost']:g}" for w in ways.values())
        + " |",
        "| latency target (95% of views) | "
        + " | ".join(
            f"{w['latency_target']} (≤ {w['latency_bound_sources']} sources)" for w in ways.values()
        )
        + " |",
        "| served | " + " | ".join(f"**{w['served']}**" for w in ways.values()) + " |",
    ]
    for name in strategies:
        cells = []
        for w in ways.values():
            costs = w["costs"]
            least = min(costs.values())
            cost = costs[name]
            cells.append(f"{cost:,.0f}" + (" (least)" if cost == least else ""))
        rows.append(f"| cost/hour, {name} | " + " | ".join(cells) + " |")
    rows += [
        "| served edges push / pull / view (views) | "
        + " | ".join(
            f"{w['edges']['push_edges']:,} / {w['edges']['pull_edges']:,} / "
            f"{w['edges']['view_edges']:,} ({w['edges']['views']:,})"
            for w in ways.values()
        )
        + " |",
        "| sources per view p50 / p95 / p99 | "
        + " | ".join(" / ".join(f"{x:g}" for x in w["sources"]) for w in ways.values())
        + " |",
        "| views within target | "
        + " | ".join(
            f"{100 * (w['latency_share'] or 0):.1f}%" + ("" if w["latency_met"] else " (missed)")
            for w in ways.values()
        )
        + " |",
        "| read p50 / p95 / p99 ms, measured after the load | "
        + " | ".join(
            " / ".join(f"{x:.2f}" for x in w["probe_ms"]) if w["probe_ms"] else "-"
            for w in ways.values()
        )
        + " |",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.calibrated_plan", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--bound-ms", type=float, default=None)
    ap.add_argument("--work", type=Path, default=ROOT / "var" / "bench")
    args = ap.parse_args(argv)
    from jobs.common.spark import build_session

    base = args.work / f"calibrated-plan-ff2010-{SCALE:g}"
    base.mkdir(parents=True, exist_ok=True)
    spark = build_session(Settings(), "bench-calibrated-plan")
    s = prepare(spark, base)
    result: dict[str, Any] = {"server": store_server.server_version(), "ways": {}}
    with store_server.running(base / "store") as server:
        cal = calibrate.calibrate(server.url)
        result["calibration"] = cal.as_dict()
        fit = cal.settings()
        at = dataclasses.replace(s, store=server.url, store_grace_seconds=0)
        calibrated = dataclasses.replace(
            at,
            push_cost=fit["push_cost"],
            latency_ms_base=fit["latency_ms_base"],
            latency_ms_per_source=fit["latency_ms_per_source"],
        )
        bound = args.bound_ms or round(
            fit["latency_ms_base"] + 3.5 * fit["latency_ms_per_source"], 2
        )
        ways = {
            "configured": at,
            "calibrated": calibrated,
            "calibrated, ms target": dataclasses.replace(
                calibrated, strategy="ff-latency-pair", latency_metric="ms", latency_bound=bound
            ),
        }
        for name, settings in ways.items():
            result["ways"][name] = serve(spark, settings)
    result["provenance"] = provenance(vars(args))
    out = ROOT / "bench" / "results" / f"calibrated_plan_ff2010_{SCALE:g}.json"
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(table(result))
    print(f"\n{out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

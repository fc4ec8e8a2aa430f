"""Each strategy's plan served from the feed store and replayed: the store's measured cost
beside the cost model's (docs/cost-model.md, "Checking the model on a store").

    python -m bench.serving [--workload ff2010|higgs] [--scale 0.01]
                            [--strategies push-all,pull-all,ff-per-pair,cz-lp]
                            [--repetitions 3] [--rate N] [--work var/bench]

Lands the workload once: three days of ``ff2010`` generated at ``--scale``, or the Higgs week
(SNAP higgs-twitter from ``../shared/data``, imported as ``feedpipe import higgs`` does). D
is the workload's last day but one, D+1 its last. Every day before D is ingested and its
rates estimated, the day before D is planned and materialized with FF-PerPair served (the
state D's plan and feeds build on), and D is ingested and its rates estimated. Starts a
throwaway Redis server on 127.0.0.1 (its build recorded) and calibrates H and L on it
(``feedpipe calibrate``'s function). Then, for each strategy: D planned with the strategy
alone (forced: only the served strategy is materialized), materialized, validated, published
and loaded into the store; and, ``--repetitions`` times, the store reloaded with D and the
held-out day D+1 replayed against it: D+1's events through the live add operation
(``feedpipe store add-event``'s function; consecutive events in one call) and its feed views
through the read operation (``StoreReader``, one consumer a read), interleaved in timestamp
order, as fast as the store takes them (or at ``--rate`` operations a second). Measured, as
the papers measured: the store's own CPU (``used_cpu_user + used_cpu_sys`` over the replay),
its commands, its memory after the load and after the replay, and each read's latency from
the client (p50, p95, p99), each with its spread over the repetitions. Modeled: the plan's
cost per day (``plan/plan_cost``, H and L as configured) and the same plan priced with the
calibrated H and L in microseconds of server CPU (maintenance / H x H_cal + evaluation / L x
L_cal), so that model and measurement are in the same unit.

Writes ``bench/results/serving_<workload>.json`` (``serving_ff2010_<scale>.json``), one row
per strategy and repetition into the bench warehouse's ``eval/serving`` table (partition D;
``schemas/eval/serving``), and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from bench import ROOT, provenance
from jobs.common import ledger, live, store
from jobs.common.config import Settings
from jobs.common.storage import Storage
from jobs.dev import store_server
from jobs.evaluation import calibrate, served
from jobs.serving import published
from jobs.workloads.generate import PROFILES, generate, scaled

START = dt.date(2026, 1, 1)
SEED = 5


def settings_for(base: Path) -> Settings:
    return Settings(
        landing=str(base / "landing"),
        warehouse=str(base / "warehouse"),
        strategy="ff-per-pair",
        strategies=("ff-per-pair",),
        store_grace_seconds=0,
    )


def land(base: Path, workload: str, scale: float) -> tuple[str, list[dt.date]]:
    """The workload's landing under ``base`` (once): its label and its days, in order."""
    landing = base / "landing"
    days_file = base / "days.json"
    if workload == "higgs":
        if not days_file.exists():
            from bench.shared_views import REAL

            REAL["higgs"](Storage.at(str(landing)))
            found = sorted(p.name[3:] for p in (landing / "views").glob("ds=*"))
            days_file.write_text(json.dumps(found))
        return "higgs", [dt.date.fromisoformat(d) for d in json.loads(days_file.read_text())]
    days = [START + dt.timedelta(days=i) for i in range(3)]
    if not (landing / "views" / f"ds={days[-1]}").is_dir():
        generate(Storage.at(str(landing)), START, 3, scaled(PROFILES["ff2010"], scale), seed=SEED)
    return f"ff2010_{scale:g}", days


def prepare(spark: Any, s: Settings, days: list[dt.date]) -> None:
    """Every day before D ingested with its rates, the day before D planned and materialized,
    D ingested with its rates (each stage once)."""
    from jobs.stages import runner

    wh = Storage.at(s.warehouse)
    d = days[-2]
    for ds in days[:-1]:
        stages = ("ingest", "rates") + (("plan", "materialize") if ds == days[-3] else ())
        for name in stages:
            if ledger.read_record(wh, ds, name) is None:
                runner.run_stage(name, s, ds, spark, wh=wh)
    assert ledger.read_record(wh, d, "rates") is not None


def serve(spark: Any, s: Settings, strategy: str, url: str, d: dt.date) -> dict[str, Any]:
    """Day ``d`` with ``strategy`` alone: planned, materialized, validated, published; its
    modeled cost (``plan/plan_cost``)."""
    from jobs.stages import runner

    forced = dataclasses.replace(s, strategy=strategy, strategies=(strategy,), store=url)
    for name in ("plan", "materialize", "validate", "publish"):
        runner.run_stage(name, forced, d, spark)
    (row,) = published.dataset(s.warehouse, "plan/plan_cost", d).to_table().to_pylist()
    return {k: row[k] for k in ("maintenance_cost", "evaluation_cost", "total_cost")}


def held_out(landing: str, day: dt.date) -> list[served.Op]:
    """``day``'s events and feed views in timestamp order: (time, "event" or "view", what)."""
    import pyarrow.dataset as pads

    root = Path(landing)
    ev = pads.dataset(root / "events" / f"ds={day}").to_table().to_pylist()
    views = pads.dataset(root / "views" / f"ds={day}").to_table().to_pylist()
    ops: list[served.Op] = []
    for e in ev:
        at = (
            e["created_at"].replace(tzinfo=dt.UTC)
            if e["created_at"].tzinfo is None
            else e["created_at"]
        )
        attributes = dict(e.get("attributes") or {})
        ops.append((at, "event", live.LiveEvent(e["event_id"], e["producer_id"], at, attributes)))
    for v in views:
        at = (
            v["viewed_at"].replace(tzinfo=dt.UTC)
            if v["viewed_at"].tzinfo is None
            else v["viewed_at"]
        )
        ops.append((at, "view", v["consumer_id"]))
    ops.sort(key=lambda o: (o[0], o[1]))
    return ops


def spread(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [r[key] for r in runs]
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": round(statistics.mean(values), 3), "stdev": round(sd, 3)}


def modeled_cpu_s(cost: dict[str, Any], s: Settings, cal: calibrate.Calibration) -> float:
    """The plan's cost per hour with H and L replaced by the calibrated microseconds, for a
    day (24 hours), in seconds of server CPU."""
    per_hour_us = (
        cost["maintenance_cost"] / s.push_cost * cal.push_us
        + cost["evaluation_cost"] / s.pull_cost * cal.pull_us
    )
    return per_hour_us * 24 / 1e6


def ranks(values: dict[str, float]) -> dict[str, int]:
    return {k: i + 1 for i, k in enumerate(sorted(values, key=values.__getitem__))}


def table(r: dict[str, Any]) -> str:
    cal = r["calibration"]
    rows = [
        f"{r['workload']}, day {r['served_day']} served, {r['replayed_day']} replayed "
        f"({r['events']:,} events, {r['views']:,} feed views); {r['server']}; "
        f"calibrated H {cal['push_us']:.2f} us, L {cal['pull_us']:.2f} us "
        f"(H/L {cal['ratio']:.2f}); {r['repetitions']} repetitions",
        "",
        "| strategy | measured CPU s (sd) | modeled CPU s (calibrated) | modeled cost/day (H, L as "
        "configured) | commands | memory MiB | read p50 / p95 / p99 ms | rank measured / "
        "calibrated / configured |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, x in r["strategies"].items():
        m = x["measured"]
        rows.append(
            f"| {name} | {m['cpu_s']['mean']:.2f} ({m['cpu_s']['stdev']:.2f}) | "
            f"{x['modeled_cpu_s']:.2f} | {x['modeled']['total_cost'] * 24:,.0f} | "
            f"{m['commands']['mean']:,.0f} | {m['memory_loaded_bytes']['mean'] / 2**20:,.1f} | "
            f"{m['p50_ms']['mean']:.2f} / {m['p95_ms']['mean']:.2f} / {m['p99_ms']['mean']:.2f} | "
            f"{x['rank_measured']} / {x['rank_calibrated']} / {x['rank_configured']} |"
        )
    return "\n".join(rows)


def eval_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``eval/serving`` rows: one per strategy and repetition."""
    cal = result["calibration"]
    rows = []
    for strategy, x in result["strategies"].items():
        for i, run in enumerate(x["runs"], 1):
            rows.append(
                {
                    "workload": result["workload"],
                    "strategy": strategy,
                    "repetition": i,
                    "replayed_day": dt.date.fromisoformat(result["replayed_day"]),
                    "events": result["events"],
                    "feed_views": result["views"],
                    "rate": result["rate"],
                    "wall_s": float(run["wall_s"]),
                    "cpu_s": float(run["cpu_s"]),
                    "commands": run["commands"],
                    "memory_loaded_bytes": run["memory_loaded_bytes"],
                    "memory_replayed_bytes": run["memory_replayed_bytes"],
                    "read_p50_ms": float(run["p50_ms"]),
                    "read_p95_ms": float(run["p95_ms"]),
                    "read_p99_ms": float(run["p99_ms"]),
                    "modeled_cost": float(x["modeled"]["total_cost"]) * 24,
                    "modeled_cpu_s": float(x["modeled_cpu_s"]),
                    "push_cost": float(result["push_cost"]),
                    "pull_cost": float(result["pull_cost"]),
                    "calibrated_push_us": float(cal["push_us"]),
                    "calibrated_pull_us": float(cal["pull_us"]),
                    "server": result["server"],
                }
            )
    return rows


def write_eval(spark: Any, s: Settings, d: dt.date, result: dict[str, Any]) -> None:
    """``eval/serving`` partition ``d`` of the bench warehouse (a new version of it)."""
    from jobs.common.tables import contract, write_partition

    c = contract("eval", "serving")
    frame = spark.createDataFrame(eval_rows(result), c.schema())
    write_partition(frame, Storage.at(s.warehouse), c, d)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.serving", description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=("ff2010", "higgs"), default="ff2010")
    ap.add_argument("--scale", type=float, default=0.01, help="ff2010's scale")
    ap.add_argument("--strategies", default="push-all,pull-all,ff-per-pair,cz-lp")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument(
        "--rate",
        type=float,
        default=None,
        help="operations a second (default: as fast as the store takes them)",
    )
    ap.add_argument("--work", type=Path, default=ROOT / "var" / "bench")
    args = ap.parse_args(argv)
    from jobs.common.spark import build_session
    from jobs.stages import runner

    name = args.workload if args.workload == "higgs" else f"ff2010-{args.scale:g}"
    base = args.work / f"serving-{name}"
    base.mkdir(parents=True, exist_ok=True)
    s = settings_for(base)
    label, days = land(base, args.workload, args.scale)
    d = days[-2]
    spark = build_session(s, "bench-serving")
    prepare(spark, s, days)
    ops = held_out(s.landing, days[-1])
    result: dict[str, Any] = {
        "workload": label,
        "scale": args.scale if args.workload == "ff2010" else None,
        "served_day": str(d),
        "replayed_day": str(days[-1]),
        "events": sum(1 for o in ops if o[1] == "event"),
        "views": sum(1 for o in ops if o[1] == "view"),
        "server": store_server.server_version(),
        "repetitions": args.repetitions,
        "rate": args.rate,
        "push_cost": s.push_cost,
        "pull_cost": s.pull_cost,
        "strategies": {},
    }
    with store_server.running(base / "store") as server:
        cal = calibrate.calibrate(server.url)
        result["calibration"] = cal.as_dict()
        for strategy in args.strategies.split(","):
            cost = serve(spark, s, strategy, server.url, d)
            runs = []
            for _ in range(args.repetitions):
                store.connect(server.url).flushdb()
                runner.run_stage("store", dataclasses.replace(s, store=server.url), d, spark)
                runs.append(served.replay(server.url, ops, args.rate).as_dict())
            result["strategies"][strategy] = {
                "modeled": cost,
                "modeled_cpu_s": round(modeled_cpu_s(cost, s, cal), 3),
                "measured": {k: spread(runs, k) for k in runs[0]},
                "runs": runs,
            }
    by = result["strategies"]
    for key, value in (
        ("rank_measured", {k: v["measured"]["cpu_s"]["mean"] for k, v in by.items()}),
        ("rank_calibrated", {k: v["modeled_cpu_s"] for k, v in by.items()}),
        ("rank_configured", {k: v["modeled"]["total_cost"] for k, v in by.items()}),
    ):
        for strategy, rank in ranks(value).items():
            by[strategy][key] = rank
    write_eval(spark, s, d, result)
    result["provenance"] = provenance(vars(args))
    rate = f"_rate{args.rate:g}" if args.rate else ""
    out = ROOT / "bench" / "results" / f"serving_{label}{rate}.json"
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(table(result))
    print(f"\n{out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

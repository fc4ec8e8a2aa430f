"""A day of the ``ff2010`` workload: every stage timed as the scheduler runs it, against a
DuckDB reference (``bench/duckdb_reference.py``) on the same Parquet inputs.

    python -m bench.day [--scales 1] [--reps 3] [--work var/bench] [--event-logs]
                        [--whole-day both|ff-per-pair|none] [--no-whole-day]

For each scale: generates two days (skipped when the landing data is there) and runs day 1
once (warm-up, and the history day 2 needs: the rate window, yesterday's plan and feeds).
Then, for day 2, ``--reps`` times each:

* each Spark stage as its own ``spark-submit`` application, as the Airflow DAG runs it
  (wall time of the process, the stage's own time from its record, and the peak RSS of the
  process tree: driver JVM and Python);
* a trivial ``spark-submit`` application (session + one tiny job): Spark's fixed cost;
* the whole day in one process (``feedpipe run``, publish included): with the product's
  default strategies, and with FF-PerPair only (the plan of the per-stage runs), with each
  stage's own time in that process from its record (a warm JVM after the first stage).
  ``--whole-day ff-per-pair`` runs the second alone: at ``--scale 4`` the shared-view
  strategies of the defaults plan 4M edges for longer than the rest of the bench takes;
* the DuckDB reference's stages (rates, FF-PerPair plan, latest-k feeds), each a process.

The per-stage runs serve FF-PerPair only (``strategies = ["ff-per-pair"]``), the plan the
reference computes, and the outputs of both are compared row for row at the end. Reports
medians and rows per second per stage (rows: the stage's main input, the same for both) to
``bench/results/day_ff2010_<scale>.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import duckdb_reference, provenance
from jobs.common import ledger
from jobs.common.cds import driver_java_options
from jobs.common.config import driver_memory
from jobs.common.pipeline import SPARK_STAGES
from jobs.common.records import IngestRecord
from jobs.common.storage import Storage
from jobs.workloads.generate import PROFILES, generate, scaled

ROOT = Path(__file__).resolve().parents[1]

D1, D2 = dt.date(2026, 1, 1), dt.date(2026, 1, 2)
SEED = 5  # the workload's seed: every bench generates the same days
REFERENCE_STAGES = ("rates", "plan", "materialize")
TRIVIAL = """
import time
from jobs.common.config import load_settings
from jobs.common.spark import build_session
t = time.monotonic()
spark = build_session(load_settings(), "feedpipe-bench-fixed-cost")
spark.range(1000).selectExpr("sum(id)").collect()
print(round(time.monotonic() - t, 3))
"""


def tree_rss_mb(root: int) -> float:
    """Resident memory of ``root`` and all its descendants (JVM, Python driver, Python
    workers), from /proc."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        rss[pid] = int(fields[21])  # pages
    tree, frontier = {root}, [root]
    while frontier:
        children = [p for p, pp in parents.items() if pp in frontier and p not in tree]
        tree.update(children)
        frontier = children
    return sum(rss.get(p, 0) for p in tree) * os.sysconf("SC_PAGE_SIZE") / 1024**2


def measured(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd``; its wall time and the peak resident memory of its whole process tree
    (driver JVM, Python driver and workers together), sampled every 0.2 s."""
    started = time.perf_counter()
    peak = 0.0
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        while proc.poll() is None:
            peak = max(peak, tree_rss_mb(proc.pid))
            time.sleep(0.2)
    wall = time.perf_counter() - started

    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{tail}")
    return {"wall_s": wall, "peak_rss_mb": peak}


def rows_in(wh: Path, layer: str, table: str, days: list[dt.date]) -> int:
    import pyarrow.dataset as pads

    from jobs.common import versions
    from jobs.common.storage import Storage

    found = [versions.locate(Storage.at(str(wh)), f"{layer}/{table}", d) for d in days]
    return sum(pads.dataset(str(wh.joinpath(*f))).count_rows() for f in found if f)


def stage_seconds(wh: Path, ds: dt.date, stage: str) -> float:
    """The seconds the stage's record of day ``ds`` says it ran."""
    record = ledger.read_record(Storage.at(str(wh)), ds, stage)
    if record is None:
        raise SystemExit(f"no {stage} record of {ds} in {wh}: the run failed (see its log)")
    return float(record.seconds or 0.0)


def stage_inputs(wh: Path, ds: dt.date, window: list[dt.date]) -> dict[str, int]:
    """The main input rows of each stage (what rows per second divide by)."""
    record = ledger.read_record(Storage.at(str(wh)), ds, "ingest")
    assert isinstance(record, IngestRecord), f"no ingest record of {ds} in {wh}"
    follows = rows_in(wh, "clean", "follows", [ds])
    events, views = rows_in(wh, "clean", "events", [ds]), rows_in(wh, "clean", "views", [ds])
    return {
        "ingest": sum(t.rows_in for t in record.tables.values()),
        "rates": rows_in(wh, "clean", "events", window) + rows_in(wh, "clean", "views", window),
        "plan": follows,
        "materialize": events + follows,
        "validate": follows + events + views,
    }


def write_config(path: Path, landing: Path, warehouse: Path, **extra: Any) -> None:
    lines = [f'landing = "{landing}"', f'warehouse = "{warehouse}"']
    for key, value in extra.items():
        lines.append(f"{key} = {json.dumps(value)}")
    path.write_text("\n".join(lines) + "\n")


def bench_scale(
    scale: float, reps: int, work: Path, event_logs: bool = False, whole_day: str = "both"
) -> dict[str, Any]:
    """One scale's bench. ``whole_day``: the configurations of the day in one process,
    ``both`` (the defaults and FF-PerPair only), ``ff-per-pair`` or ``none``."""
    from jobs.stages.rates import window_days

    base = work / f"ff2010-{scale:g}"
    landing, wh, ref_out, logs = (base / x for x in ("landing", "warehouse", "duckdb", "logs"))
    logs.mkdir(parents=True, exist_ok=True)
    profile = scaled(PROFILES["ff2010"], scale)
    settings = {"workload": "ff2010", "seed": SEED, "scale": scale, "reps": reps}
    settings |= {"whole_day": whole_day, "event_logs": event_logs}
    result: dict[str, Any] = {"scale": scale, "reps": reps, **provenance(settings)}
    if not (landing / "follows").is_dir():
        t = time.perf_counter()
        generate(Storage.at(str(landing)), D1, 2, profile, seed=SEED)
        result["generate_s"] = round(time.perf_counter() - t, 1)
    ff_only = base / "ff-per-pair.toml"
    write_config(ff_only, landing, wh, strategy="ff-per-pair", strategies=["ff-per-pair"])
    defaults = base / "defaults.toml"
    write_config(defaults, landing, wh)
    entry = str(ROOT / "jobs" / "__main__.py")
    bin_dir = Path(sys.executable).parent
    env = {  # as the DAG's tasks get it: this interpreter for the driver and its workers
        **os.environ,
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        # the reference runs as a module of this checkout (python -m bench.duckdb_reference)
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }

    env.pop("FEEDPIPE_CONFIG", None)

    # the driver memory the DAG gives each stage (dags/feeds_daily.py)
    memory = driver_memory()
    submit = [str(bin_dir / "spark-submit"), "--master", "local[*]", "--driver-memory", memory]
    # the collector and the class archive, as the DAG submits (jobs/common/cds.py)
    submit += ["--conf", f"spark.driver.extraJavaOptions={driver_java_options()}"]

    if event_logs:  # for bench/eventlog.py
        (logs / "events").mkdir(exist_ok=True)
        submit += ["--conf", "spark.eventLog.enabled=true"]
        submit += ["--conf", f"spark.eventLog.dir={logs / 'events'}"]

    def spark_stage(stage: str, ds: dt.date, log: str) -> dict[str, Any]:
        m = measured(
            [*submit, entry, stage, "--ds", str(ds)],
            logs / log,
            {**env, "FEEDPIPE_CONFIG": str(ff_only)},
        )
        m["stage_s"] = stage_seconds(wh, ds, stage)
        return m

    def reference(stage: str, ds: dt.date, log: str) -> dict[str, Any]:
        cmd = [sys.executable, "-m", "bench.duckdb_reference", stage]
        cmd += ["--warehouse", str(wh), "--out", str(ref_out), "--ds", str(ds), "--config"]
        m = measured([*cmd, str(ff_only)], logs / log, env)
        m["stage_s"] = json.loads((logs / log).read_text().strip().splitlines()[-1])["seconds"]
        return m

    # day 1: the history of day 2, for both implementations
    t = time.perf_counter()
    for stage in SPARK_STAGES:
        spark_stage(stage, D1, f"d1-{stage}.log")
    result["day1_s"] = round(time.perf_counter() - t, 1)
    for stage in REFERENCE_STAGES:
        reference(stage, D1, f"d1-duckdb-{stage}.log")

    trivial = base / "trivial.py"
    trivial.write_text(TRIVIAL)
    runs: dict[str, list[dict[str, Any]]] = {}
    for rep in range(reps):
        print(f"scale {scale:g}: repetition {rep + 1} of {reps}", flush=True)
        runs.setdefault("fixed_cost", []).append(
            measured(
                [*submit, str(trivial)],
                logs / "trivial.log",
                env,
            )
        )
        days = {"day": defaults, "day.ff-per-pair": ff_only}
        if whole_day != "both":
            days = {k: v for k, v in days.items() if k == f"day.{whole_day}"}
        for name, config in days.items():
            m = measured(
                [str(bin_dir / "feedpipe"), "run", "--config", str(config), "--ds", str(D2)],
                logs / f"{name}-{rep}.log",
                env,
            )
            runs.setdefault(name, []).append(m)
            # each stage's own time in that one process: after the first stage, its JVM
            # is warm (classes loaded, hot code compiled), as a stage alone never is
            for stage in SPARK_STAGES:
                seconds = stage_seconds(wh, D2, stage)
                runs.setdefault(f"{name}:{stage}", []).append({"stage_s": seconds})
        for stage in SPARK_STAGES:
            runs.setdefault(f"spark.{stage}", []).append(spark_stage(stage, D2, f"{stage}.log"))
        for stage in REFERENCE_STAGES:
            runs.setdefault(f"duckdb.{stage}", []).append(reference(stage, D2, f"ref-{stage}.log"))

    window = window_days(sorted([D1, D2]), D2, 7)
    inputs = stage_inputs(wh, D2, window)
    result["inputs"] = inputs
    summary: dict[str, dict[str, float]] = {}
    for name, ms in runs.items():
        summary[name] = {
            key: round(statistics.median(m[key] for m in ms), 2)
            for key in ("wall_s", "stage_s", "peak_rss_mb")
            if all(key in m for m in ms)
        }
        stage = name.split(".", 1)[-1]
        if stage in inputs:
            summary[name]["rows_per_s"] = round(inputs[stage] / summary[name]["wall_s"])
    result["median"] = summary
    result["runs"] = runs
    diff = duckdb_reference.compare(str(wh), ref_out, D2)
    result["comparison"] = diff
    result["agree"] = not duckdb_reference.agrees(diff)
    result["disagreements"] = duckdb_reference.agrees(diff)
    return result


def table(result: dict[str, Any]) -> str:
    med = result["median"]
    days = [
        f"{med[name]['wall_s']:.0f} s with {what}"
        for name, what in (
            ("day", "the default strategies"),
            ("day.ff-per-pair", "FF-PerPair only"),
        )
        if name in med
    ]
    day = ", ".join(days) or "not run"
    lines = [
        f"ff2010 x{result['scale']:g}: {result['inputs']['plan']:,} follow edges, "
        f"medians of {result['reps']}; Spark fixed cost (session + one job, process wall) "
        f"{med['fixed_cost']['wall_s']:.1f} s; whole day in one process: "
        f"{day}; same plan and feeds: {result['agree']}",
        "",
        "| stage | Spark wall (s) | in stage (s) | peak RSS (MB) | rows/s "
        "| DuckDB wall (s) | DuckDB RSS (MB) | Spark / DuckDB "
        "| in stage, whole day in one process (s) | that / DuckDB in stage |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for stage in SPARK_STAGES:
        s = med[f"spark.{stage}"]
        d = med.get(f"duckdb.{stage}")
        ref = (
            f"{d['wall_s']:.1f} | {d['peak_rss_mb']:.0f} | {s['wall_s'] / d['wall_s']:.1f}"
            if d
            else " | | "
        )
        warm = med.get(f"day.ff-per-pair:{stage}")
        in_day = f"{warm['stage_s']:.1f}" if warm else ""
        in_day += f" | {warm['stage_s'] / d['stage_s']:.1f}" if warm and d else " | "
        lines.append(
            f"| {stage} | {s['wall_s']:.1f} | {s['stage_s']:.1f} | {s['peak_rss_mb']:.0f} "
            f"| {s['rows_per_s']:,} | {ref} | {in_day} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", default="1", help="comma-separated, e.g. 0.25,1,4")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", default="var/bench")
    ap.add_argument(
        "--event-logs", action="store_true", help="keep Spark event logs (bench/eventlog.py)"
    )
    ap.add_argument(
        "--whole-day",
        choices=("both", "ff-per-pair", "none"),
        default="both",
        help="the configurations of the whole day in one process (feedpipe run): the default "
        "strategies and FF-PerPair only (both), FF-PerPair only, or none",
    )
    ap.add_argument(
        "--no-whole-day",
        action="store_true",
        help="the same as --whole-day none",
    )
    args = ap.parse_args(argv)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    for scale in (float(x) for x in args.scales.split(",")):
        result = bench_scale(
            scale,
            args.reps,
            Path(args.work).resolve(),
            args.event_logs,
            "none" if args.no_whole_day else args.whole_day,
        )

        if finish(result, table(result), out / f"day_ff2010_{scale:g}.json"):
            return 1
    return 0


def finish(result: dict[str, Any], text: str, path: Path) -> int:
    """Writes ``result`` to ``path`` and prints ``text``; 1 when the two implementations'
    outputs disagree (printed), else 0."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(text, flush=True)
    if not result["agree"]:
        print("DISAGREE: " + "; ".join(result["disagreements"]), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

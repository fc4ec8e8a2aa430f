"""Stages as clients of a long-lived Spark Connect server, against the DuckDB reference.

    python -m bench.connect [--scale 4] [--reps 3] [--work var/bench]
                            [--stages rates,plan,materialize] [--new-days N]

Runs on the warehouse ``bench/day.py`` built for the scale (``WORK/ff2010-<scale>``: day 1
built, day 2 ingested; run ``make bench`` for the scale first). Starts ``feedpipe
connect-server`` with the bench's configuration (FF-PerPair only), then runs day 2's
``--stages`` through it once, as the server's first day (the warm-up a daily server had the
day before), each stage a client process (``feedpipe STAGE --spark-remote``). Then either

* ``--reps`` times day 2 again (the default): every run finds all the generated code of the
  run before; or
* with ``--new-days N``, days 3 to N+2 once each, as a daily server meets them: every Spark
  stage of the day (ingest to validate) in order, new dates and new data in the same query
  shapes. The days' landing data is generated when missing (the same workload and seed as
  ``bench/day.py``), and the first day runs every Spark stage of day 2 as well.

Each measured stage that the DuckDB reference has is alternated with the reference's run of
the same stage and day. Reports per stage the median client wall time and the stage's own
time, the server's peak RSS, and the ratio to DuckDB, into
``bench/results/connect_ff2010_<scale>.json`` (``connect_newdays_ff2010_<scale>.json`` with
``--new-days``), and prints a Markdown table. Both implementations' outputs are compared row
for row for every measured day at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench import duckdb_reference, provenance
from bench.day import (
    D1,
    D2,
    REFERENCE_STAGES,
    SEED,
    SPARK_STAGES,
    finish,
    measured,
    stage_seconds,
    tree_rss_mb,
)
from jobs.common import ledger
from jobs.common.pipeline import LANDING_TABLES
from jobs.common.storage import Storage
from jobs.workloads.generate import PROFILES, generate, scaled

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_days(landing: Path, scale: float, last: dt.date) -> list[dt.date]:
    """Landing days ``D1`` to ``last``: the days missing are generated, with ``bench/day.py``'s
    workload and seed (so the days present are the same), into a side directory, and moved
    in. Returns the days generated."""
    wanted = [D1 + dt.timedelta(days=i) for i in range((last - D1).days + 1)]
    missing = [d for d in wanted if not (landing / "views" / f"ds={d}").is_dir()]
    if not missing:
        return []
    side = landing.parent / "landing.generating"
    shutil.rmtree(side, ignore_errors=True)
    generate(Storage.at(str(side)), D1, len(wanted), scaled(PROFILES["ff2010"], scale), SEED)
    for d in missing:
        for table in LANDING_TABLES:
            target = landing / table / f"ds={d}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(target, ignore_errors=True)
            (side / table / f"ds={d}").rename(target)
    shutil.rmtree(side)
    return missing


def start_server(cmd: list[str], port: int, log: Path, env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 180
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the Connect server did not start; see {log}") from None
            time.sleep(0.5)


def bench(
    scale: float, reps: int, work: Path, stages: list[str], new_days: int = 0
) -> dict[str, Any]:
    base = work / f"ff2010-{scale:g}"
    wh, ref_out, logs = base / "warehouse", base / "duckdb", base / "logs"
    config = base / "ff-per-pair.toml"
    if ledger.read_record(Storage.at(str(wh)), D2, "ingest") is None:
        raise SystemExit(f"no day 2 in {wh}: run bench/day.py --scales {scale:g} first")
    logs.mkdir(parents=True, exist_ok=True)
    measured_days = [D2 + dt.timedelta(days=i) for i in range(1, new_days + 1)] or [D2] * reps
    generated = ensure_days(base / "landing", scale, measured_days[-1]) if new_days else []
    # with new days, every Spark stage of each day, the first day's too
    day_stages = list(SPARK_STAGES) if new_days else stages
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "FEEDPIPE_CONFIG": str(config),
        # the reference runs as a module of this checkout (python -m bench.duckdb_reference)
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    port = free_port()
    url = f"sc://127.0.0.1:{port}"
    server = start_server(
        [str(bin_dir / "feedpipe"), "connect-server", "--port", str(port)],
        port,
        logs / "connect-server.log",
        env,
    )
    peak = [0.0]
    stop = threading.Event()

    def sample() -> None:  # the server's JVM and its Python workers
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss_mb(server.pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    def client(stage: str, ds: dt.date, log: str) -> dict[str, Any]:
        cmd = [str(bin_dir / "feedpipe"), stage, "--ds", str(ds), "--spark-remote", url, "-q"]
        m = measured(cmd, logs / log, env)
        m["stage_s"] = stage_seconds(wh, ds, stage)
        m["ds"] = str(ds)
        return m

    def reference(stage: str, ds: dt.date, log: str) -> dict[str, Any]:
        cmd = [sys.executable, "-m", "bench.duckdb_reference", stage]
        cmd += ["--warehouse", str(wh), "--out", str(ref_out), "--ds", str(ds)]
        m = measured([*cmd, "--config", str(config)], logs / log, env)
        m["stage_s"] = json.loads((logs / log).read_text().strip().splitlines()[-1])["seconds"]
        m["ds"] = str(ds)
        return m

    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for i, ds in enumerate([D2, *measured_days]):  # i == 0: the server's first day
            name = "connect" if i else "first"
            for stage in day_stages:
                runs.setdefault(f"{name}.{stage}", []).append(client(stage, ds, f"c-{stage}.log"))
                if i and stage in stages and stage in REFERENCE_STAGES:
                    ref = reference(stage, ds, f"c-ref-{stage}.log")
                    runs.setdefault(f"duckdb.{stage}", []).append(ref)
    finally:
        stop.set()
        server.terminate()
        server.wait(timeout=120)
    summary: dict[str, dict[str, float]] = {}
    for name, ms in runs.items():
        summary[name] = {
            key: round(statistics.median(m[key] for m in ms), 2) for key in ("wall_s", "stage_s")
        }
    diffs = {str(ds): duckdb_reference.compare(str(wh), ref_out, ds) for ds in set(measured_days)}
    disagreements = [
        f"{ds}: {wrong}" for ds, diff in diffs.items() for wrong in duckdb_reference.agrees(diff)
    ]
    return {
        "scale": scale,
        "reps": reps,
        "new_days": new_days,
        "days": [str(ds) for ds in measured_days],
        "generated_days": [str(d) for d in generated],
        **provenance(
            {
                "workload": "ff2010",
                "seed": SEED,
                "scale": scale,
                "reps": reps,
                "stages": list(stages),
                "new_days": new_days,
            }
        ),
        "server_peak_rss_mb": round(peak[0]),
        "median": summary,
        "runs": runs,
        "comparison": diffs,
        "agree": not disagreements,
        "disagreements": disagreements,
    }


def table(result: dict[str, Any]) -> str:
    med, runs = result["median"], result["runs"]
    new_days = result.get("new_days", 0)
    what = (
        f"days {result['days'][0]} to {result['days'][-1]}, each once, after day 2"
        if new_days
        else f"day 2, medians of {result['reps']} after its first day"
    )
    lines = [
        f"ff2010 x{result['scale']:g} on a Spark Connect server, {what}; server peak RSS "
        f"{result['server_peak_rss_mb']:,} MB; same plan and feeds: {result['agree']}",
        "",
        "| stage | server's first day: client wall (s) | client wall (s) "
        + ("| each day (s) " if new_days else "")
        + "| in stage (s) | DuckDB wall (s) | client wall / DuckDB wall |",
        "|---|---|---|---|---|---|" + ("---|" if new_days else ""),
    ]
    for stage in [s for s in SPARK_STAGES if f"connect.{s}" in med]:
        c, first, d = med[f"connect.{stage}"], med[f"first.{stage}"], med.get(f"duckdb.{stage}")
        ref = f"{d['wall_s']:.1f} | {c['wall_s'] / d['wall_s']:.1f}" if d else " | "
        each = ", ".join(f"{m['wall_s']:.1f}" for m in runs[f"connect.{stage}"])
        lines.append(
            f"| {stage} | {first['wall_s']:.1f} | {c['wall_s']:.1f} | "
            + (f"{each} | " if new_days else "")
            + f"{c['stage_s']:.1f} | {ref} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=4)
    ap.add_argument("--reps", type=int, default=3, help="repetitions of day 2 (without --new-days)")
    ap.add_argument("--work", default="var/bench")
    ap.add_argument(
        "--stages",
        default=",".join(REFERENCE_STAGES),
        help="the stages timed against DuckDB (with --new-days every Spark stage runs)",
    )
    ap.add_argument(
        "--new-days",
        type=int,
        default=0,
        help="time days 3 to N+2, once each, on a server warmed by day 2 (instead of --reps)",
    )
    args = ap.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    if args.new_days < 0:
        ap.error("--new-days must be 0 or more")
    result = bench(args.scale, args.reps, Path(args.work).resolve(), stages, args.new_days)
    path = ROOT / "bench" / "results" / f"connect_ff2010_{args.scale:g}.json"
    return finish(result, table(result), path)


if __name__ == "__main__":
    sys.exit(main())

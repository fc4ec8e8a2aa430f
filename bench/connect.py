"""Day 2's stages as clients of a long-lived Spark Connect server, against the DuckDB reference.

    python bench/connect.py [--scale 4] [--reps 3] [--work var/bench]
                            [--stages rates,plan,materialize]

Runs on the warehouse ``bench/day.py`` built for the scale (``WORK/ff2010-<scale>``: day 1
built, day 2 ingested; run ``make bench`` for the scale first). Starts ``feedpipe
connect-server`` with the bench's configuration (FF-PerPair only), then runs day 2's
``--stages`` through it once, as the server's first day (the warm-up a daily server had the
day before), then ``--reps`` times more, each stage a client process (``feedpipe STAGE
--spark-remote``), alternated with the DuckDB reference's stage. Reports per stage the
median client wall time and the stage's own time, the server's peak RSS, and the ratio to
DuckDB, into ``bench/results/connect_ff2010_<scale>.json``, and prints a Markdown table. Both
implementations' outputs are compared row for row at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import duckdb_reference  # noqa: E402
from day import D2, REFERENCE_STAGES, finish, machine, measured, tree_rss_mb  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def bench(scale: float, reps: int, work: Path, stages: list[str]) -> dict[str, Any]:
    base = work / f"ff2010-{scale:g}"
    wh, ref_out, logs = base / "warehouse", base / "duckdb", base / "logs"
    config = base / "ff-per-pair.toml"
    if not (wh / "manifests" / f"ds={D2}" / "stages" / "ingest.json").exists():
        raise SystemExit(f"no day 2 in {wh}: run bench/day.py --scales {scale:g} first")
    logs.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "FEEDPIPE_CONFIG": str(config),
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

    def client(stage: str, log: str) -> dict[str, Any]:
        cmd = [str(bin_dir / "feedpipe"), stage, "--ds", str(D2), "--spark-remote", url, "-q"]
        m = measured(cmd, logs / log, env)
        record = wh / "manifests" / f"ds={D2}" / "stages" / f"{stage}.json"
        m["stage_s"] = json.loads(record.read_text())["seconds"]
        return m

    def reference(stage: str, log: str) -> dict[str, Any]:
        cmd = [sys.executable, str(ROOT / "bench" / "duckdb_reference.py"), stage]
        cmd += ["--warehouse", str(wh), "--out", str(ref_out), "--ds", str(D2)]
        m = measured([*cmd, "--config", str(config)], logs / log, env)
        m["stage_s"] = json.loads((logs / log).read_text().strip().splitlines()[-1])["seconds"]
        return m

    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for rep in range(reps + 1):  # rep 0: the server's first day
            for stage in stages:
                name = "first" if rep == 0 else "connect"
                runs.setdefault(f"{name}.{stage}", []).append(client(stage, f"c-{stage}.log"))
                if rep and stage in REFERENCE_STAGES:
                    ref = reference(stage, f"c-ref-{stage}.log")
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
    diff = duckdb_reference.compare(str(wh), ref_out, D2)
    return {
        "scale": scale,
        "reps": reps,
        "machine": machine(),
        "server_peak_rss_mb": round(peak[0]),
        "median": summary,
        "runs": runs,
        "comparison": diff,
        "agree": not duckdb_reference.agrees(diff),
        "disagreements": duckdb_reference.agrees(diff),
    }


def table(result: dict[str, Any], stages: list[str]) -> str:
    med = result["median"]
    lines = [
        f"ff2010 x{result['scale']:g}, day 2 on a Spark Connect server, medians of "
        f"{result['reps']} after its first day; server peak RSS "
        f"{result['server_peak_rss_mb']:,} MB; same plan and feeds: {result['agree']}",
        "",
        "| stage | server's first day: client wall (s) | client wall (s) | in stage (s) "
        "| DuckDB wall (s) | client wall / DuckDB wall |",
        "|---|---|---|---|---|---|",
    ]
    for stage in stages:
        c, first, d = med[f"connect.{stage}"], med[f"first.{stage}"], med.get(f"duckdb.{stage}")
        ref = f"{d['wall_s']:.1f} | {c['wall_s'] / d['wall_s']:.1f}" if d else " | "
        lines.append(
            f"| {stage} | {first['wall_s']:.1f} | {c['wall_s']:.1f} | {c['stage_s']:.1f} | {ref} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", default="var/bench")
    ap.add_argument("--stages", default=",".join(REFERENCE_STAGES))
    args = ap.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    result = bench(args.scale, args.reps, Path(args.work).resolve(), stages)
    path = ROOT / "bench" / "results" / f"connect_ff2010_{args.scale:g}.json"
    return finish(result, table(result, stages), path)


if __name__ == "__main__":
    sys.exit(main())

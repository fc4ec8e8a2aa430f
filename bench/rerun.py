"""One stage run again and again in one Spark session: how much of its time is the cold JVM.

    python bench/rerun.py STAGE --ds D [--runs 3] [--config feedpipe.toml]

Builds one session as ``feedpipe run`` does, then runs ``STAGE`` for day ``D`` ``--runs``
times in it (each run replaces the day's partitions of the stage's tables, as a rerun does).
The first run starts cold, as every stage does under the DAG (its own ``spark-submit``); the
later ones find Spark's code loaded and compiled. Prints one JSON line per run: the stage's
own seconds (from its record) and the classes whole-stage code generation compiled so far
with their compile time (Spark's ``CodegenMetrics``; the time is summed over a sample
reservoir, exact up to about a thousand compilations).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jobs.common.config import load_settings  # noqa: E402
from jobs.common.spark import build_session  # noqa: E402
from jobs.stages.runner import run_stage  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage")
    ap.add_argument("--ds", required=True, type=dt.date.fromisoformat)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--config", help="a feedpipe TOML file (default: FEEDPIPE_CONFIG)")
    args = ap.parse_args(argv)
    settings = load_settings(args.config)
    spark = build_session(settings, f"feedpipe-rerun-{args.stage}-{args.ds}")
    jvm = spark._jvm
    assert jvm is not None  # a classic (not Connect) session has its JVM here
    compile_time = jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    for run in range(1, args.runs + 1):
        record = run_stage(args.stage, settings, args.ds, spark=spark)
        line = {
            "stage": args.stage,
            "run": run,
            "seconds": record["seconds"],
            "codegen_classes": compile_time.getCount(),
            "codegen_ms": sum(compile_time.getSnapshot().getValues()),
        }
        print(json.dumps(line), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

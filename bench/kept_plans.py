"""What building the plan stage's kept plans costs, step by step, in one warm session.

    python bench/kept_plans.py --config FILE --ds D [--rounds 4]
                               [--variants join,decide,keep,keep_bool,keep_narrow]

On a warehouse whose day ``D`` has its rates (and D-1 its plan), runs each variant once per
round, alternated, and prints the seconds of each (the first round warms the JVM):

* ``join``: the edges with their rates and D-1's modes (``plan.day_edges``), to Spark's
  ``noop`` sink;
* ``decide``: the same with every configured strategy's decision (``plan.assignments``);
* ``keep``: that, kept (memory, else disk) and counted, as the plan stage keeps it;
* ``keep_bool``: kept with ``strategy`` as a byte and the modes as booleans;
* ``keep_narrow``: kept without the ``strategy`` column.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from jobs.common.config import load_settings  # noqa: E402
from jobs.common.spark import build_session, scoped_conf  # noqa: E402
from jobs.common.storage import Storage  # noqa: E402
from jobs.stages import plan  # noqa: E402


def _kept(frame: DataFrame) -> None:
    kept = frame.persist(StorageLevel.MEMORY_AND_DISK)
    kept.count()
    kept.unpersist()


def _noop(frame: DataFrame) -> None:
    frame.write.format("noop").mode("overwrite").save()


VARIANTS: dict[str, Callable[[DataFrame, DataFrame], None]] = {
    "join": lambda edges, stacked: _noop(edges),
    "decide": lambda edges, stacked: _noop(stacked),
    "keep": lambda edges, stacked: _kept(stacked),
    "keep_bool": lambda edges, stacked: _kept(
        stacked.withColumn("strategy", F.lit(0).cast("byte"))
        .withColumn("mode", F.col("mode") == "push")
        .withColumn("current_mode", F.col("current_mode") == "push")
    ),
    "keep_narrow": lambda edges, stacked: _kept(stacked.drop("strategy")),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--ds", required=True, type=dt.date.fromisoformat)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    settings = load_settings(args.config)
    spark = build_session(settings, "feedpipe-bench-kept-plans")
    for r in range(args.rounds):
        for name in variants:
            with scoped_conf(spark, plan.PLAN_CONF, settings):
                edges = plan.day_edges(spark, settings, args.ds, Storage.at(settings.warehouse))[0]
                stacked, _ = plan.assignments(edges, settings, {})
                t = time.perf_counter()
                VARIANTS[name](edges, stacked)
                print(f"round {r} {name} {time.perf_counter() - t:.2f} s", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

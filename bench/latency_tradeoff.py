"""Cost against latency target for the latency-constrained strategies (Feeding Frenzy,
Figures 6 and 8 style), on one day of a warehouse that has ``rates`` and ``clean/follows``.

    python -m bench.latency_tradeoff --warehouse var/warehouse --ds 2026-01-03 \
        [--metric pulls --bound 0 --quantiles 0.5,0.6,0.7,0.8,0.9,0.95,0.99,1.0]

For each target "a share q of feed views reads at most B sources (or pulls)", plans
``ff-latency-pair`` and ``ff-latency-consumer`` from the day's rates and prints, as a Markdown
table, their cost relative to MinCost (FF-PerPair), the share of feed views within the bound,
the share of views that need any pull, and the pushed edges.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt

from jobs.common.config import load_settings
from jobs.common.spark import build_session
from jobs.common.storage import Storage
from jobs.common.tables import contract, read_partition
from jobs.selection import cost, feeding_frenzy, latency
from jobs.stages import plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--ds", required=True, type=dt.date.fromisoformat)
    ap.add_argument("--metric", default="pulls", choices=("sources", "pulls"))
    ap.add_argument("--bound", type=int, default=0)
    ap.add_argument("--quantiles", default="0.5,0.6,0.7,0.8,0.9,0.95,0.99,1.0")
    args = ap.parse_args()

    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    base = load_settings(overrides={"warehouse": args.warehouse})
    spark = build_session(base, "latency-tradeoff")
    wh = Storage.at(base.warehouse)
    follows = read_partition(spark, wh, contract("clean", "follows"), args.ds)
    pr = read_partition(spark, wh, contract("rates", "producer_rates"), args.ds)
    cr = read_partition(spark, wh, contract("rates", "consumer_rates"), args.ds)
    cr = cr.withColumn(
        "active", latency.consumer_activity(F.lit(args.ds), base.inactive_after_days)
    )
    edges = feeding_frenzy.edge_inputs(follows, pr, cr).persist(StorageLevel.MEMORY_AND_DISK)
    members = spark.createDataFrame(
        [], "strategy string, view_id string, producer_id string, phi double"
    )
    names = ("ff-per-pair", "ff-latency-pair", "ff-latency-consumer")
    print(f"target: q of feed views read at most {args.bound} {args.metric}; day {args.ds}")
    print("| q | strategy | cost / MinCost | within bound | views with a pull | push edges |")
    print("|---|---|---|---|---|---|")
    for q in (float(x) for x in args.quantiles.split(",")):
        s = dataclasses.replace(
            base,
            strategies=names,
            latency_metric=args.metric,
            latency_bound=args.bound,
            latency_quantile=q,
        )
        params = plan.PlanParams.of(s)
        stacked, _ = plan.assignments(edges, params)
        rows = {
            r["strategy"]: r
            for r in cost.plan_costs(stacked, members, params.model, names, params.target).collect()
        }
        mincost = rows["ff-per-pair"]["total_cost"]
        for name in names:
            r = rows[name]
            print(
                f"| {q:g} | {name} | {r['total_cost'] / mincost:.3f} | "
                f"{r['latency_share']:.3f} | {r['pull_view_share']:.3f} | {r['push_edges']} |"
            )
    spark.stop()


if __name__ == "__main__":
    main()

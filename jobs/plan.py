"""Stage ``plan``: choose push / pull (/ shared view) for every follow edge of day D.

Reads ``clean/follows`` (D) and ``rates/{producer,consumer}_rates`` (D). Computes every
enabled strategy, prices each with the cost model (``jobs.selection.cost``) and serves the
configured one (``auto``: the cheapest). Writes, partitioned by ds:

* ``plan/edge_plan``: one row per follow edge of the served plan (key consumer_id, producer_id);
* ``plan/consumer_sources``: per consumer the sources read at view time;
* ``plan/views``, ``plan/view_members``: shared views of the served plan;
* ``plan/plan_cost``: one row per strategy evaluated, ``chosen`` marking the served one.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jobs.common.config import STRATEGIES, Settings
from jobs.common.storage import Storage
from jobs.common.tables import contract, empty_frame, read_partition, write_partition
from jobs.selection import cost, feeding_frenzy, latency

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def assignments(edges: DataFrame, settings: Settings) -> DataFrame:
    """Every computed strategy's edge assignment, stacked (column ``strategy``).

    Inactive consumers' edges are pulls under every strategy (``latency.pull_inactive``);
    the latency-constrained strategies start from the FF-PerPair plan after that rule."""

    def min_cost(e: DataFrame) -> DataFrame:
        plan = feeding_frenzy.ff_per_pair(e, settings.threshold, settings.mode_change_margin)
        return latency.pull_inactive(plan)

    def constrained(name: str, per_consumer: bool) -> Callable[[DataFrame], DataFrame]:
        return lambda e: latency.latency_constrained(
            min_cost(e),
            name,
            settings.push_cost,
            settings.pull_cost,
            settings.latency_metric,
            settings.latency_bound,
            settings.latency_quantile,
            per_consumer,
        )

    builders: dict[str, Callable[[DataFrame], DataFrame]] = {
        "push-all": lambda e: latency.pull_inactive(feeding_frenzy.push_all(e)),
        "pull-all": lambda e: feeding_frenzy.pull_all(e),
        "ff-per-pair": min_cost,
        "ff-consumer": lambda e: latency.pull_inactive(
            feeding_frenzy.ff_consumer(e, settings.threshold, settings.mode_change_margin)
        ),
        "ff-latency-pair": constrained("ff-latency-pair", False),
        "ff-latency-consumer": constrained("ff-latency-consumer", True),
    }
    frames = [builders[s](edges) for s in settings.served_strategies]
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def consumer_sources(edge_plan: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    source_type = (
        F.when(F.col("mode") == "push", F.lit("consumer_feed"))
        .when(F.col("mode") == "view", F.lit("view"))
        .otherwise(F.lit("producer"))
    )
    return edge_plan.select("consumer_id", source_type.alias("source_type"), "source_id").distinct()


def run(spark: SparkSession, settings: Settings, ds: dt.date) -> dict[str, Any]:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    wh = Storage.at(settings.warehouse)
    follows = read_partition(spark, wh, contract("clean", "follows"), ds)
    pr = read_partition(spark, wh, contract("rates", "producer_rates"), ds)
    cr = read_partition(spark, wh, contract("rates", "consumer_rates"), ds)
    ep_c = contract("plan", "edge_plan")
    prev = ds - dt.timedelta(days=1)
    current = read_partition(spark, wh, ep_c, prev) if wh.is_dir(*ep_c.parts(prev)) else None
    cr = cr.withColumn("active", latency.consumer_activity(F.lit(ds), settings.inactive_after_days))
    edges = feeding_frenzy.edge_inputs(follows, pr, cr, current).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    stacked = assignments(edges, settings).persist(StorageLevel.MEMORY_AND_DISK)

    vm_schema = "strategy string, view_id string, producer_id string, phi double"
    shared_members = spark.createDataFrame([], vm_schema)
    target = cost.LatencyTarget(
        settings.latency_metric, settings.latency_bound, settings.latency_quantile
    )
    costs = cost.plan_costs(
        stacked,
        shared_members,
        settings.push_cost,
        settings.pull_cost,
        settings.served_strategies,
        target,
    )

    rows = {r["strategy"]: r.asDict() for r in costs.collect()}  # one row per strategy
    forced = None if settings.strategy == "auto" else settings.strategy
    order = [s for s in STRATEGIES if s in rows]
    chosen = cost.choose({s: r["total_cost"] for s, r in rows.items()}, order, forced)
    cheapest = cost.choose({s: r["total_cost"] for s, r in rows.items()}, order)
    if forced and rows[cheapest]["total_cost"] < rows[chosen]["total_cost"]:
        log.warning(
            "strategy %s is forced by configuration; %s would cost %.3f instead of %.3f per hour",
            chosen,
            cheapest,
            rows[cheapest]["total_cost"],
            rows[chosen]["total_cost"],
        )

    plan_cost = costs.withColumn("chosen", F.col("strategy") == F.lit(chosen))
    write_partition(plan_cost, wh, contract("plan", "plan_cost"), ds)
    served = stacked.where(F.col("strategy") == chosen)
    write_partition(served, wh, contract("plan", "edge_plan"), ds)
    write_partition(consumer_sources(served), wh, contract("plan", "consumer_sources"), ds)
    write_partition(
        empty_frame(spark, contract("plan", "views")), wh, contract("plan", "views"), ds
    )
    write_partition(
        empty_frame(spark, contract("plan", "view_members")),
        wh,
        contract("plan", "view_members"),
        ds,
    )
    stacked.unpersist()
    edges.unpersist()

    stats = {
        "strategy": chosen,
        "forced": forced is not None,
        "cheapest": cheapest,
        "costs": {s: r.get("total_cost") for s, r in sorted(rows.items())},
        "mode_changes": rows[chosen].get("mode_changes"),
        "latency_met": rows[chosen].get("latency_met"),
        "latency_share": rows[chosen].get("latency_share"),
        "inactive_consumers": rows[chosen].get("inactive_consumers"),
    }

    log.info("plan %s: %s", ds, stats)
    return stats

"""``feedpipe evaluate``: replay each strategy's plan on the day after it was made.

A plan is a prediction: the cost model (Chen & Zhou Eq. 3-5, ``jobs.selection.cost``) prices
it with the rates estimated up to day d. The replay counts what serving day d+1's actual
events and feed views with that plan would have cost:

* pushes: each event of d+1 is written once into every personal feed that pushes its
  producer and once into every shared view holding it (``H`` each: Eq. 4 with the realized
  events in place of ``phi``);
* pull reads: each feed view of d+1 by consumer c reads its ``|V_c|`` sources when it reads
  more than one, none otherwise (``L`` each: Eq. 3 with the realized views in place of
  ``theta``);
* the latency proxy: the distribution of ``|V_c|`` over the feed views of d+1, each view
  counted once.

The plans are those the plan stage makes on d (``jobs.stages.plan.strategy_plans``: the same inputs,
the same edge plan of d-1 for hysteresis), for every enabled strategy, not only the served
one. Predicted cost for the day is the plan's cost per hour times 24. One row per strategy
goes to ``eval/replay/ds=d``.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from jobs.common.config import Settings
from jobs.common.dates import days
from jobs.common.storage import Storage
from jobs.common.tables import (
    contract,
    has_partition,
    partition_days,
    read_partition,
    write_partition,
)
from jobs.selection.cost import CostModel

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
HOURS = 24.0


def realized(
    stacked: DataFrame,
    members: DataFrame,
    events: DataFrame,
    views: DataFrame,
    model: CostModel,
) -> DataFrame:
    """Per strategy of ``stacked`` (assignments, ``feeding_frenzy.ASSIGNMENT_COLUMNS``):
    events, feed_views, pushes, pull_reads, realized_cost and the view-weighted
    ``sources_p50/95/99``. ``members``: strategy, view_id, producer_id of the shared views;
    ``events`` and ``views``: the clean rows of the day served."""
    from pyspark.sql import functions as F

    from jobs.selection import cost

    per_p = events.groupBy("producer_id").agg(F.count("*").alias("e"))
    per_c = views.groupBy("consumer_id").agg(F.count("*").alias("n"))
    pushed = (
        stacked.where(F.col("mode") == "push")
        .select("strategy", "producer_id")
        .unionByName(members.select("strategy", "producer_id"))
        .join(per_p, "producer_id")
        .groupBy("strategy")
        .agg(F.sum("e").alias("pushes"))
    )
    hist = (  # feed views per (strategy, sources read)
        cost.sources_per_consumer(stacked)
        .join(per_c, "consumer_id")
        .groupBy("strategy", "n_sources")
        .agg(F.sum("n").alias("w"))
    )
    reads = cost.weighted_percentiles(
        hist,
        (0.50, 0.95, 0.99),
        F.sum("w").alias("feed_views"),
        F.sum(F.when(F.col("n_sources") > 1, F.col("w") * F.col("n_sources")).otherwise(0)).alias(
            "pull_reads"
        ),
    )
    strategies = stacked.select("strategy").distinct()
    n_events = events.agg(F.count("*").alias("events"))

    def zero(name: str) -> Any:
        return F.coalesce(F.col(name), F.lit(0)).cast("long").alias(name)

    out = (
        strategies.join(pushed, "strategy", "left")
        .join(reads, "strategy", "left")
        .crossJoin(n_events)
        .select(
            "strategy",
            "events",
            zero("feed_views"),
            zero("pushes"),
            zero("pull_reads"),
            "sources_p50",
            "sources_p95",
            "sources_p99",
        )
    )
    return out.withColumn(
        "realized_cost",
        F.lit(float(model.push)) * F.col("pushes") + F.lit(float(model.pull)) * F.col("pull_reads"),
    )


def replay_day(spark: SparkSession, settings: Settings, d: dt.date, wh: Storage) -> DataFrame:
    """``eval/replay`` rows of day ``d`` (not written)."""
    from pyspark.sql import functions as F

    from jobs.stages.plan import strategy_plans

    nxt = d + dt.timedelta(days=1)
    plans = strategy_plans(spark, settings, d, wh)
    events = read_partition(spark, wh, contract("clean", "events"), nxt)
    views = read_partition(spark, wh, contract("clean", "views"), nxt)
    model = CostModel(settings.push_cost, settings.pull_cost)
    real = realized(plans.stacked, plans.members, events, views, model)
    predicted = plans.costs.select(
        "strategy", (F.col("total_cost") * F.lit(HOURS)).alias("predicted_cost")
    )
    served_c = contract("plan", "plan_cost")
    if has_partition(wh, served_c, d):
        served = read_partition(spark, wh, served_c, d).select(
            "strategy", F.col("chosen").alias("served")
        )
    else:
        served = spark.createDataFrame([], "strategy string, served boolean")
    error = F.try_divide(F.col("realized_cost"), F.col("predicted_cost")) - F.lit(1.0)
    out = (
        real.join(predicted, "strategy")
        .join(served, "strategy", "left")
        .select(
            *real.columns,
            "predicted_cost",
            F.coalesce(F.col("served"), F.lit(False)).alias("served"),
            error.alias("error"),
            F.lit(float(settings.push_cost)).alias("push_cost"),
            F.lit(float(settings.pull_cost)).alias("pull_cost"),
        )
    )
    # one row per strategy: collected so the plans can be released before the write
    rows = out.collect()
    plans.release()
    return spark.createDataFrame(rows, out.schema)


def evaluate(
    spark: SparkSession, settings: Settings, start: dt.date, end: dt.date
) -> list[dict[str, Any]]:
    """Replay days ``start``..``end``; a day is skipped (with a warning) unless its plan
    inputs and the next day's clean events and views are there."""
    from jobs.common.spark import scoped_conf
    from jobs.stages.plan import PLAN_CONF

    with scoped_conf(spark, PLAN_CONF, settings):  # the plan stage's plans, computed as it does
        return _evaluate(spark, settings, start, end)


def _evaluate(
    spark: SparkSession, settings: Settings, start: dt.date, end: dt.date
) -> list[dict[str, Any]]:
    wh = Storage.at(settings.warehouse)
    events = set(partition_days(wh, contract("clean", "events")))
    views = set(partition_days(wh, contract("clean", "views")))
    rates = set(partition_days(wh, contract("rates", "consumer_rates")))
    out_c = contract("eval", "replay")
    results: list[dict[str, Any]] = []
    for d in days(start, end):
        nxt = d + dt.timedelta(days=1)
        if d not in rates or nxt not in events or nxt not in views:
            log.warning(
                "skipping %s: it needs the rates of %s and the clean events and views of %s",
                d,
                d,
                nxt,
            )
            continue
        frame = replay_day(spark, settings, d, wh)
        write_partition(frame, wh, out_c, d)
        rows = [{"ds": d.isoformat(), **r.asDict()} for r in frame.collect()]
        log.info("replayed %s on %s: %d strategies", d, nxt, len(rows))
        results += rows
    return results


def summary(results: list[dict[str, Any]]) -> str:
    """Per day and strategy: realized against predicted cost, and the latency proxy."""
    lines = [
        f"{'ds':<10} {'strategy':<20} {'served':<6} {'realized':>14} {'predicted':>14} "
        f"{'error':>8} {'p50':>5} {'p95':>5} {'p99':>5}"
    ]
    for r in sorted(results, key=lambda r: (r["ds"], r["realized_cost"])):
        err = "" if r["error"] is None else f"{r['error']:+.1%}"

        def pct(x: float | None) -> str:
            return "" if x is None else f"{x:g}"

        lines.append(
            f"{r['ds']:<10} {r['strategy']:<20} {'yes' if r['served'] else '':<6} "
            f"{r['realized_cost']:>14,.1f} {r['predicted_cost']:>14,.1f} {err:>8} "
            f"{pct(r['sources_p50']):>5} {pct(r['sources_p95']):>5} {pct(r['sources_p99']):>5}"
        )
    return "\n".join(lines)

"""``feedpipe evaluate-rates``: score one-day-ahead rate forecasts against what happened.

For each day d of the range (with d+1 ingested), every method forecasts each id's rate for
d+1 from the clean tables up to d (the same window and estimator code as the ``rates``
stage), and is scored against the realized count of d+1, per hour:

* ``male``: mean absolute log error ``|ln((f + e) / (a + e))|`` over ids, with ``e = 1/24``
  (one event a day) so that zero counts are defined;
* ``weighted_male``: the same, weighted by volume ``f + a``: errors on busy ids, which carry
  the cost, count more;
* ``mae``: mean absolute error in events (views) per hour.

Ids are those of the follow graph of d (producers for events, consumers for views). Results
go to ``eval/rates/ds=d`` (one row per table and method) and are printed.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from jobs.common.config import RATE_METHODS, Settings
from jobs.common.dates import days
from jobs.common.storage import Storage
from jobs.common.tables import (
    contract,
    partition_days,
    read_partition,
    read_partitions,
    write_partition,
)
from jobs.estimators import estimate
from jobs.stages.rates import daily_counts, params_of, window_days

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
EPS = 1.0 / 24.0
TABLES = (("events", "producer_id"), ("views", "consumer_id"))


def score(forecast: DataFrame, actual: DataFrame, id_col: str) -> DataFrame:
    """One row: ids, male, weighted_male, mae. ``forecast``: id, rate; ``actual``: id, n."""
    from pyspark.sql import functions as F

    joined = forecast.join(actual, id_col, "left").select(
        F.col("rate").alias("f"), (F.coalesce(F.col("n"), F.lit(0)) / F.lit(24.0)).alias("a")
    )
    err = F.abs(F.log((F.col("f") + F.lit(EPS)) / (F.col("a") + F.lit(EPS))))
    vol = F.col("f") + F.col("a")
    return joined.agg(
        F.count("*").alias("ids"),
        F.avg(err).alias("male"),
        F.try_divide(F.sum(err * vol), F.sum(vol)).alias("weighted_male"),
        F.avg(F.abs(F.col("f") - F.col("a"))).alias("mae"),
    )


def evaluate(
    spark: SparkSession,
    settings: Settings,
    start: dt.date,
    end: dt.date,
    methods: tuple[str, ...] = RATE_METHODS,
) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    wh = Storage.at(settings.warehouse)
    available = partition_days(wh, contract("clean", "events"))
    out_c = contract("eval", "rates")
    results = []
    for d in days(start, end):
        nxt = d + dt.timedelta(days=1)
        if d not in available or nxt not in available:
            log.warning("skipping %s: clean tables for %s and %s are needed", d, d, nxt)
            continue
        window = window_days(available, d, settings.rate_window_days)
        offsets = [(w - d).days for w in window]
        follows = read_partition(spark, wh, contract("clean", "follows"), d)
        rows = []
        for table, id_col in TABLES:
            c = contract("clean", table)
            daily = daily_counts(read_partitions(spark, wh, c, window), id_col, d).cache()
            actual = read_partition(spark, wh, c, nxt).groupBy(id_col).agg(F.count("*").alias("n"))
            ids = follows.select(id_col).distinct()
            for method in methods:
                est = estimate(daily, ids, id_col, offsets, params_of(settings, method))
                forecast = est.join(ids, id_col, "left_semi").select(id_col, "rate")
                (r,) = score(forecast, actual, id_col).collect()
                rows.append((table, method, int(r["ids"]), r["male"], r["weighted_male"], r["mae"]))
            daily.unpersist()
        frame = spark.createDataFrame(
            rows,
            "table string, method string, ids long, male double, weighted_male double, mae double",
        )
        write_partition(frame, wh, out_c, d)
        results += [
            dict(
                zip(
                    ("ds", "table", "method", "ids", "male", "weighted_male", "mae"),
                    (d.isoformat(), *r),
                    strict=True,
                )
            )
            for r in rows
        ]
    return results


def summary(results: list[dict[str, Any]]) -> str:
    """Per table and method: the mean over days of each metric, and the per-day rows."""
    lines = [
        f"{'ds':<10} {'table':<7} {'method':<20} {'ids':>8} {'male':>7} {'w.male':>7} {'mae':>8}"
    ]
    for r in results:
        lines.append(
            f"{r['ds']:<10} {r['table']:<7} {r['method']:<20} {r['ids']:>8} {r['male']:>7.3f} "
            f"{(r['weighted_male'] or 0):>7.3f} {r['mae']:>8.4f}"
        )
    lines.append("")
    lines.append("mean over days:")
    keys = sorted({(r["table"], r["method"]) for r in results})
    for table, method in keys:
        rs = [r for r in results if r["table"] == table and r["method"] == method]
        avg = {m: sum(r[m] or 0 for r in rs) / len(rs) for m in ("male", "weighted_male", "mae")}
        lines.append(
            f"  {table:<7} {method:<20} male {avg['male']:.3f}"
            f"  weighted male {avg['weighted_male']:.3f}"
            f"  mae {avg['mae']:.4f}  ({len(rs)} days)"
        )
    return "\n".join(lines)

"""Stage ``rates``: per-producer event rates (phi_p) and per-consumer view rates (theta_c).

Reads ``clean/events`` and ``clean/views`` over a trailing window of ``rate_window_days``
partitions ending at D (fewer at the start of the data), and ``clean/follows`` of D so that
every producer and consumer of the graph gets a rate. Writes ``rates/producer_rates`` and
``rates/consumer_rates`` (one row per id, keyed by the id).

Estimator (``method = trailing_mean_prior``): with n events in a window of T hours and the
population mean rate m (floored at ``rate_floor``), the rate is ``(n + m*tau) / (T + tau)``,
a trailing mean shrunk toward m by a prior worth ``tau = prior_hours`` hours of observation.
Ids without activity get ``m*tau / (T + tau) > 0``: never 0, never null.

Events count by the partition they arrived in (a late event costs a push when it arrives).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from jobs.common.config import Settings
from jobs.common.storage import Storage
from jobs.common.tables import contract, read_partition, read_partitions, write_partition

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)
METHOD = "trailing_mean_prior"


def window_days(available: list[dt.date], ds: dt.date, window: int) -> list[dt.date]:
    """The days of the trailing window ending at ``ds`` that the data covers.

    The window starts at the first day with data (``available[0]``) if that is later than
    ``ds - window + 1``: "fewer at the start"."""
    first = ds - dt.timedelta(days=window - 1)
    if available:
        first = max(first, min(available))
    n = (ds - first).days + 1
    return [first + dt.timedelta(days=i) for i in range(max(n, 1))]


def estimate_rates(
    counts: DataFrame,
    ids: DataFrame,
    id_col: str,
    hours: float,
    prior_hours: float,
    rate_floor: float,
) -> DataFrame:
    """Shrunk trailing-mean rates for every id in ``ids`` (``counts``: id_col, n).

    Returns id_col, rate, n, prior_rate. Pure: no I/O, no actions."""
    from pyspark.sql import functions as F

    all_ids = ids.select(id_col).union(counts.select(id_col)).distinct()
    per_id = all_ids.join(counts, id_col, "left").select(
        id_col, F.coalesce(F.col("n"), F.lit(0)).cast("long").alias("n")
    )
    population = per_id.agg(
        F.greatest(
            F.try_divide(F.sum("n").cast("double"), F.count("*") * F.lit(hours)),
            F.lit(rate_floor),
        ).alias("prior_rate")
    )
    # A one-row frame; crossJoin keeps the whole computation in Spark.
    return per_id.crossJoin(F.broadcast(population)).select(
        id_col,
        (
            (F.col("n") + F.col("prior_rate") * F.lit(prior_hours)) / F.lit(hours + prior_hours)
        ).alias("rate"),
        "n",
        F.coalesce(F.col("prior_rate"), F.lit(rate_floor)).alias("prior_rate"),
    )


def run(spark: SparkSession, settings: Settings, ds: dt.date) -> dict[str, Any]:
    from pyspark.sql import functions as F

    wh = Storage.at(settings.warehouse)
    ev_c, vw_c, fo_c = (
        contract("clean", "events"),
        contract("clean", "views"),
        contract("clean", "follows"),
    )
    days = window_days(wh.list_partitions(*ev_c.parts()), ds, settings.rate_window_days)
    hours = 24.0 * len(days)
    follows = read_partition(spark, wh, fo_c, ds)

    ev_counts = (
        read_partitions(spark, wh, ev_c, days).groupBy("producer_id").agg(F.count("*").alias("n"))
    )
    producers = estimate_rates(
        ev_counts,
        follows.select("producer_id"),
        "producer_id",
        hours,
        settings.prior_hours,
        settings.rate_floor,
    )
    vw_counts = (
        read_partitions(spark, wh, vw_c, days).groupBy("consumer_id").agg(F.count("*").alias("n"))
    )
    consumers = estimate_rates(
        vw_counts,
        follows.select("consumer_id"),
        "consumer_id",
        hours,
        settings.prior_hours,
        settings.rate_floor,
    )
    common: list[Column | str] = [
        F.lit(len(days)).alias("window_days"),
        F.lit(hours).alias("window_hours"),
        "prior_rate",
        F.lit(METHOD).alias("method"),
    ]
    write_partition(
        producers.select(
            "producer_id",
            F.col("rate").alias("events_per_hour"),
            F.col("n").alias("n_events"),
            *common,
        ),
        wh,
        contract("rates", "producer_rates"),
        ds,
    )
    write_partition(
        consumers.select(
            "consumer_id",
            F.col("rate").alias("views_per_hour"),
            F.col("n").alias("n_views"),
            *common,
        ),
        wh,
        contract("rates", "consumer_rates"),
        ds,
    )
    stats = {"window_start": days[0].isoformat(), "window_days": len(days), "method": METHOD}
    log.info("rates %s: %s", ds, stats)
    return stats

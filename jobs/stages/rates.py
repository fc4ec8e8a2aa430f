"""Stage ``rates``: forecast per-producer event rates (phi_p) and per-consumer view rates
(theta_c) for the day after D, from the daily counts of a trailing window ending at D.

Reads the daily counts of ``clean/events`` and ``clean/views`` (``clean/event_counts``,
``clean/view_counts``, written by ingest) over ``rate_window_days`` partitions ending at D
(fewer at the start of the data), ``clean/follows`` of D (every producer and consumer of the
graph gets a rate) and, when present, D-1's ``rates/producer_rates`` (yesterday's forecast
for today). Writes ``rates/producer_rates`` and ``rates/consumer_rates``, one row per id, with
the point estimate, its standard deviation and 90% interval, the fitted trend and the method
(``jobs/estimators.py``; default ``eb_trend``).

Flash events (Feeding Frenzy, Section 5.5): a producer that posted at least
``flash_min_events`` events on D, more than ``flash_factor`` times the upper end of D-1's 90%
interval for D, is flagged ``flash``; its rate becomes at least today's observed rate, so the
plan made from these rates the same day moves its pushed edges to pull. The stage's record
lists the flagged ids.

Events count by the partition they arrived in (a late event costs a push when it arrives).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from jobs.common.config import Settings
from jobs.common.records import RatesRecord
from jobs.common.spark import side_by_side
from jobs.common.storage import Storage
from jobs.common.tables import (
    DAILY_COUNTS,
    Contract,
    contract,
    has_partition,
    partition_days,
    read_partition,
    read_partitions,
    write_partition,
)
from jobs.estimators import RateParams, estimate

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)
Z90 = 1.6448536269514722  # two-sided 90% normal quantile
MAX_LISTED = 100


def window_days(available: list[dt.date], ds: dt.date, window: int) -> list[dt.date]:
    """The days of the trailing window ending at ``ds`` that the data covers.

    The window starts at the first day with data (``available[0]``) if that is later than
    ``ds - window + 1``: "fewer at the start"."""
    first = ds - dt.timedelta(days=window - 1)
    if available:
        first = max(first, min(available))
    n = (ds - first).days + 1
    return [first + dt.timedelta(days=i) for i in range(max(n, 1))]


def daily_counts(rows: DataFrame, id_col: str, ds: dt.date) -> DataFrame:
    """``id_col, t, n``: rows per id and day, ``t`` the day's offset from ``ds``."""
    from pyspark.sql import functions as F

    return (
        rows.groupBy(id_col, "ds")
        .agg(F.count("*").alias("n"))
        .select(id_col, F.datediff(F.col("ds"), F.lit(ds)).alias("t"), "n")
    )


def window_counts(
    spark: SparkSession, wh: Storage, table: str, days: list[dt.date], ds: dt.date
) -> DataFrame:
    """``id_col, t, n`` over the window's days, from the per-day counts ingest writes with
    each clean partition (``clean/event_counts``, ``clean/view_counts``), so a day's rows are
    scanned once, by ingest, and not again on each of the ``rate_window_days`` days its
    partition stays in the window. A day without counts (ingested before they existed) is
    counted from its clean rows."""
    from pyspark.sql import functions as F

    name, id_col = DAILY_COUNTS[table]
    counts_c = contract("clean", name)
    counted = [d for d in days if has_partition(wh, counts_c, d)]
    frames = [
        read_partition(spark, wh, counts_c, d).select(
            id_col, F.lit((d - ds).days).alias("t"), F.col("n")
        )
        for d in counted
    ]
    rest = [d for d in days if d not in counted]  # days is never empty (window_days)
    if rest:
        log.info("%s: no %s for %s, counting clean rows", table, name, rest)
        clean = read_partitions(spark, wh, contract("clean", table), rest)
        frames.append(daily_counts(clean, id_col, ds))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def params_of(settings: Settings, method: str | None = None) -> RateParams:
    return RateParams(
        method=method or settings.rate_method,
        prior_hours=settings.prior_hours,
        rate_floor=settings.rate_floor,
        half_life_days=settings.rate_half_life_days,
        trend_damping=settings.rate_trend_damping,
    )


def previous_forecast(previous: DataFrame) -> DataFrame:
    """``producer_id, forecast_prev, bound_prev``: D-1's forecast for D and the upper end of
    its 90% interval, from D-1's ``rates/producer_rates`` (carried into the estimate's
    aggregation, :func:`jobs.estimators.per_id_sums`)."""
    from pyspark.sql import functions as F

    return previous.select(
        "producer_id",
        F.col("events_per_hour").alias("forecast_prev"),
        F.coalesce(F.col("rate_hi"), F.col("events_per_hour")).alias("bound_prev"),
    )


def flag_flash(rates: DataFrame, factor: float, min_events: int) -> DataFrame:
    """Adds ``flash`` to rates that carry :func:`previous_forecast`'s columns (null, or
    absent, where D-1 has no forecast); a flash producer's rate is raised to at least
    today's observed rate."""
    from pyspark.sql import functions as F

    out = rates
    for c in ("forecast_prev", "bound_prev"):
        if c not in out.columns:
            out = out.withColumn(c, F.lit(None).cast("double"))
    today = F.col("n_today") / F.lit(24.0)
    # against the upper end of yesterday's 90% interval: a forecast that was itself unsure
    # (little history, a noisy trend) does not turn ordinary days into flashes
    flash = (
        F.col("bound_prev").isNotNull()
        & (F.col("n_today") >= F.lit(min_events))
        & (today > F.lit(factor) * F.col("bound_prev"))
    )
    return out.withColumn("flash", F.coalesce(flash, F.lit(False))).withColumn(
        "rate",
        F.when(F.col("flash"), F.greatest(F.col("rate"), today)).otherwise(F.col("rate")),
    )


def last_view(ds: dt.date, carried: bool) -> Column:
    """``last_view_ds``: the last day with a view in the window (the estimate's ``last_t``),
    or, when D-1's rates were ``carried`` into the estimate, the later of that and their
    ``prev_last_view_ds``, so the inactivity rule can look further back than the window."""
    from pyspark.sql import functions as F

    window_last = F.date_add(F.lit(ds), F.col("last_t"))
    return F.greatest(window_last, F.col("prev_last_view_ds")) if carried else window_last


def shape(
    est: DataFrame, id_col: str, rate_col: str, n_col: str, days: int, method: str
) -> DataFrame:
    from pyspark.sql import functions as F

    extra = [c for c in ("last_view_ds",) if c in est.columns]
    return est.select(
        id_col,
        F.col("rate").alias(rate_col),
        F.col("n").alias(n_col),
        F.lit(days).alias("window_days"),
        F.lit(24.0 * days).alias("window_hours"),
        "prior_rate",
        F.lit(method).alias("method"),
        "rate_sd",
        F.greatest(F.col("rate") - F.lit(Z90) * F.col("rate_sd"), F.lit(0.0)).alias("rate_lo"),
        (F.col("rate") + F.lit(Z90) * F.col("rate_sd")).alias("rate_hi"),
        "trend_per_day",
        "n_today",
        "forecast_prev",
        "flash",
        *extra,
    )


def run(spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage) -> RatesRecord:
    from pyspark.sql import functions as F

    ev_c, fo_c = contract("clean", "events"), contract("clean", "follows")
    pr_c, cr_c = contract("rates", "producer_rates"), contract("rates", "consumer_rates")
    days = window_days(partition_days(wh, ev_c), ds, settings.rate_window_days)
    offsets = [(d - ds).days for d in days]
    params = params_of(settings)
    follows = read_partition(spark, wh, fo_c, ds)
    kept: list[DataFrame] = []  # per-id sums, read by the prior and by both passes of the write
    prev = ds - dt.timedelta(days=1)

    def write(rates: DataFrame, id_col: str, rate_col: str, n_col: str, c: Contract) -> None:
        out = shape(rates, id_col, rate_col, n_col, len(days), params.method)
        write_partition(out, wh, c, ds, keep=False)  # a projection of the kept per-id sums

    def producer_rates() -> None:
        # D-1's figures ride along in the estimate's one aggregation (no join of their own)
        previous = read_partition(spark, wh, pr_c, prev) if has_partition(wh, pr_c, prev) else None
        producers = estimate(
            window_counts(spark, wh, "events", days, ds),
            follows.select("producer_id"),
            "producer_id",
            offsets,
            params,
            kept,
            carried=None if previous is None else previous_forecast(previous),
        )
        producers = flag_flash(producers, settings.flash_factor, settings.flash_min_events)
        write(producers, "producer_id", "events_per_hour", "n_events", pr_c)

    def consumer_rates() -> None:
        prev_consumers = (
            read_partition(spark, wh, cr_c, prev).select(
                "consumer_id", F.col("last_view_ds").alias("prev_last_view_ds")
            )
            if has_partition(wh, cr_c, prev)
            else None
        )
        consumers = (
            estimate(
                window_counts(spark, wh, "views", days, ds),
                follows.select("consumer_id"),
                "consumer_id",
                offsets,
                params,
                kept,
                carried=prev_consumers,
            )
            .withColumn("forecast_prev", F.lit(None).cast("double"))
            .withColumn("flash", F.lit(False))
            .withColumn("last_view_ds", last_view(ds, prev_consumers is not None))
        )
        write(consumers, "consumer_id", "views_per_hour", "n_views", cr_c)

    # the two tables are independent: each one's small jobs and Python fill the other's gaps
    try:
        side_by_side(spark, producer_rates, consumer_rates)
    finally:
        for frame in kept:
            frame.unpersist()
    # the flagged ids from the table as written: the per-id sums behind it are released
    written = read_partition(spark, wh, pr_c, ds)

    flagged = written.where(F.col("flash")).orderBy(F.col("n_today").desc(), "producer_id")
    n_flash = flagged.count()
    listed = [r["producer_id"] for r in flagged.select("producer_id").limit(MAX_LISTED).collect()]
    stats = RatesRecord(
        window_start=days[0],
        window_days=len(days),
        method=params.method,
        flash_producers=n_flash,
        flash_listed=listed,
    )
    log.info("rates %s: %s", ds, stats.model_dump(exclude={"flash_listed"}))
    if n_flash:
        log.warning("%d flash producer(s) on %s, e.g. %s", n_flash, ds, ", ".join(listed[:10]))
    return stats

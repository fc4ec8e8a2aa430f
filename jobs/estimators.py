"""Rate estimators: events per hour per producer, views per hour per consumer.

All estimators read *daily counts* ``(id, t, n)`` where ``t`` is the day's offset from the
estimate's day D (``t = 0`` is D, ``t = -1`` the day before, ...) over the ``days`` the data
covers, and return one row per id of ``ids`` (ids without counts are zero-count ids).
Everything is Spark aggregation over all ids; the few window-level constants (weights, their
sums) are computed in Python from the number of days.

* ``trailing_mean``: n / T. The baseline the evaluation compares against (can be 0).
* ``trailing_mean_prior``: ``(n + m*tau) / (T + tau)``, a trailing mean shrunk toward the
  population mean m by a prior worth ``tau`` hours.
* ``eb_trend`` (default): exponentially weighted counts (half-life ``h`` days), shrunk by an
  empirical-Bayes Gamma-Poisson prior fitted to all ids of the day, plus a damped linear trend
  from an exponentially weighted least-squares fit of the daily counts. The dissertation
  (``003``, Chapter 3, Sections 3.1 and 3.5) shows that estimates from past frequency alone
  lag behind a trend; the weighted fit follows it, and the shrinkage keeps ids with little
  history near the population instead of at 0 or at one lucky day.

Details of ``eb_trend`` for one id with weighted daily counts ``S0 = sum_t w_t n_t``
(``w_t = 2^(t/h)``, so ``w_0 = 1``), exposure ``E = 24 * sum_t w_t`` hours:

* population: per-id weighted rates ``r = S0/E`` have mean m and variance v across ids; Poisson
  noise explains ``m * sum w^2 / (24 (sum w)^2)`` of v, the rest is the prior's variance
  ``s2`` (floored), so the prior is Gamma(alpha = m^2/s2, beta = m/s2);
* level: the posterior mean ``(alpha + S0) / (beta + E)``, with posterior standard deviation
  ``sqrt(alpha + S0) / (beta + E)``;
* trend: slope ``b = sum w (t - tbar) n / sum w (t - tbar)^2`` events/day per day. Poisson
  noise gives it variance ``V = 24*level * sum w^2 (t - tbar)^2 / (sum w (t - tbar)^2)^2``
  times the day's overdispersion ``d >= 1`` (the residual sum of squares of all ids' weighted
  linear fits over what Poisson noise would leave: bursty data has d >> 1, so its bursts are
  not mistaken for trends), and it is shrunk by ``b^2 / (b^2 + V)``; the forecast for D+1

  adds ``damping * S0/(S0 + alpha) * shrink * b * (1 - tbar) / 24`` per hour (the trend of an id
  with little evidence is shrunk away with its level), and the trend's own uncertainty is added
  to the standard deviation;
* the result is floored at ``rate_floor``: never 0, never null.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.common.config import RATE_METHODS
from jobs.common.exact import exact_sum

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@dataclass(frozen=True)
class RateParams:
    method: str = "eb_trend"
    prior_hours: float = 24.0
    rate_floor: float = 1e-3
    half_life_days: float = 3.0
    trend_damping: float = 0.25


@dataclass(frozen=True)
class Window:
    """Day offsets t (<= 0) of the window and their weights."""

    offsets: tuple[int, ...]
    half_life_days: float

    @property
    def hours(self) -> float:
        return 24.0 * len(self.offsets)

    def weight(self, t: int) -> float:
        return 2.0 ** (t / self.half_life_days)

    @property
    def w_sum(self) -> float:
        return sum(self.weight(t) for t in self.offsets)

    @property
    def w2_sum(self) -> float:
        return sum(self.weight(t) ** 2 for t in self.offsets)

    @property
    def t_bar(self) -> float:
        return sum(self.weight(t) * t for t in self.offsets) / self.w_sum

    @property
    def t_var_sum(self) -> float:
        tb = self.t_bar
        return sum(self.weight(t) * (t - tb) ** 2 for t in self.offsets)

    @property
    def t_var_sum_w2(self) -> float:
        tb = self.t_bar
        return sum(self.weight(t) ** 2 * (t - tb) ** 2 for t in self.offsets)


def per_id_sums(
    daily: DataFrame,
    ids: DataFrame,
    id_col: str,
    t_bar: float,
    half_life_days: float,
    carried: DataFrame | None = None,
) -> DataFrame:
    """One row per id of ``ids`` or ``daily``: ``n``, ``n_today``, the weighted sums ``s0``,
    ``s1``, ``s2n`` (0 for an id without counts), ``last_t`` (the last day offset with a
    count, null if none) and the columns of ``carried`` (null where it has no row).

    One aggregation over the union of the three inputs, so the ids are zero-filled and the
    carried columns joined without a distinct or a join of their own: each input goes
    through one shuffle. The rows of ``ids`` carry no count (null ``t`` and ``n``), so the
    sums skip them at the cost of a null test. An id of ``carried`` alone gets no row.

    The union is hash-partitioned on the id before the aggregation, so the shuffle carries
    the narrow input rows and the aggregation runs whole after it. Left to itself, Spark
    would aggregate each task's rows first and shuffle their partial sums, a dozen columns
    and more a row, for ids that are nearly all distinct within a task, with the sums'
    generated code compiled and warmed up on both sides of the shuffle (docs/tuning.md,
    "Per-id repartitioning of the rates")."""
    from pyspark.sql import functions as F

    parts = [
        daily.select(id_col, F.col("t").cast("int").alias("t"), F.col("n").cast("long").alias("n")),
        ids.select(id_col),
    ]
    carried_cols = [] if carried is None else [c for c in carried.columns if c != id_col]
    if carried is not None:
        parts = [p.withColumn("_here", F.lit(True)) for p in parts]
        parts.append(carried.withColumn("_here", F.lit(False)))
    rows = parts[0]
    for p in parts[1:]:
        rows = rows.unionByName(p, allowMissingColumns=True)
    w = F.pow(F.lit(2.0), F.col("t") / F.lit(half_life_days))
    per_id = (
        rows.repartition(id_col)
        .groupBy(id_col)
        .agg(
            F.sum("n").cast("long").alias("n"),
            F.sum(F.when(F.col("t") == 0, F.col("n"))).cast("long").alias("n_today"),
            exact_sum(w * F.col("n")).alias("s0"),
            exact_sum(w * (F.col("t") - F.lit(t_bar)) * F.col("n")).alias("s1"),
            exact_sum(w * F.col("n") * F.col("n")).alias("s2n"),
            F.max(F.when(F.col("n") > 0, F.col("t"))).alias("last_t"),
            *[F.max(c).alias(c) for c in carried_cols],
            *([F.max("_here").alias("_here")] if carried is not None else []),
        )
    )
    if carried is not None:
        per_id = per_id.where(F.col("_here")).drop("_here")
    zeros = {"n": 0, "n_today": 0, "s0": 0.0, "s1": 0.0, "s2n": 0.0}
    return per_id.select(
        *(
            F.coalesce(F.col(c), F.lit(zeros[c])).alias(c) if c in zeros else c
            for c in per_id.columns
        )
    )


def population(prior: DataFrame) -> dict[str, Column]:
    """The one row of the population's figures (the prior), as literals.

    Fetched by one small action, so the rates that read them are a projection of the per-id
    sums: no broadcast join, and no second job racing the first to build the kept sums (a
    broadcast of an aggregate of a frame not yet cached computes that frame twice). A double
    goes to Python and back unchanged, so the rates are the same to the bit."""
    from pyspark.sql import functions as F

    row = prior.first()
    assert row is not None  # a global aggregation has one row, with or without ids
    return {f.name: F.lit(row[f.name]).cast(f.dataType) for f in prior.schema.fields}


def estimate(
    daily: DataFrame,
    ids: DataFrame,
    id_col: str,
    offsets: Sequence[int],
    params: RateParams,
    kept: list[DataFrame] | None = None,
    carried: DataFrame | None = None,
) -> DataFrame:
    """Rates for every id: ``id_col, rate, rate_sd, n, n_today, trend_per_day, prior_rate,
    last_t`` and the columns of ``carried`` (:func:`per_id_sums`).

    ``daily``: id_col, t (day offset <= 0), n (count that day). With ``kept``, the per-id
    sums (one row per id), which the population prior and the per-id rates both read, are
    persisted and appended to it for the caller to unpersist once the rates are written
    (the rates are a projection of them, so a range write can scan them for its sample and
    its write: ``write_partition(keep=False)``); without it they are computed twice. The
    prior is computed here, by one small action (:func:`population`)."""
    from pyspark import StorageLevel

    win = Window(tuple(sorted(set(offsets))), params.half_life_days)
    per_id = per_id_sums(daily, ids, id_col, win.t_bar, params.half_life_days, carried)
    extra = [c for c in per_id.columns if c not in (id_col, "n", "n_today", "s0", "s1", "s2n")]
    if kept is not None:
        per_id = per_id.persist(StorageLevel.MEMORY_AND_DISK)
        kept.append(per_id)

    if params.method == "trailing_mean":
        return _trailing_mean(per_id, id_col, win.hours, extra)
    if params.method == "trailing_mean_prior":
        return _trailing_mean_prior(per_id, id_col, win.hours, params, extra)
    if params.method != "eb_trend":
        raise ValueError(f"unknown rate method {params.method!r}; known: {', '.join(RATE_METHODS)}")
    return _eb_trend(per_id, id_col, win, params, extra)


def _trailing_mean(per_id: DataFrame, id_col: str, hours: float, extra: list[str]) -> DataFrame:
    """``trailing_mean``: the window's count over its hours."""
    from pyspark.sql import functions as F

    return per_id.select(
        id_col,
        (F.col("n") / F.lit(hours)).alias("rate"),
        (F.sqrt(F.col("n")) / F.lit(hours)).alias("rate_sd"),
        F.lit(None).cast("double").alias("prior_rate"),
        F.lit(0.0).alias("trend_per_day"),
        "n",
        "n_today",
        *extra,
    )


def _trailing_mean_prior(
    per_id: DataFrame, id_col: str, hours: float, params: RateParams, extra: list[str]
) -> DataFrame:
    """``trailing_mean_prior``: the trailing mean shrunk toward the population mean by a prior
    worth ``params.prior_hours`` hours."""
    from pyspark.sql import functions as F

    mean = population(
        per_id.agg(
            F.greatest(
                F.try_divide(F.sum("n").cast("double"), F.count("*") * F.lit(hours)),
                F.lit(params.rate_floor),
            ).alias("prior_rate")
        )
    )
    tau = params.prior_hours
    prior_rate = mean["prior_rate"]
    rate = (F.col("n") + prior_rate * F.lit(tau)) / F.lit(hours + tau)
    return per_id.select(
        id_col,
        rate.alias("rate"),
        (F.sqrt(F.col("n") + prior_rate * F.lit(tau)) / F.lit(hours + tau)).alias("rate_sd"),
        F.coalesce(prior_rate, F.lit(params.rate_floor)).alias("prior_rate"),
        F.lit(0.0).alias("trend_per_day"),
        "n",
        "n_today",
        *extra,
    )


def _eb_prior(per_id: DataFrame, win: Window, params: RateParams) -> dict[str, Column]:
    """``eb_trend``'s population figures, as literals (:func:`population`): ``prior_rate``
    (m), the Gamma prior's ``alpha`` and ``beta``, and the day's ``dispersion``."""
    from pyspark.sql import functions as F

    exposure = 24.0 * win.w_sum
    noise = win.w2_sum / (24.0 * win.w_sum**2)
    r = F.col("s0") / F.lit(exposure)
    q = win.t_var_sum
    # overdispersion: the residual sum of squares of each id's weighted linear fit against
    # what Poisson noise would leave (level * residual degrees of freedom), over all ids
    fit_dof = win.w_sum - win.w2_sum / win.w_sum - (win.t_var_sum_w2 / q if q > 0 else 0.0)
    rss = F.col("s2n") - F.col("s0") * F.col("s0") / F.lit(win.w_sum)
    if q > 0:
        rss = rss - F.col("s1") * F.col("s1") / F.lit(q)
    expected_rss = F.col("s0") / F.lit(win.w_sum) * F.lit(fit_dof)
    moments = per_id.agg(
        F.try_divide(exact_sum(r), F.count("*")).alias("mean"),
        F.try_divide(exact_sum(r * r), F.count("*")).alias("mean_sq"),
        F.try_divide(exact_sum(F.greatest(rss, F.lit(0.0))), exact_sum(expected_rss)).alias("disp"),
    )
    pop = moments.select(
        F.greatest(F.coalesce(F.col("mean"), F.lit(0.0)), F.lit(params.rate_floor)).alias("m"),
        F.greatest(
            F.coalesce(F.col("mean_sq") - F.col("mean") * F.col("mean"), F.lit(0.0)), F.lit(0.0)
        ).alias("v"),
        F.greatest(
            F.coalesce(F.col("disp"), F.lit(1.0)) if fit_dof > 1e-9 else F.lit(1.0), F.lit(1.0)
        ).alias("dispersion"),
    )
    # prior variance: what is left of the spread once Poisson noise is taken out; never
    # below (m/2)^2 / 100 so that alpha stays finite when ids barely differ
    s2 = F.greatest(F.col("v") - F.col("m") * F.lit(noise), F.pow(F.col("m") / 20.0, 2))
    return population(
        pop.select(
            F.col("m").alias("prior_rate"),
            (F.col("m") * F.col("m") / s2).alias("alpha"),
            (F.col("m") / s2).alias("beta"),
            "dispersion",
        )
    )


def _eb_trend(
    per_id: DataFrame, id_col: str, win: Window, params: RateParams, extra: list[str]
) -> DataFrame:
    """``eb_trend`` (the module docstring): the empirical-Bayes level plus the damped, shrunk
    trend of each id."""
    from pyspark.sql import functions as F

    prior = _eb_prior(per_id, win, params)
    exposure = 24.0 * win.w_sum
    q = win.t_var_sum
    alpha, beta = prior["alpha"], prior["beta"]
    slope = F.col("s1") / F.lit(q) if q > 0 else F.lit(0.0)
    level = (alpha + F.col("s0")) / (beta + F.lit(exposure))
    level_sd = F.sqrt(alpha + F.col("s0")) / (beta + F.lit(exposure))
    reliability = F.col("s0") / (F.col("s0") + alpha)
    # Poisson noise gives the slope a variance of level_day * sum w^2 (t-tbar)^2 / q^2, times
    # the day's overdispersion; a slope that does not stand out from it is shrunk toward 0
    slope_var = (
        level * F.lit(24.0 * win.t_var_sum_w2 / q**2) * prior["dispersion"] if q > 0 else F.lit(0.0)
    )

    shrink = F.coalesce(F.try_divide(slope * slope, slope * slope + slope_var), F.lit(0.0))
    per_slope = F.lit(params.trend_damping * (1.0 - win.t_bar) / 24.0) * reliability * shrink
    trend = per_slope * slope
    trend_sd = per_slope * F.sqrt(slope_var)
    return per_id.select(
        id_col,
        F.greatest(level + trend, F.lit(params.rate_floor)).alias("rate"),
        F.sqrt(level_sd * level_sd + trend_sd * trend_sd).alias("rate_sd"),
        prior["prior_rate"].alias("prior_rate"),
        slope.alias("trend_per_day"),
        "n",
        "n_today",
        *extra,
    )

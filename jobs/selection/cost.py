"""The cost model (Chen & Zhou, Section III.C, Eq. 3-5), applied to any plan.

A plan assigns every follow edge (c, p) a ``mode`` and a ``source_id``:

* ``push``: p's events are written into c's personal feed (a view over c's pushed producers;
  ``source_id`` = c);
* ``pull``: c reads p's native stream at view time (``source_id`` = p);
* ``view``: c reads a shared materialized view holding p (``source_id`` = the view id).

Costs are per hour:

* maintenance ``M(v) = H * sum_{p in v} phi_p`` (Eq. 4) for every personal feed and shared
  view; native producer streams are kept anyway and cost nothing extra;
* evaluation ``EV(c) = theta_c * L * |V_c|`` when c reads ``|V_c| > 1`` sources, else 0 (Eq. 3);
* ``Cost = sum M + sum EV`` (Eq. 5).

The latency proxy is ``|V_c|``, the number of sources a feed view reads, summarized as
percentiles over feed views (each consumer weighted by theta_c).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.common.config import SHARED_VIEW_STRATEGIES
from jobs.common.exact import exact_partial_sum, exact_resum, exact_sum, exact_value

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

COST_DECIMALS = 6
"""Costs are summed exactly (``exact_sum``) and reported to 6 decimals, so reruns give
identical rows."""


def sources_per_consumer(assignments: DataFrame, views: bool = True) -> DataFrame:
    """Per (strategy, consumer): theta, sources read |V_c|, pushed event rate, and edges
    whose mode differs from their ``current_mode`` (the plan served now).

    ``assignments``: strategy, consumer_id, producer_id, mode, source_id, phi, theta,
    current_mode. ``views=False`` says no edge reads a shared view, which saves counting
    the distinct views each consumer reads."""
    from pyspark.sql import functions as F

    is_push = F.col("mode") == "push"
    active = F.col("active") if "active" in assignments.columns else F.lit(True)

    changed = F.col("current_mode").isNotNull() & (F.col("mode") != F.col("current_mode"))
    return (
        assignments.groupBy("strategy", "consumer_id")
        .agg(
            F.first("theta").alias("theta"),
            F.sum(F.when(F.col("mode") == "pull", 1).otherwise(0)).alias("n_pull"),
            F.sum(F.when(is_push, 1).otherwise(0)).alias("n_push"),
            F.sum(F.when(F.col("mode") == "view", 1).otherwise(0)).alias("n_view_edges"),
            # a set, not count_distinct: a distinct aggregate makes Spark expand every row
            (
                F.size(F.collect_set(F.when(F.col("mode") == "view", F.col("source_id"))))
                if views
                else F.lit(0)
            ).alias("n_views_read"),
            exact_sum(F.when(is_push, F.col("phi")).otherwise(0.0)).alias("push_phi"),
            F.sum(F.when(changed, 1).otherwise(0)).alias("mode_changes"),
            F.min(F.coalesce(active, F.lit(True)).cast("int")).alias("active"),
        )
        .withColumn(
            "n_sources",
            F.col("n_pull") + F.when(F.col("n_push") > 0, 1).otherwise(0) + F.col("n_views_read"),
        )
    )


SOURCE_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("0-1", 0, 1),
    ("2", 2, 2),
    ("3", 3, 3),
    ("4", 4, 4),
    ("5-8", 5, 8),
    ("9-16", 9, 16),
    ("17-32", 17, 32),
    ("33-64", 33, 64),
    ("65+", 65, None),
)
"""Buckets of sources read per feed view (label, lowest, highest) of ``sources_hist``."""


def weighted_percentiles(hist: DataFrame, qs: Sequence[float], *aggs: Column) -> DataFrame:
    """Per strategy, the weighted percentiles of ``n_sources`` (``sources_p<q>``),
    ``sources_hist``: the weighted share of feed views in each of :data:`SOURCE_BUCKETS` (an
    array in bucket order; the latency distribution of the reports), and ``aggs``.

    ``hist``: one row per (strategy, n_sources) with the weight ``w`` of the feed views that
    read n_sources sources, and any columns ``aggs`` aggregate. Consumers are grouped by
    n_sources first, so the window runs over a few rows per strategy, never over consumers,
    and one pass over the consumers gives both the distribution and the totals."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w_cum = (
        Window.partitionBy("strategy")
        .orderBy("n_sources")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    w_all = Window.partitionBy("strategy")
    cdf = hist.withColumn("cum", F.sum("w").over(w_cum) / F.sum("w").over(w_all))
    pct = [
        F.min(F.when(F.col("cum") >= F.lit(q - 1e-12), F.col("n_sources")))
        .cast("double")
        .alias(f"sources_p{round(q * 100)}")
        for q in qs
    ]
    n = F.col("n_sources")

    def share(low: int, high: int | None) -> Column:
        inside = (n >= low) if high is None else n.between(low, high)
        return F.round(F.try_divide(F.sum(F.when(inside, F.col("w"))), F.sum("w")), 6)

    hist_col = F.array(*[F.coalesce(share(lo, hi), F.lit(0.0)) for _, lo, hi in SOURCE_BUCKETS])
    return cdf.groupBy("strategy").agg(*pct, hist_col.alias("sources_hist"), *aggs)


@dataclass(frozen=True)
class CostModel:
    """The prices of the cost model (DESIGN.md; Chen & Zhou Eq. 3-5): ``push`` (H) is the cost
    of writing one event into one materialized view, ``pull`` (L) of reading one source at
    view time."""

    push: float = 3.0
    pull: float = 1.0

    @property
    def threshold(self) -> float:
        """H/L, the push threshold of Feeding Frenzy's Lemmas 1 and 2."""
        return self.push / self.pull


@dataclass(frozen=True)
class LatencyTarget:
    """A share ``quantile`` of feed views reads at most ``bound`` ``metric`` (sources or
    pulls); see ``jobs.selection.latency``."""

    metric: str = "sources"
    bound: int = 2
    quantile: float = 0.95


def plan_costs(
    assignments: DataFrame,
    view_members: DataFrame,
    model: CostModel,
    strategies: Sequence[str],
    target: LatencyTarget | None = None,
) -> DataFrame:
    """One row per strategy in ``strategies``: maintenance, evaluation and total cost, edge
    counts, latency percentiles (null when there are no consumers), the share of feed views
    within the latency target and whether the target holds, the share of feed views that
    read any pulled producer, and the consumers left without a materialized feed as inactive.

    ``view_members``: strategy, view_id, producer_id, phi (shared views only)."""
    target = target or LatencyTarget()
    from pyspark.sql import functions as F

    H, L = float(model.push), float(model.pull)
    per_c = sources_per_consumer(assignments, any(s in SHARED_VIEW_STRATEGIES for s in strategies))
    consumer_side = _consumer_side(per_c, H, L, target)
    view_side = view_members.groupBy("strategy").agg(
        (exact_sum(F.col("phi")) * F.lit(H)).alias("view_maintenance"),
        F.count_distinct("view_id").alias("shared_views"),
    )
    r = F.lit(COST_DECIMALS)
    names = assignments.sparkSession.range(1).select(
        F.explode(F.array(*(F.lit(s) for s in strategies))).alias("strategy")
    )
    out = (
        names.join(consumer_side, "strategy", "left")
        .join(view_side, "strategy", "left")
        .select("strategy", *_cost_columns(H, L, target.quantile))
    )
    return out.withColumn(
        "total_cost", F.round(F.col("maintenance_cost") + F.col("evaluation_cost"), r)
    )


def _consumer_side(per_c: DataFrame, H: float, L: float, target: LatencyTarget) -> DataFrame:
    """Per strategy, from :func:`sources_per_consumer`'s rows: the consumers' costs (Eq. 3,
    Eq. 4 for personal feeds), edge counts, the weights within the latency target and of
    feed views that pull, and the latency percentiles (:func:`weighted_percentiles`)."""
    from pyspark.sql import functions as F

    latency_now = F.col("n_pull") if target.metric == "pulls" else F.col("n_sources")
    ev = F.when(F.col("n_sources") > 1, F.col("theta") * F.lit(L) * F.col("n_sources")).otherwise(
        0.0
    )
    # one pass over the consumers: summed per (strategy, n_sources), then per strategy
    sums = {  # exact partial sums, added up per strategy below
        "feed_maintenance": F.col("push_phi") * F.lit(H),
        "evaluation_cost": ev,
        "_w": F.col("theta"),
        "_w_ok": F.when(latency_now <= target.bound, F.col("theta")).otherwise(0.0),
        "_w_pull": F.when(F.col("n_pull") > 0, F.col("theta")).otherwise(0.0),
    }
    counts = {
        "push_edges": F.col("n_push"),
        "pull_edges": F.col("n_pull"),
        "view_edges": F.col("n_view_edges"),
        "personal_feeds": F.when(F.col("n_push") > 0, 1).otherwise(0),
        "consumers": F.lit(1),
        "mode_changes": F.col("mode_changes"),
        "inactive_consumers": 1 - F.col("active"),
    }
    hist = (
        per_c.groupBy("strategy", "n_sources")
        .agg(
            *(exact_partial_sum(c).alias(name) for name, c in sums.items()),
            *(F.sum(c).alias(name) for name, c in counts.items()),
        )
        .withColumn("w", exact_value(F.col("_w")))
    )
    return weighted_percentiles(
        hist,
        (0.50, 0.95, 0.99),
        *(exact_value(exact_resum(F.col(name))).alias(name) for name in sums),
        *(F.sum(name).alias(name) for name in counts),
    )


def _cost_columns(H: float, L: float, quantile: float) -> list[Column | str]:
    """The columns of :func:`plan_costs`' rows but ``strategy`` and ``total_cost``, over the
    consumer and view sides joined (costs rounded to :data:`COST_DECIMALS`, absent sums 0)."""
    from pyspark.sql import functions as F

    r = F.lit(COST_DECIMALS)

    def zero(name: str) -> Column:
        return F.coalesce(F.col(name), F.lit(0))

    return [
        F.round(zero("feed_maintenance") + zero("view_maintenance"), r)
        .cast("double")
        .alias("maintenance_cost"),
        F.round(zero("evaluation_cost"), r).cast("double").alias("evaluation_cost"),
        zero("push_edges").alias("push_edges"),
        zero("pull_edges").alias("pull_edges"),
        zero("view_edges").alias("view_edges"),
        (zero("personal_feeds") + zero("shared_views")).alias("views"),
        zero("consumers").alias("consumers"),
        zero("mode_changes").alias("mode_changes"),
        zero("inactive_consumers").alias("inactive_consumers"),
        F.round(F.try_divide(F.col("_w_ok"), F.col("_w")), r).cast("double").alias("latency_share"),
        F.round(F.try_divide(F.col("_w_pull"), F.col("_w")), r)
        .cast("double")
        .alias("pull_view_share"),
        # met when the share within the bound reaches the quantile (1e-9 for rounding);
        # an empty graph meets any target
        F.coalesce(
            F.try_divide(F.col("_w_ok"), F.col("_w")) >= F.lit(quantile - 1e-9),
            F.lit(True),
        ).alias("latency_met"),
        "sources_p50",
        "sources_p95",
        "sources_p99",
        "sources_hist",
        F.lit(H).alias("push_cost"),
        F.lit(L).alias("pull_cost"),
    ]


def choose(costs: dict[str, float], order: Sequence[str], forced: str | None = None) -> str:
    """The served strategy: ``forced``, else the cheapest (ties within 1e-9 relative go to
    the earlier strategy in ``order``, so reruns choose the same)."""
    if forced:
        return forced
    best = min(costs.values())
    tol = 1e-9 * max(1.0, abs(best))
    return next(s for s in order if s in costs and costs[s] <= best + tol)

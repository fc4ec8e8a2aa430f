"""Latency-constrained MinCost (Feeding Frenzy, Section 3.3) and the inactive-consumer rule.

The latency proxy of a feed view is the number of sources it reads (``sources``: the
consumer's personal feed, its shared views and its pulled producers) or, for targets of the
form "at most X% of feed views need any pull", the number of pulled producers (``pulls``).
A target reads "a share ``q`` of feed views reads at most ``B``" (each consumer weighted by its
view rate theta_c, as the latency percentiles of ``plan_cost`` are).

Both strategies start from MinCost, the FF-PerPair plan (Lemma 1, Theorem 1), and only
shift pull edges to push; a MinCost push edge is never shifted to pull (3.3.1).

* ``ff-latency-pair`` (3.3.1): pulled edges are ranked by theta_c / epsilon_ij, with
  ``epsilon_ij = phi_j (H - L theta_c / phi_j) = H phi_j - L theta_c`` the extra cost of pushing
  the edge, and the top-ranked ones are shifted until the target holds. Lemma 3 makes the
  exact problem a knapsack; like the paper we take the greedy. The ranking is applied as a
  threshold tau on theta_c/epsilon_ij (a prefix of the sorted edges is exactly the edges above
  a threshold), found by :func:`weighted_threshold` without sorting all edges in one place. One
  refinement over the literal prefix: a consumer whose latency would stay above ``B`` even
  after its prefix edges are shifted gains nothing toward the target, so its edges stay pull
  (the shifts the prefix would make for it cost ``epsilon`` and buy no feed view within the
  bound). A consumer is thus shifted iff the edge that brings it within the bound, its
  ``need_c``-th best, ranks above tau, and then exactly its ``need_c`` best edges move.
* ``ff-latency-consumer`` (3.3.2): consumers move as blocks: all pulled edges of a consumer
  are shifted at once, consumers ranked by ``theta_c / epsilon_c`` with ``epsilon_c`` the sum
  of the per-edge epsilon over its pulled producers (the paper's ``epsilon_i``, written for the
  per-pair base plan), until the target holds.

When the target cannot be met (for example ``sources <= 0``), every consumer that can be
brought within the bound is shifted and ``plan_cost.latency_met`` is false.

Inactive consumers (the operational rule of Twitter's and Mastodon's home timelines): a
consumer with no feed view in the last ``inactive_after_days`` days gets no materialized
feed; all its edges are pulled, under every strategy, until it views again.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from jobs.selection.cost import CostModel, LatencyTarget

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

TINY = 1e-12
"""Lower bound of epsilon in ranking keys: an edge whose push is free (epsilon <= 0, e.g. one
kept pull by hysteresis) ranks first."""
BINS = 1024
REL_TOL = 1e-9
"""Weights within this relative distance of the need count as reaching it (float sums)."""
MAX_PASSES = 40


def weighted_threshold(values: DataFrame, need: float) -> float | None:
    """The largest ``tau`` with ``sum(w for rows with key >= tau) >= need``.

    ``values``: columns ``key`` (positive, finite) and ``w`` (>= 0). Returns None when even
    all rows weigh less than ``need``. Exact: each pass aggregates the rows of the current
    key range into ``BINS`` logarithmic bins (a bounded histogram, whatever the number of
    rows), keeps the bin where the cumulative weight from the top crosses ``need`` and
    refines it until it holds a single key value; a handful of passes in practice."""
    from pyspark.sql import functions as F

    total = values.agg(F.sum("w").alias("w"), F.min("key").alias("lo"), F.max("key").alias("hi"))
    row = total.first()
    if row is None or row["w"] is None or row["w"] < need - REL_TOL * max(1.0, need):
        return None
    lo, hi, above = float(row["lo"]), float(row["hi"]), 0.0
    for _ in range(MAX_PASSES):
        if lo >= hi:
            return lo
        llo, span = math.log(lo), math.log(hi) - math.log(lo)
        if span <= 0:
            return lo
        b = F.least(
            F.floor((F.log(F.col("key")) - F.lit(llo)) / F.lit(span) * BINS), F.lit(BINS - 1)
        )
        hist = (
            values.where((F.col("key") >= lo) & (F.col("key") <= hi))
            .groupBy(F.greatest(b, F.lit(0)).alias("b"))
            .agg(F.sum("w").alias("w"), F.min("key").alias("lo"), F.max("key").alias("hi"))
            .collect()  # at most BINS rows
        )
        cum = above
        for r in sorted(hist, key=lambda r: r["b"], reverse=True):
            if cum + r["w"] >= need - REL_TOL * max(1.0, need):
                if r["lo"] == r["hi"] or (r["lo"], r["hi"]) == (lo, hi):
                    return float(r["lo"])
                above, lo, hi = cum, float(r["lo"]), float(r["hi"])
                break
            cum += r["w"]
        else:  # rounding left the crossing below the last bin: take everything
            return lo
    return lo


def consumer_activity(ds_col: Column, days: int) -> Column:
    """True when the consumer viewed its feed in the ``days`` days ending at ds (always true
    when the rule is off)."""
    from pyspark.sql import functions as F

    if days <= 0:
        return F.lit(True)
    cutoff = F.date_sub(ds_col, days - 1)
    return F.coalesce(F.col("last_view_ds") >= cutoff, F.lit(False))


def pull_inactive(assignment: DataFrame) -> DataFrame:
    """Edges of inactive consumers (``active`` false) become pulls."""
    from pyspark.sql import functions as F

    keep = F.col("active")
    return assignment.withColumn(
        "mode", F.when(keep, F.col("mode")).otherwise(F.lit("pull"))
    ).withColumn("source_id", F.when(keep, F.col("source_id")).otherwise(F.col("producer_id")))


def _latency_after(n_pull: Column, has_push: Column, shifted: Column, metric: str) -> Column:
    from pyspark.sql import functions as F

    left = n_pull - shifted
    if metric == "pulls":
        return left
    pushed = F.when(has_push | (shifted > 0), 1).otherwise(0)
    return left + pushed


def _per_consumer(base: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return base.groupBy("consumer_id").agg(
        F.first("theta").alias("theta"),
        F.sum(F.when(F.col("mode") == "pull", 1).otherwise(0)).alias("n_pull"),
        F.max((F.col("mode") == "push").cast("int")).alias("n_push_any"),
        F.first("active").alias("active"),
    )


def _shifted(frame: DataFrame, columns: list[str], strategy: str, push: Column) -> DataFrame:
    """``frame``'s ``columns`` with the ``push`` rows shifted to push."""
    from pyspark.sql import functions as F

    shifted = {
        "strategy": F.lit(strategy),
        "mode": F.when(push, F.lit("push")).otherwise(F.col("mode")),
        "source_id": F.when(push, F.col("consumer_id")).otherwise(F.col("source_id")),
    }
    return frame.select(*[shifted.get(c, F.col(c)).alias(c) for c in columns])


def latency_constrained(
    base: DataFrame,
    strategy: str,
    model: CostModel,
    target: LatencyTarget,
    per_consumer: bool,
) -> DataFrame:
    """``base``: the MinCost (FF-PerPair) assignment with ``active``; returns ``strategy``'s
    assignment (see the module docstring): MinCost shifted to push, consumer by consumer,
    until ``target`` holds, per edge or (``per_consumer``) all of a consumer's pulls at once."""
    from pyspark.sql import functions as F

    H, L = float(model.push), float(model.pull)
    eps = F.lit(H) * F.col("phi") - F.lit(L) * F.col("theta")
    if per_consumer:
        keyed = _keyed_consumers(base, eps, target)
    else:
        keyed = _keyed_edges(base, eps, target)
    keyed = keyed.persist()
    tau = _threshold(keyed, target.quantile)
    # computed once here (one row per shifted consumer, kept on the executors), so the
    # cached ``keyed`` can be released without the plan recomputing it later
    chosen = (
        keyed.where(F.col("can") & ~F.col("ok_now") & (F.col("key") >= F.lit(tau)))
        .select("consumer_id", F.col("need").alias("_need"))
        .localCheckpoint()
    )

    if per_consumer:
        marked = base.join(chosen, "consumer_id", "left")
        push = F.col("_need").isNotNull() & (F.col("mode") == "pull") & F.col("active")
        out = _shifted(marked, base.columns, strategy, push)
    else:
        out = _shifted_edges(base, chosen, strategy, eps)

    keyed.unpersist()
    return out


def _keyed_consumers(base: DataFrame, eps: Column, target: LatencyTarget) -> DataFrame:
    """``ff-latency-consumer``'s consumers (3.3.2): ``consumer_id, theta, active, ok_now``
    (within the bound already), ``can`` (within it once all its pulls move), the rank
    ``key`` theta_c / epsilon_c and the shifts it ``need``s (all its pulls)."""
    from pyspark.sql import functions as F

    metric, bound = target.metric, target.bound
    pulled = base.where((F.col("mode") == "pull") & F.col("active"))
    cons = _per_consumer(base)
    has_push = F.col("n_push_any") > 0
    now = _latency_after(F.col("n_pull"), has_push, F.lit(0), metric)
    # all pulled edges move: the consumer is within the bound afterwards iff 0 pulls (and
    # its single personal feed as source) are
    after_all = _latency_after(F.col("n_pull"), has_push, F.col("n_pull"), metric)
    eps_c = pulled.groupBy("consumer_id").agg(F.sum(eps).alias("eps_c"))
    return cons.join(eps_c, "consumer_id", "left").select(
        "consumer_id",
        "theta",
        "active",
        (now <= bound).alias("ok_now"),
        (F.col("active") & (after_all <= bound)).alias("can"),
        (F.col("theta") / F.greatest(F.col("eps_c"), F.lit(TINY))).alias("key"),
        F.col("n_pull").alias("need"),
    )


def _keyed_edges(base: DataFrame, eps: Column, target: LatencyTarget) -> DataFrame:
    """``ff-latency-pair``'s consumers (3.3.1), with the columns of :func:`_keyed_consumers`:
    ``need`` is the fewest shifts that bring the consumer within the bound and ``key`` the
    rank key theta_c / epsilon_ij of its ``need``-th best pulled edge."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    metric, bound = target.metric, target.bound
    pulled = base.where((F.col("mode") == "pull") & F.col("active"))
    cons = _per_consumer(base)
    has_push = F.col("n_push_any") > 0
    now = _latency_after(F.col("n_pull"), has_push, F.lit(0), metric)
    # need_c: the fewest shifts that bring c within the bound (a first shift to push
    # opens c's personal feed, one source, while removing one pull)
    if metric == "pulls":
        need = F.greatest(F.col("n_pull") - F.lit(bound), F.lit(0))
    else:
        need = F.when(now <= bound, 0).otherwise(F.col("n_pull") + F.lit(1) - F.lit(bound))
    cons = cons.withColumn("need", need.cast("long"))
    rank_w = Window.partitionBy("consumer_id").orderBy(F.col("key").desc(), F.col("producer_id"))
    ranked = pulled.withColumn("key", F.col("theta") / F.greatest(eps, F.lit(TINY))).withColumn(
        "j", F.row_number().over(rank_w)
    )
    at_need = ranked.join(cons.select("consumer_id", "need"), "consumer_id").where(
        F.col("j") == F.col("need")
    )
    return cons.join(at_need.select("consumer_id", "key"), "consumer_id", "left").select(
        "consumer_id",
        "theta",
        "active",
        (now <= bound).alias("ok_now"),
        (
            F.col("active")
            & (F.col("need") <= F.col("n_pull"))
            & F.col("key").isNotNull()
            & (now > bound)
        ).alias("can"),
        "key",
        "need",
    )


def _threshold(keyed: DataFrame, quantile: float) -> float:
    """The rank key from which consumers are shifted so that a share ``quantile`` of feed
    views is within the bound: inf when MinCost already meets it, 0 when it cannot be met
    (everyone who can be brought within the bound is shifted)."""
    from pyspark.sql import functions as F

    sums = keyed.agg(
        F.sum("theta").alias("total"),
        F.sum(F.when(F.col("ok_now"), F.col("theta")).otherwise(0.0)).alias("ok"),
    ).first()
    total = float(sums["total"] or 0.0) if sums else 0.0
    ok = float(sums["ok"] or 0.0) if sums else 0.0
    need_w = quantile * total - ok
    candidates = keyed.where(F.col("can") & ~F.col("ok_now")).select(
        "key", F.col("theta").alias("w")
    )
    if need_w <= 1e-12 * max(1.0, total):
        return math.inf  # MinCost already meets the target
    tau = weighted_threshold(candidates, need_w)
    if tau is None:  # unattainable: shift everyone who can be brought within the bound
        return 0.0
    return tau


def _shifted_edges(base: DataFrame, chosen: DataFrame, strategy: str, eps: Column) -> DataFrame:
    """``base`` with the ``_need`` best pulled edges of each ``chosen`` consumer shifted."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rank_w = Window.partitionBy("consumer_id").orderBy(F.col("_key").desc(), F.col("producer_id"))
    marked = base.join(chosen, "consumer_id", "left").withColumn(
        "_key",
        F.when(
            (F.col("mode") == "pull") & F.col("active"),
            F.col("theta") / F.greatest(eps, F.lit(TINY)),
        ),
    )
    marked = marked.withColumn("_j", F.when(F.col("_key").isNotNull(), F.row_number().over(rank_w)))
    push = F.col("_need").isNotNull() & F.col("_key").isNotNull() & (F.col("_j") <= F.col("_need"))
    return _shifted(marked, base.columns, strategy, push)

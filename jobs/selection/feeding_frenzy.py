"""Feeding Frenzy's decision rules (Silberstein et al., SIGMOD 2010, Section 3).

All rules read ``edges`` (:func:`edge_inputs`): one row per follow edge with ``consumer_id,
producer_id, phi`` (producer events/hour) and ``theta`` (consumer views/hour), and return the
same rows with ``mode`` (push | pull) and ``source_id``.

* :func:`push_all` / :func:`pull_all`: the pure strategies (Figure 4's Push All / Push None).
* :func:`ff_per_pair`: Lemma 1 (per-producer coherency): push iff theta_c / phi_p >= H/L;
  Theorem 1 makes these local decisions globally optimal under Claim 1's cost.
* :func:`ff_consumer`: Lemma 2 (global coherency): push all of c's edges iff
  theta_c / sum_{p in F_c} phi_p >= H/L (Claim 2); Theorem 2 decides per consumer.

Under the Chen & Zhou cost model used to price plans these are baselines, not optima (a
consumer reading a single source pays no evaluation cost), which is why ``auto`` prices
every strategy and serves the cheapest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobs.common.exact import exact_sum

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


CONSUMER_PARTITIONED = {
    # a join on (consumer_id, producer_id) may use inputs partitioned by consumer_id alone
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
    # every shuffle of the plan carries every edge or every consumer: keep the configured
    # partitions (shuffle_partitions, a multiple of the cores) rather than coalescing them to
    # a count that leaves a core idle in the last round
    "spark.sql.adaptive.coalescePartitions.enabled": "false",
}
"""Settings (``jobs.common.spark.scoped_conf``) of a stage that plans with
:func:`edge_inputs`: without them Spark shuffles the consumer-partitioned inputs of the
current plan's join again, by both keys. Measured at ``ff2010 --scale 4`` (docs/tuning.md,
"Consumer-partitioned plans")."""


def edge_inputs(
    follows: DataFrame,
    producer_rates: DataFrame,
    consumer_rates: DataFrame,
    current: DataFrame | None = None,
) -> DataFrame:
    """Follow edges with phi, theta, ratio = theta/phi and ``current_mode``: the edge's mode
    in the plan being served now (``current``: an edge plan; null for new edges or when there
    is none), which the hysteresis of :func:`ff_per_pair` and :func:`ff_consumer` starts from.
    ``active`` comes from ``consumer_rates.active`` when present (true otherwise).

    Row-wise joins only: the per-consumer totals Lemma 2 needs (:func:`consumer_totals`)
    cost a shuffle and are computed by :func:`ff_consumer` alone.

    With a current plan, both sides of its join are shuffled by ``consumer_id`` alone (under
    :data:`CONSUMER_PARTITIONED`), so the edges come out partitioned by consumer and every
    per-consumer step after the join (the costs' per-consumer sums, Lemma 2's window, the
    sources' personal feeds) runs on them without a shuffle of its own."""
    from pyspark.sql import functions as F

    pr = producer_rates.select("producer_id", F.col("events_per_hour").alias("phi"))
    active = F.col("active") if "active" in consumer_rates.columns else F.lit(True)
    cr = consumer_rates.select(
        "consumer_id", F.col("views_per_hour").alias("theta"), active.alias("active")
    )
    follows = follows.select("consumer_id", "producer_id")
    if current is not None:
        follows = follows.repartition("consumer_id")
    edges = follows.join(pr, "producer_id", "left").join(cr, "consumer_id", "left")
    if current is None:
        edges = edges.withColumn("current_mode", F.lit(None).cast("string"))
    else:
        modes = current.select(
            "consumer_id", "producer_id", F.col("mode").alias("current_mode")
        ).repartition("consumer_id")
        edges = edges.join(modes, ["consumer_id", "producer_id"], "left")
    return edges.withColumn("ratio", F.try_divide(F.col("theta"), F.col("phi"))).withColumn(
        "active", F.coalesce(F.col("active"), F.lit(True))
    )


def consumer_totals(edges: DataFrame) -> DataFrame:
    """``edges`` (:func:`edge_inputs`) with Lemma 2's inputs: ``phi_sum``, the sum of phi over
    the consumer's producers, and ``consumer_pushed``: true when all of the consumer's current
    edges are pushed, false when none is, null otherwise."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_consumer = Window.partitionBy("consumer_id")
    any_push = F.max((F.col("current_mode") == "push").cast("int")).over(by_consumer)
    any_other = F.max(
        F.col("current_mode").isNotNull().cast("int")
        * (F.col("current_mode") != "push").cast("int")
    ).over(by_consumer)
    pushed = F.when((any_push == 1) & (any_other == 0), True).when(
        (any_push == 0) & (any_other == 1), False
    )
    return edges.withColumn(  # summed exactly (see exact_sum): the same decision on every rerun
        "phi_sum", exact_sum(F.col("phi"), over=by_consumer)
    ).withColumn("consumer_pushed", pushed)


def with_hysteresis(
    value: Column, bound: Column, pushed_now: Column, threshold: float, margin: float
) -> Column:
    """Push iff ``value >= threshold * bound``, except that what is pushed now stays pushed
    down to ``threshold/(1+margin)`` and what is pulled now needs ``threshold*(1+margin)``
    (Feeding Frenzy 4.3: change an edge only when its decision really changes). A null
    ``pushed_now`` (no current mode) takes the plain rule."""
    from pyspark.sql import functions as F

    up, down = threshold * (1 + margin), threshold / (1 + margin)
    return (
        F.when(pushed_now.isNull(), value >= F.lit(threshold) * bound)
        .when(pushed_now, value >= F.lit(down) * bound)
        .otherwise(value >= F.lit(up) * bound)
    )


ASSIGNMENT_COLUMNS = (
    "strategy",
    "consumer_id",
    "producer_id",
    "mode",
    "source_id",
    "phi",
    "theta",
    "ratio",
    "current_mode",
    "active",
)
"""The columns of a strategy's assignment of the edges."""


def _with_mode(edges: DataFrame, strategy: str, push: Column) -> DataFrame:
    from pyspark.sql import functions as F

    source = F.when(push, F.col("consumer_id")).otherwise(F.col("producer_id"))
    mode = F.when(push, F.lit("push")).otherwise(F.lit("pull"))
    return _select(edges.withColumn("mode", mode).withColumn("source_id", source), strategy)


def _select(edges: DataFrame, strategy: str) -> DataFrame:
    from pyspark.sql import functions as F

    return edges.select(
        *(F.lit(strategy).alias(c) if c == "strategy" else c for c in ASSIGNMENT_COLUMNS)
    )


def with_assignment(edges: DataFrame, strategy: str, chosen: DataFrame) -> DataFrame:
    """``edges`` with the mode and source of ``chosen`` (consumer_id, producer_id, mode,
    source_id; one row per edge), in the columns of every other strategy's assignment."""
    return _select(edges.join(chosen, ["consumer_id", "producer_id"]), strategy)


def push_all(edges: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return _with_mode(edges, "push-all", F.lit(True))


def pull_all(edges: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return _with_mode(edges, "pull-all", F.lit(False))


def ff_per_pair(edges: DataFrame, threshold: float, margin: float = 0.0) -> DataFrame:
    """Lemma 1: push iff theta_c / phi_p >= H/L (with hysteresis ``margin`` around H/L for
    edges that have a mode today)."""
    from pyspark.sql import functions as F

    current = F.when(F.col("current_mode").isin("push", "pull"), F.col("current_mode") == "push")
    push = with_hysteresis(F.col("theta"), F.col("phi"), current, threshold, margin)
    return _with_mode(edges, "ff-per-pair", push)


def ff_consumer(edges: DataFrame, threshold: float, margin: float = 0.0) -> DataFrame:
    """Lemma 2 / Theorem 2: push all of c's edges iff theta_c / sum phi >= H/L (with
    hysteresis for consumers whose edges are all pushed or all pulled today)."""
    from pyspark.sql import functions as F

    push = with_hysteresis(
        F.col("theta"), F.col("phi_sum"), F.col("consumer_pushed"), threshold, margin
    )
    return _with_mode(consumer_totals(edges), "ff-consumer", push)

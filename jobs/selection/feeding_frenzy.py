"""Feeding Frenzy's decision rules (Silberstein et al., SIGMOD 2010, Section 3).

All rules read ``edges``: one row per follow edge with ``consumer_id, producer_id, phi``
(producer events/hour), ``theta`` (consumer views/hour) and ``phi_sum`` (sum of phi over the
consumer's producers), and return the same rows with ``mode`` (push | pull) and ``source_id``.

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

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def edge_inputs(
    follows: DataFrame, producer_rates: DataFrame, consumer_rates: DataFrame
) -> DataFrame:
    """Follow edges with phi, theta, phi_sum and ratio = theta/phi."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pr = producer_rates.select("producer_id", F.col("events_per_hour").alias("phi"))
    cr = consumer_rates.select("consumer_id", F.col("views_per_hour").alias("theta"))
    edges = (
        follows.select("consumer_id", "producer_id")
        .join(pr, "producer_id", "left")
        .join(cr, "consumer_id", "left")
    )
    return edges.withColumn(
        "phi_sum", F.sum("phi").over(Window.partitionBy("consumer_id"))
    ).withColumn("ratio", F.try_divide(F.col("theta"), F.col("phi")))


def _with_mode(edges: DataFrame, strategy: str, push: Column) -> DataFrame:
    from pyspark.sql import functions as F

    mode = F.when(push, F.lit("push")).otherwise(F.lit("pull"))
    return edges.select(
        F.lit(strategy).alias("strategy"),
        "consumer_id",
        "producer_id",
        mode.alias("mode"),
        F.when(push, F.col("consumer_id")).otherwise(F.col("producer_id")).alias("source_id"),
        "phi",
        "theta",
        "ratio",
    )


def push_all(edges: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return _with_mode(edges, "push-all", F.lit(True))


def pull_all(edges: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return _with_mode(edges, "pull-all", F.lit(False))


def ff_per_pair(edges: DataFrame, threshold: float) -> DataFrame:
    """Lemma 1: push iff theta_c / phi_p >= H/L."""
    from pyspark.sql import functions as F

    return _with_mode(edges, "ff-per-pair", F.col("theta") >= F.lit(threshold) * F.col("phi"))


def ff_consumer(edges: DataFrame, threshold: float) -> DataFrame:
    """Lemma 2 / Theorem 2: push all of c's edges iff theta_c / sum phi >= H/L."""
    from pyspark.sql import functions as F

    return _with_mode(edges, "ff-consumer", F.col("theta") >= F.lit(threshold) * F.col("phi_sum"))

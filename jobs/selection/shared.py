"""Distributed building blocks of shared-view selection (Chen & Zhou, Section IV) in Spark.

The selection itself (``jobs.selection.views``) is sequential; these functions cut the
problem into independent pieces without bringing anything that grows with the graph to the
driver:

* :func:`candidate_sets`: Algorithm 1's candidate feed sets (PushPrefer / PullPrefer per
  user, or whole follow sets), identical sets merged, as sorted arrays with a stable id.
* :func:`view_users`: the users of each candidate view, i.e. the users whose follow set
  contains it: a set-containment join. Each view is joined only on its least-followed
  producer (the access-predicate idea: the rarest element bounds the candidates), and the
  remaining producers are verified by counting matched edges.
* :func:`components`: connected components of the user-view membership graph by min-label
  propagation (one join and aggregation per round, rounds bounded by the graph's diameter).
  Views with no shared user and no subset relation do not interact (Section IV.E), and a
  view and its subsets always share the view's users, so each component can be planned
  alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

MAX_ROUNDS = 64


def view_id(feeds: Column) -> Column:
    """A stable id for a feed set: ``v`` and the first 16 hex digits of the SHA-1 of its
    sorted producer ids (joined by a separator that cannot appear in a Parquet string id
    without being escaped)."""
    from pyspark.sql import functions as F

    return F.concat(
        F.lit("v"), F.substring(F.sha1(F.concat_ws("\u001f", F.array_sort(feeds))), 1, 16)
    )


def candidate_sets(edges: DataFrame, push_cost: float, pull_cost: float, full: bool) -> DataFrame:
    """``view_id, feeds (sorted array), size, query_freq``: Algorithm 1 over ``edges``
    (consumer_id, producer_id, phi, theta; active consumers only). Sets of one producer are
    left out: its native view serves them."""
    from pyspark.sql import functions as F

    if full:
        group = F.lit("all")
    else:
        prefer = F.col("theta") * F.lit(pull_cost) >= F.col("phi") * F.lit(push_cost)
        group = F.when(prefer, F.lit("push")).otherwise(F.lit("pull"))
    per_user = edges.groupBy("consumer_id", group.alias("g")).agg(
        F.array_sort(F.collect_list("producer_id")).alias("feeds"),
        F.first("theta").alias("theta"),
    )
    merged = (
        per_user.where(F.size("feeds") > 1).groupBy("feeds").agg(F.sum("theta").alias("query_freq"))
    )
    return merged.select(
        view_id(F.col("feeds")).alias("view_id"),
        "feeds",
        F.size("feeds").alias("size"),
        "query_freq",
    )


def view_users(candidates: DataFrame, edges: DataFrame) -> DataFrame:
    """``view_id, consumer_id``: every user whose follow set contains the view."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    fan_out = edges.groupBy("producer_id").agg(F.count("*").alias("fan_out"))
    members = candidates.select("view_id", "size", F.explode("feeds").alias("producer_id"))
    rarest = Window.partitionBy("view_id").orderBy("fan_out", "producer_id")
    access = (
        members.join(fan_out, "producer_id")
        .withColumn("_r", F.row_number().over(rarest))
        .where(F.col("_r") == 1)
        .select("view_id", "size", "producer_id")
    )
    follows = edges.select("consumer_id", "producer_id")
    pairs = access.join(follows, "producer_id").select("view_id", "size", "consumer_id")
    matched = (
        pairs.join(members.select("view_id", "producer_id"), "view_id")
        .join(follows, ["consumer_id", "producer_id"], "left_semi")
        .groupBy("view_id", "consumer_id")
        .agg(F.count("*").alias("n"), F.first("size").alias("size"))
    )
    return matched.where(F.col("n") == F.col("size")).select("view_id", "consumer_id")


def components(memberships: DataFrame) -> DataFrame:
    """``consumer_id, component``: the smallest consumer id reachable through shared views.

    Consumers without any view are not listed (each is a component of its own)."""
    from pyspark.sql import functions as F

    m = memberships.select("view_id", "consumer_id").distinct().persist()
    label = m.select("consumer_id").distinct().withColumn("component", F.col("consumer_id"))
    for _ in range(MAX_ROUNDS):
        per_view = (
            m.join(label, "consumer_id").groupBy("view_id").agg(F.min("component").alias("vc"))
        )
        nxt = (
            m.join(per_view, "view_id")
            .groupBy("consumer_id")
            .agg(F.min("vc").alias("component"))
            .localCheckpoint()
        )
        changed = nxt.join(label.withColumnRenamed("component", "old"), "consumer_id").where(
            F.col("component") != F.col("old")
        )
        label = nxt
        if changed.isEmpty():
            break
    m.unpersist()
    return label

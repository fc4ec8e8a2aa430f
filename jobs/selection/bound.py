"""A certified lower bound on the modeled cost of every plan of a day, computed in Spark:
the plan stage's optimality certificate (``plan/plan_cost``'s ``lower_bound`` and ``gap``).

It is :func:`jobs.selection.views.lower_bound` (Chen & Zhou's cost model, Section III.C,
Eq. 3-5; docs/shared-views.md "How far from the best plan"), which needs, for a consumer
``u`` and each feed ``f`` it follows, the overlaps ``|F_u & F_w|`` with ``f``'s other
followers ``w``. Those come from the pairs of consumers that share a feed: ``sum_f d_f^2``
rows for feeds of ``d_f`` followers, too many on a graph with popular producers. So the
overlaps are counted exactly only through the *small* feeds, the feeds of at most ``D``
followers, ``D`` the largest that keeps ``sum d_f^2`` over them within a budget of pairs;
through the other (*big*) feeds they are bounded from above. The bound stays valid, because
every term of :func:`views.lower_bound` falls (or stays) when an overlap, or the number of
consumers whose follow set contains ``F_u``, is replaced by an upper bound on it:

* a pair's overlap is at most its small overlap plus ``min(B_u, B_w)`` (``B``: big feeds
  followed), and at most ``n_u`` and ``n_w`` (follow counts);
* for a big feed ``f`` the other followers are not listed: each overlap is at most
  ``c_u = min(n_u, B_u + max_w small_overlap(u, w))``, and at most ``d_f`` consumers read a
  view holding ``f``, so ``u`` pays for ``f`` at least ``min(theta_u L,
  H phi_f / d_f + theta_u L / c_u)`` (Eq. 4's maintenance split among at most ``d_f``
  readers, Eq. 3's evaluation among at most ``c_u`` feeds);
* a consumer whose follow set contains ``F_u`` shares all of ``u``'s small feeds and follows
  at least as many feeds and as many big ones; with no small feed, at most ``d_f - 1`` others
  follow each of ``u``'s feeds.

With ``D`` at or above the largest follower count there are no big feeds and the result is
:func:`views.lower_bound` itself (``tests/unit/test_views.py`` checks it against the
sequential one). Inactive consumers pull every feed under every strategy
(``feeding_frenzy.edge_inputs``): they read no view, and their evaluation is added as it is.

A small day (at most :data:`DRIVER_LIMIT`'s edges and pairs, every overlap exact) is bounded
on the driver by the sequential :func:`views.edges_lower_bound`, the same bound: the Spark
computation is a query of about forty shuffle stages, some 7 s however few the edges, while
the sequential one takes about a second at the limit (docs/shared-views.md "The certificate
in every plan").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.common.exact import exact_sum

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from jobs.selection.cost import CostModel

KIND_EXACT = "overlap"
"""The bound's name in ``plan_cost.bound`` when every overlap was counted exactly (no feed
above the budget's follower count): :func:`views.lower_bound`."""
KIND_CAPPED = "overlap-capped"
"""... when the overlaps through feeds above ``max_followers`` were bounded from above."""


@dataclass(frozen=True)
class DriverLimit:
    """The largest day bounded on the driver: follow ``edges`` (active or not) and ordered
    ``pairs`` of active consumers sharing a producer (``sum d (d - 1)``)."""

    edges: int
    pairs: int


DRIVER_LIMIT = DriverLimit(edges=200_000, pairs=2_000_000)
"""About a second of the sequential bound on 2 cores (100,000 edges and 1.2M pairs: 0.9 s),
a few MB on the driver."""


@dataclass(frozen=True)
class Certificate:
    """The day's bound and how it was computed: ``kind`` (:data:`KIND_EXACT` or
    :data:`KIND_CAPPED`), ``max_followers`` (``D``: feeds with more active followers are
    big; None when no feed is), ``pairs`` (consumer pairs listed through small feeds),
    ``where`` (``driver`` or ``spark``)."""

    cost: float
    kind: str
    max_followers: int | None
    pairs: int
    where: str = "spark"


def pair_cap(degree_counts: list[tuple[int, int]], budget: int) -> int:
    """The largest follower count ``D`` such that listing every pair of followers of the
    feeds with at most ``D`` followers stays within ``budget`` ordered pairs
    (``sum d (d - 1)``); ``degree_counts``: (followers, feeds with that many)."""
    total, cap = 0, 1
    for d, n in sorted(degree_counts):
        total += d * (d - 1) * n
        if total > budget:
            break
        cap = d
    return cap


def lower_bound(
    edges: DataFrame,
    model: CostModel,
    pair_budget: int,
    driver_limit: DriverLimit | None = DRIVER_LIMIT,
) -> Certificate:
    """The bound over the follow edges ``edges`` (``feeding_frenzy.edge_inputs``:
    consumer_id, producer_id, theta, phi, active), listing at most ``pair_budget`` pairs of
    consumers that share a feed. The degree histogram (one row per distinct follower count
    and activity) and the result reach the driver, and the edges themselves only within
    ``driver_limit`` (None: never); nothing that grows with users or edges does."""
    H, L = float(model.push), float(model.pull)
    counts = _degree_counts(edges)
    hist = [(x, n) for active, x, n in counts if active]
    biggest = max((x for x, _ in hist), default=0)
    cap = pair_cap(hist, pair_budget)
    n_pairs = sum(x * (x - 1) * n for x, n in hist if x <= cap)
    n_edges = sum(x * n for _, x, n in counts)
    exact = cap >= biggest
    if (
        exact
        and driver_limit is not None
        and n_edges <= driver_limit.edges
        and n_pairs <= driver_limit.pairs
    ):
        from jobs.selection.views import edges_lower_bound

        columns = ["consumer_id", "producer_id", "theta", "phi", "active"]
        cost = edges_lower_bound(edges.select(*columns).toPandas(), H, L)
        return Certificate(cost, KIND_EXACT, None, n_pairs, "driver")
    cost = _spark_bound(edges, cap, H, L)
    return Certificate(cost, KIND_EXACT if exact else KIND_CAPPED, None if exact else cap, n_pairs)


def _degree_counts(edges: DataFrame) -> list[tuple[bool, int, int]]:
    """The degree histogram: (active, follower count ``d``, feeds with ``d`` such followers)."""
    from pyspark.sql import functions as F

    return [
        (bool(r["active"]), int(r["d"]), int(r["n"]))
        for r in edges.groupBy("active", "producer_id")
        .agg(F.count("*").alias("d"))
        .groupBy("active", "d")
        .agg(F.count("*").alias("n"))
        .collect()
    ]


def _spark_bound(edges: DataFrame, cap: int, H: float, L: float) -> float:
    """The bound computed in Spark, overlaps through feeds of more than ``cap`` active
    followers bounded from above (see the module docstring)."""
    fixed = _idle_cost(edges, L)
    users, eu = _active_edges(edges, cap)
    triples = _sharing_triples(eu)
    mine = _consumer_terms(users, triples, H, L)
    total = _total_cost(_per_feed(eu, mine, _overlap_sizes(triples), H), H)
    row = total.crossJoin(fixed.withColumnRenamed("c", "idle")).first()
    for kept in (users, eu, triples):
        kept.unpersist()
    assert row is not None
    return float(row["c"] or 0.0) + float(row["idle"] or 0.0)


def _idle_cost(edges: DataFrame, L: float) -> DataFrame:
    """One row ``c``: the evaluation of the inactive consumers, which pull every feed."""
    from pyspark.sql import functions as F

    idle = (
        edges.where(~F.col("active"))
        .groupBy("consumer_id")
        .agg(F.count("*").alias("n"), F.max("theta").alias("theta"))
    )
    return idle.where("n > 1").select(exact_sum(F.col("theta") * F.col("n") * L).alias("c"))


def _active_edges(edges: DataFrame, cap: int) -> tuple[DataFrame, DataFrame]:
    """The active consumers ``u`` with their counts (``n`` feeds, ``s`` small, ``b`` big),
    theta, summed phi and fewest followers of a feed; and every active edge ``(u, f)`` with
    its feed's followers ``d``, ``small`` and its consumer's counts; both persisted."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    a = edges.where("active").select(
        F.col("consumer_id").alias("u"), F.col("producer_id").alias("f"), "theta", "phi"
    )
    d = a.groupBy("f").agg(F.count("*").alias("d"))

    e = a.join(d, "f").withColumn("small", F.col("d") <= cap)
    users = (
        e.groupBy("u")
        .agg(
            F.count("*").alias("n"),
            F.sum(F.col("small").cast("int")).alias("s"),
            F.first("theta").alias("theta"),
            exact_sum(F.col("phi")).alias("phi_sum"),
            F.min("d").alias("d_min"),
        )
        .withColumn("b", F.col("n") - F.col("s"))
        # kept: the edges below and the consumers' terms read it (one row per consumer)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    # every edge with its consumer's counts, kept: the pairs and the feeds' prices read it
    eu = e.join(users, "u").persist(StorageLevel.MEMORY_AND_DISK)
    return users, eu


def _sharing_triples(eu: DataFrame) -> DataFrame:
    """Every consumer ``u``, small feed ``f`` it follows and other follower ``w`` of ``f``,
    with the pair's count ``small_ov`` of shared small feeds, the overlap's upper bound
    ``ov`` and whether ``w`` may contain ``F_u``; partitioned by ``u`` and persisted.

    The triples are the ``sum d (d - 1)`` rows the pair budget counts. Partitioned by ``u``
    once, the pair counts are a window over ``(u, w)`` and the later per-(u, f) and per-u
    aggregates need no shuffle of their own: grouping the pairs by ``(u, w)`` first, then
    exploding their feeds and grouping again by ``(u, f)``, shuffled every triple twice."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    small = eu.where("small").select("u", "f", "n", "b", "s")
    other = small.select(
        F.col("u").alias("w"), "f", F.col("n").alias("n_w"), F.col("b").alias("b_w")
    )
    small_ov = F.count(F.lit(1)).over(Window.partitionBy("u", "w"))
    return (
        small.join(other, "f")
        .where("u != w")
        .repartition("u")
        .withColumn("small_ov", small_ov)
        .select(
            "u",
            "f",
            "small_ov",
            "s",
            F.least(F.col("small_ov") + F.least("b", "b_w"), F.col("n"), F.col("n_w")).alias("ov"),
            # w may contain F_u: it shares all of u's small feeds, and as many feeds of both kinds
            (
                (F.col("small_ov") == F.col("s"))
                & (F.col("n_w") >= F.col("n"))
                & (F.col("b_w") >= F.col("b"))
            ).alias("may_contain"),
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )


def _consumer_terms(users: DataFrame, triples: DataFrame, H: float, L: float) -> DataFrame:
    """Per consumer of at least two feeds: its ``read`` price, its feeds as ``one_view``, the
    bound ``c`` on its overlaps and on the consumers ``containing`` its follow set. A pair
    that may contain ``F_u`` shares all of ``u``'s ``s`` small feeds, so it is ``s`` of
    ``u``'s triples."""
    from pyspark.sql import functions as F

    per_user = triples.groupBy("u").agg(
        F.max("small_ov").alias("max_small"),
        (F.sum(F.col("may_contain").cast("long")) / F.first("s"))
        .cast("long")
        .alias("containing_small"),
    )
    return (
        users.where("n >= 2")
        .join(per_user, "u", "left")
        .select(
            "u",
            (F.col("theta") * L).alias("read"),
            (F.lit(H) * F.col("phi_sum")).alias("one_view"),
            F.least(F.col("n"), F.col("b") + F.coalesce("max_small", F.lit(0))).alias("c"),
            F.when(F.col("s") > 0, F.coalesce("containing_small", F.lit(0)))
            .otherwise(F.col("d_min") - 1)
            .alias("containing"),
        )
    )


def _overlap_sizes(triples: DataFrame) -> DataFrame:
    """A small feed's overlaps with its other followers, largest first (``sizes``)."""
    from pyspark.sql import functions as F

    return triples.groupBy("u", "f").agg(
        F.sort_array(F.collect_list("ov"), asc=False).alias("sizes")
    )


def _per_feed(eu: DataFrame, mine: DataFrame, listed: DataFrame, H: float) -> DataFrame:
    """Per edge of a consumer of ``mine``: its terms and the ``best`` price of its feed."""
    from pyspark.sql import functions as F

    read, maint = F.col("read"), F.lit(H) * F.col("phi")
    # a small feed read through a view read by k: maint / k + read / (the (k-1)-th largest
    # overlap); a big one: maint / d + read / c
    through_view = F.when(
        F.col("small"),
        F.transform(
            F.coalesce("sizes", F.array().cast("array<long>")),
            lambda x, i: maint / (i + 2) + read / x,
        ),
    ).otherwise(F.array(maint / F.col("d") + read / F.col("c")))
    best = F.array_min(F.concat(F.array(read), through_view))
    return (
        eu.select("u", "f", "phi", "d", "small")
        .join(mine, "u")
        .join(listed, ["u", "f"], "left")
        .select("u", "read", "one_view", "containing", "phi", best.alias("best"))
    )


def _total_cost(per_feed: DataFrame, H: float) -> DataFrame:
    """One row ``c``: the sum over consumers of the least of their three bounds (one view
    shared with the consumers containing its follow set; every feed at its best; a personal
    feed, read once, with every feed pushed or at its best)."""
    from pyspark.sql import functions as F

    return (
        per_feed.groupBy("u")
        .agg(
            F.first("read").alias("read"),
            F.first("one_view").alias("one_view"),
            F.first("containing").alias("containing"),
            exact_sum(F.col("best")).alias("shared"),
            exact_sum(F.least(F.col("best"), F.lit(H) * F.col("phi"))).alias("personal_feeds"),
        )
        .select(
            F.least(
                F.col("one_view") / (1 + F.col("containing")),
                F.col("shared"),
                F.col("read") + F.col("personal_feeds"),
            ).alias("cost")
        )
        .agg(exact_sum(F.col("cost")).alias("c"))
    )

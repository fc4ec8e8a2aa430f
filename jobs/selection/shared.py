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
* :func:`parts`: components bounded to about ``view_part_users`` users (the documented
  approximation of docs/shared-views.md), packed into groups.
* :func:`select_views`: the whole strategy: the sequential selection per part with
  ``applyInPandas``, FF-PerPair's plan where it is cheaper, every edge assigned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

MAX_ROUNDS = 64
ROUND_PAIRS = 4
""":func:`view_users`' first round verifies about this many candidate pairs per view a user
keeps; each later round doubles it."""


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


def view_users(
    candidates: DataFrame, edges: DataFrame, per_user: int, round_pairs: int | None = None
) -> DataFrame:
    """``view_id, consumer_id``: every user whose follow set contains the view, each user in
    at most ``per_user`` views (its largest, ties by view id).

    Each view meets only the followers of its least-followed producer (its access
    predicate: every user of the view follows that producer, and it has the fewest
    followers) that follow at least as many producers as the view holds; each such pair is
    verified by counting the view's producers among the user's follow edges. Everything
    stays in rows of ids (no follow set is carried as an array), so a user who follows tens of
    thousands of producers costs rows that spill, not one oversized record.

    Verification, one row per pair and view producer, is the costly part, and most pairs
    belong to the few users who follow thousands of producers and so meet thousands of
    candidate views, of which they keep ``per_user``. It therefore goes in rounds, in the
    order of that cap, largest views first. Round 0 verifies each user's pairs down to the
    view size with ``round_pairs`` (default ``ROUND_PAIRS * per_user``) larger pairs ahead of
    it; each later round doubles that budget. A user leaves once it holds ``per_user``
    verified views: every pair left unverified is a smaller view, which could not enter its
    top ``per_user``. The result is exact, and a user's verification is bounded by about
    twice the budget of the round that completed it instead of by all its pairs."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    follows = edges.select("consumer_id", "producer_id").persist(StorageLevel.MEMORY_AND_DISK)
    fan_out = follows.groupBy("producer_id").agg(F.count("*").alias("fan_out"))
    fan_in = follows.groupBy("consumer_id").agg(F.count("*").alias("fan_in"))
    members = candidates.select("view_id", "size", F.explode("feeds").alias("producer_id"))
    rarest = Window.partitionBy("view_id").orderBy("fan_out", "producer_id")
    access = (
        members.join(fan_out, "producer_id")
        .withColumn("_r", F.row_number().over(rarest))
        .where(F.col("_r") == 1)
        .select("view_id", "size", "producer_id")
    )
    pairs = (
        access.join(follows, "producer_id")
        .join(fan_in, "consumer_id")
        .where(F.col("fan_in") >= F.col("size"))
        .select("view_id", "size", "consumer_id")
    )
    # each (user, view size) gets the round that verifies it, from the number of the user's
    # pairs with larger views: rounds grow as sizes fall, so every round is a band of sizes
    budget = round_pairs or ROUND_PAIRS * per_user
    ahead = F.coalesce(
        F.sum("c").over(
            Window.partitionBy("consumer_id")
            .orderBy(F.desc("size"))
            .rowsBetween(Window.unboundedPreceding, -1)
        ),
        F.lit(0),
    )
    band = F.when(ahead < budget, F.lit(0)).otherwise(
        F.floor(F.log2(ahead / F.lit(budget))).cast("int") + 1
    )
    bands = (
        pairs.groupBy("consumer_id", "size")
        .agg(F.count("*").alias("c"))
        .select("consumer_id", "size", band.alias("round"))
        .localCheckpoint()
    )
    last = bands.groupBy("consumer_id").agg(F.max("round").alias("last")).localCheckpoint()
    tagged = pairs.join(bands, ["consumer_id", "size"]).persist(StorageLevel.MEMORY_AND_DISK)
    view_producers = members.select("view_id", "producer_id")

    found: list[DataFrame] = []
    waiting: DataFrame | None = None  # users that need the next round
    for r in range(MAX_ROUNDS):
        batch = tagged.where(F.col("round") == r)
        if waiting is not None:
            batch = batch.join(waiting, "consumer_id", "left_semi")
        found.append(
            batch.join(view_producers, "view_id")
            .join(follows, ["consumer_id", "producer_id"], "left_semi")
            .groupBy("view_id", "consumer_id")
            .agg(F.count("*").alias("n"), F.first("size").alias("size"))
            .where(F.col("n") == F.col("size"))
            .select("view_id", "consumer_id", "size")
            .localCheckpoint()
        )
        held = _union(found).groupBy("consumer_id").agg(F.count("*").alias("held"))
        waiting = (
            last.where(F.col("last") > r)
            .join(held, "consumer_id", "left")
            .where(F.coalesce("held", F.lit(0)) < per_user)
            .select("consumer_id")
            .localCheckpoint()
        )
        if waiting.isEmpty():
            break
    else:
        raise RuntimeError(f"view_users: more than {MAX_ROUNDS} verification rounds")
    tagged.unpersist()
    follows.unpersist()
    largest = Window.partitionBy("consumer_id").orderBy(F.desc("size"), "view_id")
    return (
        _union(found)
        .withColumn("_k", F.row_number().over(largest))
        .where(F.col("_k") <= per_user)
        .select("view_id", "consumer_id")
    )


def _union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


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


PART_ROWS = (
    "kind string, consumer_id string, producer_id string, mode string, source_id string, "
    "cost double, ff_cost double"
)
"""What the per-part planner returns: ``e`` rows (an edge's mode and source), ``m`` rows (a
materialized view's producer: source_id = view id) and one ``p`` row per part (source_id =
part, mode = ``selected`` or ``fallback``, the part's modeled cost and FF-PerPair's)."""


def parts(users: DataFrame, memberships: DataFrame, part_users: int) -> tuple[DataFrame, int]:
    """``consumer_id, part, grp`` for every user in ``users`` and the number of groups.

    A part is a connected component of the user-view graph (:func:`components`; a user in no
    view is a part of its own). A component with more than ``part_users`` users is split:
    first by a MinHash of the user's views (the smallest view id it belongs to, so users
    sharing many views tend to land together), then, where a piece is still more than twice
    the bound, by the user id. Parts are packed into ``grp`` groups of about ``part_users``
    users for ``applyInPandas``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    comp = components(memberships)
    anchor = memberships.groupBy("consumer_id").agg(F.min("view_id").alias("anchor"))
    u = (
        users.select("consumer_id")
        .join(comp, "consumer_id", "left")
        .join(anchor, "consumer_id", "left")
        .withColumn("component", F.coalesce("component", "consumer_id"))
        .withColumn("anchor", F.coalesce("anchor", "consumer_id"))
    )
    bound = F.lit(part_users)
    n = F.count("*").over(Window.partitionBy("component"))
    u = u.withColumn(
        "part",
        F.when(n <= bound, F.col("component")).otherwise(
            F.concat_ws(
                "#",
                "component",
                F.pmod(F.xxhash64("anchor"), F.ceil(n / bound)).cast("string"),
            )
        ),
    )
    m = F.count("*").over(Window.partitionBy("part"))
    u = u.withColumn(
        "part",
        F.when(m <= 2 * bound, F.col("part")).otherwise(
            F.concat_ws(
                "/", "part", F.pmod(F.xxhash64("consumer_id"), F.ceil(m / bound)).cast("string")
            )
        ),
    ).localCheckpoint()
    total = u.count()
    groups = max(1, -(-total // part_users))
    return u.select(
        "consumer_id", "part", F.pmod(F.xxhash64("part"), F.lit(groups)).alias("grp")
    ), groups


def _planner(algorithm: str, push_cost: float, pull_cost: float):  # type: ignore[no-untyped-def]
    """The function ``applyInPandas`` runs per group: every part of the group planned alone
    by :func:`jobs.selection.views.plan_part`."""

    def run(pdf):  # type: ignore[no-untyped-def]
        import pandas as pd

        from jobs.selection import views

        out: list[tuple[str, str | None, str | None, str | None, str, float | None, float | None]]
        out = []
        for part, df in pdf.groupby("part", sort=True):
            theta: dict[str, float] = {}
            follows: dict[str, frozenset[str]] = {}
            phi: dict[str, float] = {}
            ff_push: dict[str, frozenset[str]] = {}
            cands: list[views.Candidate] = []
            for r in df.itertuples(index=False):
                if r.kind == "u":
                    feeds = [str(f) for f in r.feeds]
                    theta[r.id] = float(r.theta)
                    follows[r.id] = frozenset(feeds)
                    phi.update(zip(feeds, (float(x) for x in r.phis), strict=True))
                    ff_push[r.id] = frozenset(f for f, p in zip(feeds, r.push, strict=True) if p)
            for r in df.itertuples(index=False):
                if r.kind == "v":
                    fs = frozenset(str(f) for f in r.feeds)
                    users = tuple(sorted(str(x) for x in r.users))
                    upd = sum(phi[f] for f in fs)
                    cands.append(views.Candidate(fs, users, sum(theta[x] for x in users), upd))
            cands.sort(key=lambda c: (-len(c.feeds), sorted(c.feeds)))
            p = views.Problem(theta, follows, phi, push_cost, pull_cost)
            res = views.plan_part(p, cands, algorithm, ff_push)
            for c, f, mode, src in res.edges:
                out.append(("e", c, f, mode, src, None, None))
            for v in res.views:
                vid = views.view_id(v)
                out.extend(("m", None, f, None, vid, None, None) for f in sorted(v))
            kind = "fallback" if res.fallback else "selected"
            out.append(("p", None, None, kind, str(part), res.cost, res.ff_cost))
        cols = ["kind", "consumer_id", "producer_id", "mode", "source_id", "cost", "ff_cost"]
        return pd.DataFrame(out, columns=cols)

    return run


def select_views(
    edges: DataFrame,
    ff_plan: DataFrame,
    algorithm: str,
    push_cost: float,
    pull_cost: float,
    part_users: int,
    user_views: int,
    timings: dict[str, float] | None = None,
) -> tuple[DataFrame, DataFrame]:
    """A shared-view plan (``algorithm``: a key of ``jobs.selection.views.ALGORITHMS``).

    ``edges``: the plan stage's edge inputs; ``ff_plan``: FF-PerPair's assignment of the same
    edges (consumer_id, producer_id, mode). Returns ``consumer_id, producer_id, mode,
    source_id`` for every edge (inactive consumers and consumers with one followed producer
    read the producers' native views), and the ``p`` rows of the parts (see
    :data:`PART_ROWS`) plus the ``m`` rows, persisted: ``view_id, producer_id`` of every
    materialized view come from ``kind = 'm'``.

    ``timings``, when given, receives the wall seconds of the three eager steps: generating
    the candidate views and finding their users (``memberships``), forming the parts
    (``parts``) and planning them (``planning``)."""

    import time

    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from jobs.selection.views import ALGORITHMS

    full = ALGORITHMS[algorithm][0]
    act = edges.where(F.col("active")).select("consumer_id", "producer_id", "phi", "theta")
    ff = ff_plan.select("consumer_id", "producer_id", (F.col("mode") == "push").alias("push"))
    per_user = (
        act.join(ff, ["consumer_id", "producer_id"], "left")
        .groupBy("consumer_id")
        .agg(
            F.first("theta").alias("theta"),
            F.array_sort(
                F.collect_list(
                    F.struct("producer_id", "phi", F.coalesce("push", F.lit(False)).alias("push"))
                )
            ).alias("_e"),
        )
        .where(F.size("_e") > 1)
        .select(
            "consumer_id",
            "theta",
            F.col("_e.producer_id").alias("feeds"),
            F.col("_e.phi").alias("phis"),
            F.col("_e.push").alias("push"),
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    cands = candidate_sets(act, push_cost, pull_cost, full).persist(StorageLevel.MEMORY_AND_DISK)
    clock = {"t": time.perf_counter()}

    def lap(step: str) -> None:
        now = time.perf_counter()
        if timings is not None:
            timings[step] = round(now - clock["t"], 1)
        clock["t"] = now

    memberships = view_users(cands, act, user_views).localCheckpoint()
    lap("memberships")
    where, groups = parts(per_user, memberships, part_users)
    lap("parts")
    user_rows = per_user.join(where, "consumer_id").select(
        F.lit("u").alias("kind"),
        "part",
        "grp",
        F.col("consumer_id").alias("id"),
        "theta",
        "feeds",
        "phis",
        "push",
    )
    view_rows = (
        memberships.join(where, "consumer_id")
        .groupBy("view_id", "part", "grp")
        .agg(F.collect_list("consumer_id").alias("users"))
        .join(cands.select("view_id", "feeds"), "view_id")
        .select(
            F.lit("v").alias("kind"), "part", "grp", F.col("view_id").alias("id"), "feeds", "users"
        )
    )
    rows = user_rows.unionByName(view_rows, allowMissingColumns=True).repartition(
        min(groups, 4 * edges.sparkSession.sparkContext.defaultParallelism), "grp"
    )
    planned = (
        rows.groupBy("grp")
        .applyInPandas(_planner(algorithm, push_cost, pull_cost), PART_ROWS)
        .localCheckpoint()  # planned once; the inputs can be released
    )
    lap("planning")

    chosen = planned.where(F.col("kind") == "e").select(
        "consumer_id", "producer_id", F.col("mode").alias("_m"), F.col("source_id").alias("_s")
    )
    assigned = (
        edges.select("consumer_id", "producer_id")
        .join(chosen, ["consumer_id", "producer_id"], "left")
        .select(
            "consumer_id",
            "producer_id",
            F.coalesce("_m", F.lit("pull")).alias("mode"),
            F.coalesce("_s", "producer_id").alias("source_id"),
        )
    )
    per_user.unpersist()
    cands.unpersist()
    return assigned, planned.where(F.col("kind").isin("m", "p"))

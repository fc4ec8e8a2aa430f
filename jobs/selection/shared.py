"""Distributed building blocks of shared-view selection (Chen & Zhou, Section IV) in Spark.

The selection itself (``jobs.selection.views``) is sequential; these functions cut the
problem into independent pieces without bringing anything that grows with the graph to the
driver:

* :func:`candidate_sets`: Algorithm 1's candidate feed sets (PushPrefer / PullPrefer per
  user, or whole follow sets), identical sets merged, as sorted arrays with a stable id.
* :func:`view_users`: the users of each candidate view, i.e. the users whose follow set
  contains it: a set-containment join, in ``applyInPandas`` cells of one user bucket and one
  view shard each. A user meets only the views indexed under its followed producers by
  their least-followed producer (the access-predicate idea: the rarest element bounds the
  candidates) and verifies them largest first, until it holds its cap.
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

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.common.config import Settings
from jobs.common.spark import empty_frame, parallelism
from jobs.selection.cost import CostModel
from jobs.selection.part import LP_PAIRS
from jobs.selection.views import Candidate, Problem

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession

MAX_ROUNDS = 64
ROUND_PAIRS = 4
""":func:`view_users`' first round verifies this many candidate views per view a user keeps;
each later round doubles it."""
GROUP_FOLLOWS = 2_000_000
"""About this many follow edges per user bucket of :func:`view_users`."""
SHARD_MEMBERS = 20_000_000
"""About this many view producers (summed view sizes) per view shard of :func:`view_users`."""


def view_id(feeds: Column) -> Column:
    """A stable id for a feed set: ``v`` and the first 16 hex digits of the SHA-1 of its
    sorted producer ids (joined by a separator that cannot appear in a Parquet string id
    without being escaped)."""
    from pyspark.sql import functions as F

    return F.concat(
        F.lit("v"), F.substring(F.sha1(F.concat_ws("\u001f", F.array_sort(feeds))), 1, 16)
    )


def candidate_sets(
    edges: DataFrame, push_cost: float, pull_cost: float, full: bool | str
) -> DataFrame:
    """``view_id, feeds (sorted array), size, query_freq``: Algorithm 1 over ``edges``
    (consumer_id, producer_id, phi, theta; active consumers only); with ``full`` each user's
    whole follow set instead, with ``"union"`` both. Sets of one producer are left out: its
    native view serves them."""
    from pyspark.sql import functions as F

    groups = []
    if full:
        groups.append(F.lit("all"))
    if full is not True:
        prefer = F.col("theta") * F.lit(pull_cost) >= F.col("phi") * F.lit(push_cost)
        groups.append(F.when(prefer, F.lit("push")).otherwise(F.lit("pull")))
    per_user = None
    for group in groups:
        sets = edges.groupBy("consumer_id", group.alias("g")).agg(
            F.array_sort(F.collect_list("producer_id")).alias("feeds"),
            F.first("theta").alias("theta"),
        )
        per_user = sets if per_user is None else per_user.unionByName(sets)
    assert per_user is not None
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
    candidates: DataFrame,
    edges: DataFrame,
    per_user: int,
    round_pairs: int | None = None,
    group_follows: int | None = None,
    shard_members: int | None = None,
) -> DataFrame:
    """``view_id, consumer_id``: every user whose follow set contains the view, each user in
    at most ``per_user`` views (its largest, ties by view id).

    A set-containment join, computed by :func:`_containment` with ``applyInPandas`` over a
    grid of user buckets and view shards. Each bucket's follow edges (about
    ``group_follows``, default :data:`GROUP_FOLLOWS`) meet each shard of the candidate views
    (about ``shard_members`` view producers, default :data:`SHARD_MEMBERS`), so a Python
    worker holds one bucket and one shard, however large the graph. Producer ids travel as
    64-bit hashes, checked to be distinct (a collision would change the result, so another
    seed is tried). With more than one shard, each user's largest views over the shards are
    kept by one window at the end; with one shard, the cells' answers are already final.

    Within a cell, each view is indexed by its access predicate, its producer with the
    fewest followers among the bucket's users: every user of the view follows it. A user
    meets only the views indexed under the producers it follows, at most as large as its
    follow set, and verifies them in the order of the cap, largest first, in rounds
    (``round_pairs`` views first, default ``ROUND_PAIRS * per_user``, then twice as many each
    round) until it holds ``per_user``. Every view left unverified is smaller than the ones it
    holds, so the result is exact, and a user's verification is bounded by the cap rather
    than by the number of candidate views it meets (thousands, for a user who follows
    thousands of producers)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    spark = edges.sparkSession
    follows = edges.select("consumer_id", "producer_id").persist(StorageLevel.MEMORY_AND_DISK)
    seed = _injective_seed(follows.select("producer_id").distinct())
    total = candidates.agg(F.sum("size").alias("m")).first()
    members = int(total["m"] or 0) if total is not None else 0
    n_follows = follows.count()
    shards = max(1, -(-members // (shard_members or SHARD_MEMBERS)))
    buckets = max(parallelism(spark), -(-n_follows // (group_follows or GROUP_FOLLOWS)))

    def hashed(c: Column) -> Column:
        return F.xxhash64(F.lit(seed), c)

    cells = F.explode(F.sequence(F.lit(0), F.lit(buckets - 1)))
    view_side = candidates.select(
        F.pmod(F.xxhash64("view_id"), F.lit(shards)).cast("int").alias("shard"),
        cells.alias("bucket"),
        "view_id",
        "size",
        F.transform("feeds", hashed).alias("feeds"),
    )
    user_side = follows.select(
        F.explode(F.sequence(F.lit(0), F.lit(shards - 1))).alias("shard"),
        F.pmod(F.xxhash64("consumer_id"), F.lit(buckets)).cast("int").alias("bucket"),
        "consumer_id",
        hashed(F.col("producer_id")).alias("p"),
    )
    found = (
        view_side.groupBy("shard", "bucket")
        .cogroup(user_side.groupBy("shard", "bucket"))
        .applyInPandas(
            _containment(per_user, round_pairs or ROUND_PAIRS * per_user),
            "view_id string, consumer_id string, size int",
        )
        .localCheckpoint()
    )
    follows.unpersist()
    if shards == 1:
        return found.select("view_id", "consumer_id")
    from pyspark.sql import Window

    largest = Window.partitionBy("consumer_id").orderBy(F.desc("size"), "view_id")
    return (
        found.withColumn("_k", F.row_number().over(largest))
        .where(F.col("_k") <= per_user)
        .select("view_id", "consumer_id")
    )


def _injective_seed(producers: DataFrame) -> int:
    """A seed under which ``xxhash64(seed, producer_id)`` is one-to-one on ``producers``."""
    from pyspark.sql import functions as F

    for seed in range(42, 42 + 8):
        clash = (
            producers.groupBy(F.xxhash64(F.lit(seed), "producer_id").alias("h"))
            .agg(F.count("*").alias("n"))
            .where(F.col("n") > 1)
        )
        if clash.isEmpty():
            return seed
    raise RuntimeError("view_users: no 64-bit hash seed without collisions among producer ids")


def _containment(per_user: int, first_round: int):  # type: ignore[no-untyped-def]
    """The function ``applyInPandas`` runs per (view shard, user bucket): each user's largest
    ``per_user`` views (ties by view id) among the shard's views its follow set contains.
    See :func:`view_users`."""

    def run(views_pdf, follows_pdf):  # type: ignore[no-untyped-def]
        import numpy as np
        import pandas as pd

        if views_pdf.empty or follows_pdf.empty:
            return _no_memberships()
        # the views in the order of the cap: largest first, ties by view id
        views_pdf = views_pdf.sort_values(["size", "view_id"], ascending=[False, True])
        cell = _cell(views_pdf, follows_pdf["p"].to_numpy(np.int64))
        codes, users = pd.factorize(follows_pdf["consumer_id"], sort=False)
        found = _held_views(cell, codes, len(users), per_user, first_round)
        if found is None:
            return _no_memberships()
        v, u = found
        return pd.DataFrame(
            {
                "view_id": views_pdf["view_id"].to_numpy()[v],
                "consumer_id": np.asarray(users)[u],
                "size": cell.size[v].astype(np.int32),
            }
        )

    return run


def _no_memberships() -> pd.DataFrame:
    """:func:`_containment`'s answer when no user of the cell holds a view."""
    import pandas as pd

    return pd.DataFrame(
        {"view_id": pd.Series(dtype=object), "consumer_id": pd.Series(dtype=object)}
    ).assign(size=pd.Series(dtype="int32"))


@dataclass(frozen=True)
class _Cell:
    """A cell of :func:`_containment`: the producers the bucket's users follow, densely
    numbered (``n_prods``; ``follow_p``: each follow edge's), and the shard's views in the
    order of the cap: their ``size``, the producers of them all end to end (``pos``, each
    view's from ``start``), and the views each producer is the access predicate of
    (``by_access[ptr[p] : ptr[p + 1]]``, view ranks, largest first)."""

    n_prods: int
    follow_p: np.ndarray
    size: np.ndarray
    pos: np.ndarray
    start: np.ndarray
    by_access: np.ndarray
    ptr: np.ndarray


def _cell(views_pdf: pd.DataFrame, follows_p: np.ndarray) -> _Cell:
    """The cell of the views ``views_pdf`` (in the order of the cap) and the bucket's
    followed producers ``follows_p`` (hashed), each view indexed by its access predicate."""
    import numpy as np

    # the producers the bucket's users follow, densely numbered, and their followers
    prods, follow_p = np.unique(follows_p, return_inverse=True)
    fans = np.bincount(follow_p, minlength=len(prods))
    size = views_pdf["size"].to_numpy(np.int64)
    flat = np.concatenate(views_pdf["feeds"].to_numpy()).astype(np.int64)
    pos = np.minimum(np.searchsorted(prods, flat), len(prods) - 1)
    here = prods[pos] == flat
    start = np.concatenate(([0], np.cumsum(size)[:-1]))
    # a view with a producer none of the bucket's users follows has no user here
    keep = np.logical_and.reduceat(here, start)
    # access predicate: the view's producer with the fewest followers in the bucket
    fan = np.where(here, fans[pos], np.iinfo(np.int64).max)
    low = np.minimum.reduceat(fan, start)
    at = np.flatnonzero(fan == np.repeat(low, size))
    seg = np.repeat(np.arange(len(size)), size)[at]
    first = at[np.unique(seg, return_index=True)[1]]
    access = pos[first]
    ranks = np.flatnonzero(keep)  # view ranks, ascending = largest first
    by_access = ranks[np.argsort(access[ranks], kind="stable")]
    ptr = np.concatenate(([0], np.cumsum(np.bincount(access[ranks], minlength=len(prods)))))
    return _Cell(len(prods), follow_p, size, pos, start, by_access, ptr)


def _gather(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Positions ``starts[i] .. starts[i] + lens[i] - 1`` for every ``i``, in order."""
    import numpy as np

    total = int(lens.sum())
    shift = np.repeat(starts - np.cumsum(lens) + lens, lens)
    return shift + np.arange(total)


def _held_views(
    cell: _Cell, codes: np.ndarray, n_users: int, per_user: int, first_round: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The (view rank, user code) pairs of every user's held views, users in code order
    (``codes``: each follow edge's user); None when no user holds any."""
    import numpy as np

    order = np.argsort(codes, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(codes, minlength=n_users))))
    mask = np.zeros(cell.n_prods, dtype=bool)
    out_v: list[np.ndarray] = []
    out_u: list[np.ndarray] = []
    for u in range(n_users):
        s = cell.follow_p[order[bounds[u] : bounds[u + 1]]]
        hit = _verified(cell, s, mask, per_user, first_round)
        if hit is None:
            continue
        out_v.append(hit)
        out_u.append(np.full(len(hit), u))
    if not out_v:
        return None
    return np.concatenate(out_v), np.concatenate(out_u)


def _verified(
    cell: _Cell, s: np.ndarray, mask: np.ndarray, need: int, step: int
) -> np.ndarray | None:
    """The largest ``need`` views (ranks) of the user who follows the producers ``s`` that
    its follow set contains, verified ``step`` candidates first and twice as many each round
    (``mask``: all false, left so); None when it meets no view small enough."""
    import numpy as np

    lo, hi = cell.ptr[s], cell.ptr[s + 1]
    cand = cell.by_access[_gather(lo, hi - lo)]
    cand = cand[cell.size[cand] <= len(s)]
    if len(cand) == 0:
        return None
    cand.sort()
    mask[s] = True
    held: list[np.ndarray] = []
    i = 0
    while need > 0 and i < len(cand):
        chunk = cand[i : i + step]
        i, step = i + step, 2 * step
        ok = np.logical_and.reduceat(
            mask[cell.pos[_gather(cell.start[chunk], cell.size[chunk])]],
            np.concatenate(([0], np.cumsum(cell.size[chunk])[:-1])),
        )
        got = chunk[ok][:need]
        held.append(got)
        need -= len(got)
    mask[s] = False
    return np.concatenate(held)


DRIVER_MEMBERSHIPS = 200_000
"""A user-view graph of at most this many (view, user) memberships has its components found
on the driver (:func:`components_on_driver`, well under a second at this size) instead of by
label propagation in Spark, whose rounds (two shuffles and a checkpoint each, and a check)
cost seconds however small the graph (docs/shared-views.md, "Independent parts")."""


def components(memberships: DataFrame, driver_limit: int | None = DRIVER_MEMBERSHIPS) -> DataFrame:
    """``consumer_id, component``: the smallest consumer id reachable through shared views.

    Consumers without any view are not listed (each is a component of its own). A graph of at
    most ``driver_limit`` memberships is collected and joined on the driver; a larger one
    (or any, with ``None``) by min-label propagation in Spark. Both give the same rows."""
    from pyspark.sql import functions as F

    pairs = memberships.select("view_id", "consumer_id").distinct()
    if driver_limit is not None:
        head = pairs.limit(driver_limit + 1).collect()  # bounded by the limit
        if len(head) <= driver_limit:
            return components_on_driver(memberships.sparkSession, [(v, c) for v, c in head])
    m = pairs.persist()
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


def components_on_driver(spark: SparkSession, pairs: list[tuple[str, str]]) -> DataFrame:
    """:func:`components` of the (view, consumer) ``pairs`` by union-find: the users of each
    view are joined to its first user, and a set's root is always its smallest id (the
    larger root goes under the smaller; Python's and Spark's string orders agree)."""
    import pandas as pd

    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    first: dict[str, str] = {}
    for view, user in pairs:
        parent.setdefault(user, user)
        a, b = find(user), find(first.setdefault(view, user))
        if a != b:
            parent[max(a, b)] = min(a, b)
    frame = pd.DataFrame(
        [(u, find(u)) for u in sorted(parent)], columns=["consumer_id", "component"]
    )
    return spark.createDataFrame(frame, "consumer_id string, component string")


PART_ROWS = (
    "part string, kind string, consumer_id string, producer_id string, mode string, "
    "source_id string, cost double, ff_cost double, theta double, phi double, fp string, "
    "reused boolean"
)
"""What the per-part planner returns, and what the plan stage keeps of it for the next day
(``plan/part_plans``), every row with its ``part``:

* ``e`` rows: an edge's mode and source, with the consumer's ``theta`` and the producer's
  ``phi`` the part was planned with (the reference rates of the band, :func:`_reusable`);
* ``m`` rows: a materialized view's producer (source_id = view id);
* one ``p`` row per part: source_id = part, mode = ``selected``, ``optimal`` (proven optimal:
  ``cz-lp``) or ``fallback``, the part's modeled cost and FF-PerPair's at the reference
  rates, the fingerprint ``fp`` of what it was planned from (:func:`jobs.selection.part.
  fingerprint`), and whether the plan is the previous day's, ``reused``."""


def parts(
    users: DataFrame,
    memberships: DataFrame,
    part_users: int,
    driver_limit: int | None = DRIVER_MEMBERSHIPS,
) -> tuple[DataFrame, int]:
    """``consumer_id, part, grp`` for every user in ``users`` and the number of groups.

    A part is a connected component of the user-view graph (:func:`components`; a user in no
    view is a part of its own). A component with more than ``part_users`` users is split:
    first by a MinHash of the user's views (the smallest view id it belongs to, so users
    sharing many views tend to land together), then, where a piece is still more than twice
    the bound, by the user id. Parts are packed into ``grp`` groups for ``applyInPandas``:
    about ``part_users`` users each, and at least two per core, so that many small parts
    are planned in parallel."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    comp = components(memberships, driver_limit)
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
    groups = max(2 * parallelism(users.sparkSession), -(-total // part_users))
    return u.select(
        "consumer_id", "part", F.pmod(F.xxhash64("part"), F.lit(groups)).alias("grp")
    ), groups


PART_COLUMNS = [c.split()[0] for c in PART_ROWS.split(", ")]


def _planner(algorithm: str, push_cost: float, pull_cost: float, lp_pairs: int, margin: float):  # type: ignore[no-untyped-def]
    """The function ``applyInPandas`` runs per group (a cogroup of the group's planner input
    and the previous day's rows of its parts, :data:`PART_ROWS`): every part of the group
    planned alone by :func:`jobs.selection.part.plan_part`, unless the previous day planned
    a part with the same fingerprint at rates within the band ``margin`` of today's
    (:func:`_reusable`): that part keeps its rows, reference rates included.

    The rows are read column by column into Python lists once per group and each part is a
    range of them: a part of a user or two is planned in well under a millisecond, and
    slicing a pandas frame per part (``groupby``, ``itertuples``) cost four times the
    planning itself (docs/benchmarks.md, "Where a scale-1 day's time goes")."""

    def run(pdf, prev):  # type: ignore[no-untyped-def]
        import numpy as np
        import pandas as pd

        from jobs.selection import part as planning
        from jobs.selection import views

        pdf = pdf.sort_values(["part", "kind"], kind="stable")  # a part's users, then views
        rows = _Rows(*(pdf[c].tolist() for c in _Rows.COLUMNS))
        prev = prev.sort_values("part", kind="stable").reset_index(drop=True)
        before = {k: (a, b) for k, a, b in _runs(prev["part"].to_numpy())}
        heads = prev[prev["kind"] == "p"]
        fps = dict(zip(heads["part"].tolist(), heads["fp"].tolist(), strict=True))
        old = _Previous(*(prev[c].to_numpy() for c in _Previous.COLUMNS))
        out: list[tuple[object, ...]] = []
        kept: list[np.ndarray] = []
        for part, a, b in _runs(pdf["part"].to_numpy()):
            p, cands, ff_push = _part_problem(rows, a, b, push_cost, pull_cost)
            fp = planning.fingerprint(p, cands, ff_push, algorithm, lp_pairs)
            span = before.get(part)
            if span is not None and fps.get(part) == fp and _reusable(old, span, fp, p, margin):
                kept.append(np.arange(*span))
                continue
            res = planning.plan_part(p, cands, algorithm, ff_push, lp_pairs)
            for c, f, mode, src in res.edges:
                out.append(
                    (part, "e", c, f, mode, src, None, None, p.theta[c], p.phi[f], None, None)
                )
            for v in res.views:
                vid = views.view_id(v)
                out.extend(
                    (part, "m", None, f, None, vid, None, None, None, None, None, None)
                    for f in sorted(v)
                )
            kind = "fallback" if res.fallback else "optimal" if res.optimal else "selected"
            head = (kind, str(part), res.cost, res.ff_cost, None, None, fp, False)
            out.append((part, "p", None, None, *head))
        planned = pd.DataFrame(out, columns=PART_COLUMNS)
        if not kept:
            return planned
        carried = prev.iloc[np.concatenate(kept)][PART_COLUMNS]
        carried = carried.assign(reused=carried["kind"] == "p")
        return carried if planned.empty else pd.concat([planned, carried], ignore_index=True)

    return run


@dataclass(frozen=True)
class _Rows:
    """A group's planner input (:func:`_part_rows`), column by column, sorted by part and
    kind: each part is a range of positions, its ``u`` rows first."""

    COLUMNS = ("kind", "id", "theta", "feeds", "phis", "push", "users")
    kind: list[str]
    id: list[str]
    theta: list[float]
    feeds: list[Any]
    phis: list[Any]
    push: list[Any]
    users: list[Any]


@dataclass(frozen=True)
class _Previous:
    """The previous day's rows of a group's parts (:data:`PART_ROWS`), column by column,
    sorted by part."""

    COLUMNS = ("kind", "consumer_id", "producer_id", "theta", "phi", "fp")
    kind: np.ndarray
    consumer_id: np.ndarray
    producer_id: np.ndarray
    theta: np.ndarray
    phi: np.ndarray
    fp: np.ndarray


def _runs(keys: np.ndarray) -> list[tuple[Any, int, int]]:
    """``(key, start, stop)`` of each run of equal ``keys`` (sorted)."""
    import numpy as np

    if len(keys) == 0:
        return []
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    starts = np.concatenate(([0], cuts))
    stops = np.concatenate((cuts, [len(keys)]))
    return [(keys[a], int(a), int(b)) for a, b in zip(starts, stops, strict=True)]


def _part_problem(
    rows: _Rows, a: int, b: int, push_cost: float, pull_cost: float
) -> tuple[Problem, list[Candidate], dict[str, frozenset[str]]]:
    """The part at positions ``a`` to ``b`` of ``rows`` as the sequential core's problem, its
    candidate views (in the order of the cap) and the producers FF-PerPair pushes to each
    user."""
    from jobs.selection import views

    theta: dict[str, float] = {}
    follows: dict[str, frozenset[str]] = {}
    phi: dict[str, float] = {}
    ff_push: dict[str, frozenset[str]] = {}
    cands: list[views.Candidate] = []
    for i in range(a, b):
        if rows.kind[i] == "u":
            u, feeds = rows.id[i], [str(f) for f in rows.feeds[i]]
            theta[u] = float(rows.theta[i])
            follows[u] = frozenset(feeds)
            phi.update(zip(feeds, (float(x) for x in rows.phis[i]), strict=True))
            ff_push[u] = frozenset(f for f, x in zip(feeds, rows.push[i], strict=True) if x)
        else:  # the part's views, after its users
            fs = frozenset(str(f) for f in rows.feeds[i])
            users = tuple(sorted(str(x) for x in rows.users[i]))
            upd = sum(phi[f] for f in fs)
            cands.append(views.Candidate(fs, users, sum(theta[x] for x in users), upd))
    cands.sort(key=lambda c: (-len(c.feeds), sorted(c.feeds)))
    return views.Problem(theta, follows, phi, push_cost, pull_cost), cands, ff_push


def _reusable(old: _Previous, span: tuple[int, int], fp: str, p: Problem, margin: float) -> bool:
    """Whether a part's previous rows (positions ``span`` of ``old``) still plan it: the same
    fingerprint ``fp`` (:func:`jobs.selection.part.fingerprint`: members, follow sets,
    FF-PerPair's pushes, candidate views, prices and planner), and every member's θ and every
    producer's φ within the band of the rates it was planned with
    (:func:`jobs.selection.part.within_band`)."""
    import numpy as np

    from jobs.selection.part import within_band

    a, b = span
    kind = old.kind[a:b]
    head = np.flatnonzero(kind == "p")
    if len(head) != 1 or old.fp[a + head[0]] != fp:
        return False
    e = np.flatnonzero(kind == "e") + a
    nan = float("nan")
    theta = np.array([p.theta.get(c, nan) for c in old.consumer_id[e]], dtype=np.float64)
    phi = np.array([p.phi.get(f, nan) for f in old.producer_id[e]], dtype=np.float64)
    return bool(
        within_band(theta, old.theta[e].astype(np.float64), margin).all()
        and within_band(phi, old.phi[e].astype(np.float64), margin).all()
    )


@dataclass(frozen=True)
class ViewParams:
    """How shared views are planned at scale (docs/shared-views.md): the prices, parts of about
    ``part_users`` users planned independently, each user weighing at most ``user_views``
    candidate views; the parts' components found on the driver up to ``driver_memberships``
    memberships (``None``: always in Spark); ``cz-lp`` solves the LP over every view on parts
    of at most ``lp_pairs`` (user, view) pairs (``jobs.selection.part``); a part keeps the
    previous day's plan while its rates stay within ``margin`` of those it was planned with
    (:func:`select_views`)."""

    model: CostModel
    part_users: int = Settings.view_part_users  # the settings' defaults, one home
    user_views: int = Settings.view_user_views
    lp_pairs: int = LP_PAIRS
    driver_memberships: int | None = DRIVER_MEMBERSHIPS
    margin: float = 0.0


def select_views(
    edges: DataFrame,
    ff_plan: DataFrame,
    algorithm: str,
    params: ViewParams,
    timings: dict[str, float] | None = None,
    previous: DataFrame | None = None,
) -> tuple[DataFrame, DataFrame]:
    """A shared-view plan (``algorithm``: a key of ``jobs.selection.views.ALGORITHMS``).

    ``edges``: the plan stage's edge inputs; ``ff_plan``: FF-PerPair's assignment of the same
    edges (consumer_id, producer_id, mode). Returns ``consumer_id, producer_id, mode,
    source_id`` for every edge (inactive consumers and consumers with one followed producer
    read the producers' native views), and the parts' rows (:data:`PART_ROWS`), kept:
    ``view_id, producer_id`` of every materialized view come from ``kind = 'm'``.

    ``previous``: the previous day's part rows of the same strategy (``plan/part_plans``).
    A part whose fingerprint is there, and whose members' θ and producers' φ are within
    ``params.margin`` of the rates it was planned with, keeps those rows instead of being
    planned again (its ``p`` row says ``reused``); with ``margin = 0`` the result is the
    same as without ``previous``, only sooner (docs/shared-views.md, "From one day to the
    next").

    ``timings``, when given, receives the wall seconds of the three eager steps: generating
    the candidate views and finding their users (``memberships``), forming the parts
    (``parts``) and planning them (``planning``)."""

    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from jobs.selection.views import ALGORITHMS

    full = ALGORITHMS[algorithm][0]
    push_cost, pull_cost = params.model.push, params.model.pull
    act = edges.where(F.col("active")).select("consumer_id", "producer_id", "phi", "theta")
    per_user = _follow_sets(act, ff_plan)
    cands = candidate_sets(act, push_cost, pull_cost, full).persist(StorageLevel.MEMORY_AND_DISK)
    lap = _stopwatch(timings)

    memberships = view_users(cands, act, params.user_views).localCheckpoint()
    lap("memberships")
    where, groups = parts(per_user, memberships, params.part_users, params.driver_memberships)
    lap("parts")
    tasks = min(groups, 4 * parallelism(edges.sparkSession))
    rows = _part_rows(per_user, memberships, cands, where).repartition(tasks, "grp")
    if previous is None:
        previous = empty_frame(edges.sparkSession, PART_ROWS)
    # the previous rows of a part go where the part goes today
    before = previous.select(
        *PART_COLUMNS, F.pmod(F.xxhash64("part"), F.lit(groups)).alias("grp")
    ).repartition(tasks, "grp")
    planned = (
        rows.groupBy("grp")
        .cogroup(before.groupBy("grp"))
        .applyInPandas(
            _planner(algorithm, push_cost, pull_cost, params.lp_pairs, params.margin), PART_ROWS
        )
        .localCheckpoint()  # planned once; the inputs can be released
    )
    lap("planning")

    assigned = _assigned(edges, planned)
    per_user.unpersist()
    cands.unpersist()
    return assigned, planned


def _follow_sets(act: DataFrame, ff_plan: DataFrame) -> DataFrame:
    """``consumer_id, theta, feeds, phis, push`` per active consumer of more than one
    producer: its followed producers (sorted), their event rates and whether FF-PerPair
    pushes them; persisted."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    ff = ff_plan.select("consumer_id", "producer_id", (F.col("mode") == "push").alias("push"))
    return (
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


def _stopwatch(timings: dict[str, float] | None) -> Callable[[str], None]:
    """A lap timer started now: each call records the wall seconds since the last one (or
    the start) under its step in ``timings``, when given."""
    import time

    clock = {"t": time.perf_counter()}

    def lap(step: str) -> None:
        now = time.perf_counter()
        if timings is not None:
            timings[step] = round(now - clock["t"], 1)
        clock["t"] = now

    return lap


def _part_rows(
    per_user: DataFrame, memberships: DataFrame, cands: DataFrame, where: DataFrame
) -> DataFrame:
    """The per-part planner's input: a ``u`` row per user (:func:`_follow_sets`) and a ``v``
    row per candidate view and part it has users in, each with its ``part`` and ``grp``."""
    from pyspark.sql import functions as F

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
    return user_rows.unionByName(view_rows, allowMissingColumns=True)


def _assigned(edges: DataFrame, planned: DataFrame) -> DataFrame:
    """``consumer_id, producer_id, mode, source_id`` of every edge: the planned ``e`` rows,
    the edges without one (inactive or single-producer consumers) pulled."""
    from pyspark.sql import functions as F

    chosen = planned.where(F.col("kind") == "e").select(
        "consumer_id", "producer_id", F.col("mode").alias("_m"), F.col("source_id").alias("_s")
    )
    return (
        edges.select("consumer_id", "producer_id")
        .join(chosen, ["consumer_id", "producer_id"], "left")
        .select(
            "consumer_id",
            "producer_id",
            F.coalesce("_m", F.lit("pull")).alias("mode"),
            F.coalesce("_s", "producer_id").alias("source_id"),
        )
    )

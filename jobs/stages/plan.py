"""Stage ``plan``: choose push / pull (/ shared view) for every follow edge of day D.

Reads ``clean/follows`` (D) and ``rates/{producer,consumer}_rates`` (D). Computes every
enabled strategy, prices each with the cost model (``jobs.selection.cost``) and serves the
configured one (``auto``: the cheapest). Writes, partitioned by ds:

* ``plan/edge_plan``: one row per follow edge of the served plan (key consumer_id, producer_id);
* ``plan/consumer_sources``: per consumer the sources read at view time;
* ``plan/views``, ``plan/view_members``: shared views of the served plan;
* ``plan/plan_cost``: one row per strategy evaluated, ``chosen`` marking the served one, with
  the day's certified lower bound on every plan's cost and each strategy's gap to it
  (:mod:`jobs.selection.bound`).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.common.config import SHARED_VIEW_STRATEGIES, STRATEGIES, Settings
from jobs.common.exact import exact_sum
from jobs.common.records import (
    CertificateRecord,
    LatencyTarget,
    PlanRecord,
    SourcesHistogram,
)
from jobs.common.spark import UNCOMPRESSED_CACHE, empty_frame, job_description
from jobs.common.storage import Storage
from jobs.common.tables import contract, has_partition, read_partition, write_partition
from jobs.selection import bound, cost, feeding_frenzy, latency, shared

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlanParams:
    """What the strategies take from the settings, as the selection package's parameters."""

    strategies: tuple[str, ...]
    model: cost.CostModel
    margin: float
    target: cost.LatencyTarget
    views: shared.ViewParams

    @classmethod
    def of(cls, settings: Settings) -> PlanParams:
        model = cost.CostModel(settings.push_cost, settings.pull_cost)
        return cls(
            strategies=settings.served_strategies,
            model=model,
            margin=settings.mode_change_margin,
            # a bound in milliseconds is planned as the sources the read-latency fit allows
            target=cost.LatencyTarget(
                "sources" if settings.latency_metric == "ms" else settings.latency_metric,
                settings.latency_bound_sources,
                settings.latency_quantile,
            ),
            views=shared.ViewParams(
                model,
                settings.view_part_users,
                settings.view_user_views,
                lp_pairs=settings.view_lp_pairs,
                margin=settings.mode_change_margin,
            ),
        )


def latency_target(settings: Settings) -> LatencyTarget:
    """The latency target the day's plans are judged against, as the plan record keeps it:
    with ``latency_metric = "ms"``, the read-latency fit it was mapped with and the sources it
    allowed."""
    if settings.latency_metric != "ms":
        return LatencyTarget(
            metric=settings.latency_metric,
            bound=int(settings.latency_bound),
            quantile=settings.latency_quantile,
        )
    return LatencyTarget(
        metric="ms",
        bound=settings.latency_bound,
        quantile=settings.latency_quantile,
        sources=settings.latency_bound_sources,
        ms_base=settings.latency_ms_base,
        ms_per_source=settings.latency_ms_per_source,
    )


def assignments(
    edges: DataFrame,
    params: PlanParams,
    timings: dict[str, dict[str, float]] | None = None,
    previous: DataFrame | None = None,
) -> tuple[DataFrame, DataFrame]:
    """Every computed strategy's edge assignment, stacked (column ``strategy``), and the
    shared views' part rows (``strategy`` plus ``jobs.selection.shared.PART_ROWS``).

    Inactive consumers' edges are pulls under every strategy (``latency.pull_inactive``);
    the latency-constrained strategies start from the FF-PerPair plan after that rule, and
    the shared-view strategies fall back to it part by part where they would cost more.
    ``timings`` receives each shared-view strategy's step times (``shared.select_views``);
    ``previous``: the part rows of the day before (``plan/part_plans``), whose parts the
    shared-view strategies carry over where nothing moved beyond the band."""
    from pyspark.sql import functions as F

    view_rows: list[DataFrame] = []
    timings = {} if timings is None else timings

    threshold = params.model.threshold

    def min_cost(e: DataFrame) -> DataFrame:
        plan = feeding_frenzy.ff_per_pair(e, threshold, params.margin)
        return latency.pull_inactive(plan)

    def constrained(name: str, per_consumer: bool) -> Callable[[DataFrame], DataFrame]:
        return lambda e: latency.latency_constrained(
            min_cost(e), name, params.model, params.target, per_consumer
        )

    def shared_views(name: str) -> Callable[[DataFrame], DataFrame]:
        def build(e: DataFrame) -> DataFrame:
            chosen, rows = shared.select_views(
                e,
                min_cost(e).select("consumer_id", "producer_id", "mode"),
                name,
                params.views,
                timings.setdefault(name, {}),
                None
                if previous is None
                else previous.where(F.col("strategy") == name).drop("strategy"),
            )
            view_rows.append(rows.withColumn("strategy", F.lit(name)))
            return feeding_frenzy.with_assignment(e, name, chosen)

        return build

    builders: dict[str, Callable[[DataFrame], DataFrame]] = {
        "push-all": lambda e: latency.pull_inactive(feeding_frenzy.push_all(e)),
        "pull-all": lambda e: feeding_frenzy.pull_all(e),
        "ff-per-pair": min_cost,
        "ff-consumer": lambda e: latency.pull_inactive(
            feeding_frenzy.ff_consumer(e, threshold, params.margin)
        ),
        "ff-latency-pair": constrained("ff-latency-pair", False),
        "ff-latency-consumer": constrained("ff-latency-consumer", True),
        **{name: shared_views(name) for name in SHARED_VIEW_STRATEGIES},
    }
    frames = [builders[s](edges) for s in params.strategies]
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    schema = f"strategy string, {shared.PART_ROWS}"
    views = empty_frame(edges.sparkSession, schema)
    for rows in view_rows:
        views = views.unionByName(rows)
    return out, views


def consumer_sources(edge_plan: DataFrame, views: bool = True) -> DataFrame:
    """Per consumer, each source its feed reads: its personal feed, each shared view, each
    pulled producer. A pull is its edge's own row (one per follow edge): only pushes and views,
    which many edges share, are made distinct, so the pulls skip the distinct's shuffle. A
    push's source is its consumer, so the personal feeds are the distinct consumers with a
    push (one key to hash, not three). ``views=False`` says the plan has no view edges (no
    shared-view strategy), which skips their scan."""
    from pyspark.sql import functions as F

    mode = F.col("mode")
    pulls = edge_plan.where(mode == "pull").select(
        "consumer_id", F.lit("producer").alias("source_type"), "source_id"
    )
    feeds = (
        edge_plan.where(mode == "push")
        .select("consumer_id")
        .distinct()
        .select(
            "consumer_id",
            F.lit("consumer_feed").alias("source_type"),
            F.col("consumer_id").alias("source_id"),
        )
    )
    out = pulls.unionByName(feeds)
    if views:
        read = edge_plan.where(mode == "view").select("consumer_id", "source_id").distinct()
        out = out.unionByName(
            read.select("consumer_id", F.lit("view").alias("source_type"), "source_id")
        )
    return out


@dataclass
class Plans:
    """Every computed strategy's plan of one day, kept (memory, else disk) until
    :meth:`release`: ``stacked`` (``feeding_frenzy.ASSIGNMENT_COLUMNS``, one row per strategy
    and follow edge), ``members`` (strategy, view_id, producer_id, phi: the shared views'
    producers), ``part_rows`` (the shared-view parts) and ``costs`` (``cost.plan_costs``, one
    row per strategy, not computed yet)."""

    edges: DataFrame
    stacked: DataFrame
    part_rows: DataFrame
    members: DataFrame
    costs: DataFrame
    timings: dict[str, dict[str, float]]

    def release(self) -> None:
        for df in (self.members, self.stacked, self.edges):
            df.unpersist()


def strategy_plans(
    spark: SparkSession,
    settings: Settings,
    ds: dt.date,
    wh: Storage,
    reread: bool = False,
    full_refresh: bool = False,
) -> Plans:
    """The plans of every enabled strategy from the data of day ``ds``: its follow graph and
    rates, with the edge plan served on ``ds - 1`` as the current plan (hysteresis) and the
    shared-view parts planned on ``ds - 1`` (``plan/part_plans``) carried over where their
    inputs stayed within the band (:func:`jobs.selection.shared.select_views`; not with
    ``full_refresh``). The plan stage serves one of them (and reads the edges again for its
    certificate: ``reread``); ``feedpipe evaluate`` replays them all on the next day."""
    edges, phi = day_edges(spark, settings, ds, wh)
    previous = None
    if not full_refresh and any(s in SHARED_VIEW_STRATEGIES for s in settings.served_strategies):
        c, prev = contract("plan", "part_plans"), ds - dt.timedelta(days=1)
        previous = read_partition(spark, wh, c, prev) if has_partition(wh, c, prev) else None
    return plans_of(edges, settings, phi, reread, previous)


def day_edges(
    spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage
) -> tuple[DataFrame, DataFrame]:
    """The follow edges of day ``ds`` as the strategies plan them
    (``feeding_frenzy.edge_inputs``: rates, activity, the mode served on ``ds - 1``), and
    ``producer_id, phi`` of the day's producers."""
    from pyspark.sql import functions as F

    follows = read_partition(spark, wh, contract("clean", "follows"), ds)
    pr = read_partition(spark, wh, contract("rates", "producer_rates"), ds)
    cr = read_partition(spark, wh, contract("rates", "consumer_rates"), ds)
    ep_c = contract("plan", "edge_plan")
    prev = ds - dt.timedelta(days=1)
    current = read_partition(spark, wh, ep_c, prev) if has_partition(wh, ep_c, prev) else None
    cr = cr.withColumn("active", latency.consumer_activity(F.lit(ds), settings.inactive_after_days))
    edges = feeding_frenzy.edge_inputs(follows, pr, cr, current)
    return edges, pr.select("producer_id", F.col("events_per_hour").alias("phi"))


def plans_of(
    edges: DataFrame,
    settings: Settings,
    phi: DataFrame | None = None,
    reread: bool = False,
    previous: DataFrame | None = None,
) -> Plans:
    """Every enabled strategy's plan of the follow edges ``edges``
    (``feeding_frenzy.edge_inputs``), priced with the cost model; ``edges`` is kept until
    :meth:`Plans.release` when more than one plan reads it, or the caller reads it again
    (``reread``: the plan stage's certificate, whose Spark computation scans the edges
    several times; kept, it took 8.2 s instead of 12.6 s on the Higgs week's last day,
    docs/tuning.md). ``phi``: producer_id, phi of the shared views' producers (default: the
    edges' own); ``previous``: the part rows of the day before (:func:`assignments`)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    params = PlanParams.of(settings)
    strategies = params.strategies
    shared = any(s in SHARED_VIEW_STRATEGIES for s in strategies)
    if reread or len(strategies) > 1 or shared:
        edges = edges.persist(StorageLevel.MEMORY_AND_DISK)
    timings: dict[str, dict[str, float]] = {}
    stacked, part_rows = assignments(edges, params, timings, previous)

    stacked = stacked.persist(StorageLevel.MEMORY_AND_DISK)
    # built now: Spark plans a scan of a kept frame with the frame's partitioning only once
    # the frame exists, and the per-consumer steps after this (the costs, the sources) need
    # no shuffle of their own when it is partitioned by consumer (feeding_frenzy.edge_inputs)
    with job_description(edges.sparkSession, f"plan strategies {' '.join(strategies)}"):
        stacked.count()
    if phi is None:
        phi = edges.select("producer_id", "phi").distinct()
    shared_members = (
        part_rows.where(F.col("kind") == "m")
        .select("strategy", F.col("source_id").alias("view_id"), "producer_id")
        .distinct()  # a view chosen in several parts is materialized once
        .join(phi, "producer_id")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    costs = cost.plan_costs(stacked, shared_members, params.model, strategies, params.target)
    return Plans(edges, stacked, part_rows, shared_members, costs, timings)


PLAN_CONF = {**UNCOMPRESSED_CACHE, **feeding_frenzy.CONSUMER_PARTITIONED}
"""Settings of a stage that computes plans (``scoped_conf``): the plans it keeps (one row per
strategy and follow edge) are built once and scanned by every later step (the costs, the edge
plan's range write, the sources), and partitioned by consumer."""


def run(
    spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage, full_refresh: bool = False
) -> PlanRecord:
    """The stage; ``full_refresh`` plans every shared-view part afresh instead of carrying
    over those whose inputs stayed within the band."""
    from jobs.common.spark import scoped_conf

    with scoped_conf(spark, PLAN_CONF, settings):
        return _run(spark, settings, ds, wh, full_refresh)


def view_table(served: DataFrame, members: DataFrame, chosen: str) -> DataFrame:
    """``plan/views``: each view of the served plan with its producers, the events per hour
    pushed into it, and how many consumers read it."""
    from pyspark.sql import functions as F

    readers = (
        served.where(F.col("mode") == "view")
        .groupBy(F.col("source_id").alias("view_id"))
        .agg(F.count_distinct("consumer_id").alias("n_consumers"))
    )
    return (
        members.groupBy("view_id")
        .agg(
            F.count("*").alias("n_producers"),
            exact_sum(F.col("phi")).alias("events_per_hour"),
        )
        .join(readers, "view_id", "left")
        .select(
            "view_id",
            F.lit(chosen).alias("strategy"),
            "n_producers",
            "events_per_hour",
            F.coalesce("n_consumers", F.lit(0)).alias("n_consumers"),
        )
    )


def part_outcome(part_rows: DataFrame, strategies: list[str]) -> dict[str, dict[str, int]]:
    """Per shared-view strategy: its parts, how many fell back to FF-PerPair or got the
    LP's optimum, and how many kept the previous day's plan (a few rows reach the driver)."""
    from pyspark.sql import functions as F

    outcome = (
        part_rows.where(F.col("kind") == "p")
        .groupBy("strategy", "mode", "reused")
        .agg(F.count("*").alias("n"))
        .collect()  # at most six rows per shared-view strategy
    )
    parts = {
        s: {"parts": 0, "fallback_parts": 0, "optimal_parts": 0, "reused_parts": 0}
        for s in strategies
    }
    for r in outcome:
        parts[r["strategy"]]["parts"] += r["n"]
        if r["mode"] in ("fallback", "optimal"):
            parts[r["strategy"]][f"{r['mode']}_parts"] += r["n"]
        if r["reused"]:
            parts[r["strategy"]]["reused_parts"] += r["n"]
    return parts


def served_strategy(rows: dict[str, dict[str, Any]], forced: str | None) -> tuple[str, str]:
    """The strategy served (``forced``, else the cheapest; ties in ``STRATEGIES`` order) and
    the cheapest, with a warning when a forced strategy costs more."""
    order = [s for s in STRATEGIES if s in rows]
    chosen = cost.choose({s: r["total_cost"] for s, r in rows.items()}, order, forced)
    cheapest = cost.choose({s: r["total_cost"] for s, r in rows.items()}, order)
    if forced and rows[cheapest]["total_cost"] < rows[chosen]["total_cost"]:
        log.warning(
            "strategy %s is forced by configuration; %s would cost %.3f instead of %.3f per hour",
            chosen,
            cheapest,
            rows[cheapest]["total_cost"],
            rows[chosen]["total_cost"],
        )
    return chosen, cheapest


def certified(costs: DataFrame, chosen: str, bound_value: float, kind: str) -> DataFrame:
    """``plan/plan_cost``: each strategy's costs, whether it is served, the day's certified
    lower bound and how far above it the strategy is."""
    from pyspark.sql import functions as F

    lb = F.lit(bound_value)
    return costs.select(
        "*",
        F.coalesce(F.col("strategy") == chosen, F.lit(False)).alias("chosen"),
        lb.alias("lower_bound"),
        F.lit(kind).alias("bound"),
        F.when(lb > 0, (F.col("total_cost") - lb) / lb).alias("gap"),
    )


def certificate_record(
    cert: bound.Certificate, bound_value: float, served_cost: float, seconds: float
) -> CertificateRecord:
    """The plan record's ``certificate``: the bound, how it was computed, the served plan's
    gap above it, and how long it took."""
    return CertificateRecord(
        lower_bound=bound_value,
        bound=cert.kind,
        max_followers=cert.max_followers,
        pairs=cert.pairs,
        computed=cert.where,
        gap=(served_cost - bound_value) / bound_value if bound_value else None,
        seconds=seconds,
    )


def _run(
    spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage, full_refresh: bool
) -> PlanRecord:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    plans = strategy_plans(spark, settings, ds, wh, reread=True, full_refresh=full_refresh)
    stacked, part_rows, shared_members, costs = (
        plans.stacked,
        plans.part_rows,
        plans.members,
        plans.costs,
    )
    # one row per strategy, kept: plan_cost is written from it, not computed again
    costs = costs.persist(StorageLevel.MEMORY_AND_DISK)
    with job_description(spark, "plan costs"):
        collected = costs.collect()
    rows = {r["strategy"]: r.asDict() for r in collected}
    forced = None if settings.strategy == "auto" else settings.strategy
    chosen, cheapest = served_strategy(rows, forced)

    started = time.perf_counter()
    with job_description(spark, "plan certificate"):
        cert = bound.lower_bound(plans.edges, PlanParams.of(settings).model, settings.bound_pairs)
    cert_seconds = round(time.perf_counter() - started, 1)
    # rounded down as the costs are rounded (cost.COST_DECIMALS): still a bound, and never
    # above a strategy whose rounded cost equals it
    bound_value = math.floor(cert.cost * 10**cost.COST_DECIMALS) / 10**cost.COST_DECIMALS
    plan_cost = certified(costs, chosen, bound_value, cert.kind)
    write_partition(plan_cost, wh, contract("plan", "plan_cost"), ds)
    costs.unpersist()
    served = stacked.where(F.col("strategy") == chosen)
    # a filter of the kept plans: a sampling range write's two passes scan them, no second copy
    write_partition(served, wh, contract("plan", "edge_plan"), ds, keep=False)
    sources = consumer_sources(served, views=chosen in SHARED_VIEW_STRATEGIES)
    write_partition(sources, wh, contract("plan", "consumer_sources"), ds)
    members = shared_members.where(F.col("strategy") == chosen)
    write_partition(view_table(served, members, chosen), wh, contract("plan", "views"), ds)
    write_partition(
        members.select("view_id", "producer_id"), wh, contract("plan", "view_members"), ds
    )
    shared_strategies = [s for s in SHARED_VIEW_STRATEGIES if s in rows]
    # the next day's plan carries over what it can of these (none without shared views: the
    # table is still written, so a day always has the tables its stage declares)
    write_partition(part_rows, wh, contract("plan", "part_plans"), ds)
    parts = part_outcome(part_rows, shared_strategies)
    for name, seconds in plans.timings.items():
        parts.setdefault(name, {})["seconds"] = seconds  # type: ignore[assignment]

    plans.release()

    stats = PlanRecord(
        strategy=chosen,
        forced=forced is not None,
        cheapest=cheapest,
        costs={s: r.get("total_cost") for s, r in sorted(rows.items())},
        mode_changes=rows[chosen].get("mode_changes"),
        latency_met=rows[chosen].get("latency_met"),
        latency_share=rows[chosen].get("latency_share"),
        # the target the day's plans were judged against (the report shows it, not the flags)
        latency_target=latency_target(settings),
        inactive_consumers=rows[chosen].get("inactive_consumers"),
        shared_view_parts=parts,
        certificate=certificate_record(cert, bound_value, rows[chosen]["total_cost"], cert_seconds),
        # the latency distribution of every strategy (cost.SOURCE_BUCKETS), for the report
        sources_hist=SourcesHistogram(
            buckets=[b[0] for b in cost.SOURCE_BUCKETS],
            shares={s: r.get("sources_hist") for s, r in sorted(rows.items())},
        ),
    )

    log.info("plan %s: %s", ds, stats)
    return stats

"""Every expectation suite that guards publishing, shown passing on the day's real tables and
failing on a corrupted copy of its input: the clean tables, rate coverage, edge coverage, the
cost gate, feed order and uniqueness, the pushed-edge check, row accounting and the gates."""

from __future__ import annotations

import dataclasses

from pyspark.sql import functions as F

from jobs.common.ledger import read_record
from jobs.common.storage import Storage
from jobs.common.tables import contract, read_partition
from jobs.stages import validate
from support.workloads import LAST


def corrupted(spark, settings) -> dict[str, tuple]:
    """Per suite: its check frame of the real day, and the same check over a corrupted copy
    of its input (a self-follow, a repeated event, a view without a consumer, a producer or
    consumer without a rate, an edge the plan lost, a served plan dearer than the pure ones
    and a bound above every plan, a repeated feed row, a pushed row whose edge is pulled, an
    event stored twice, a row ingest lost, a failed gate)."""
    wh = Storage.at(settings.warehouse)

    def t(layer: str, name: str):
        return read_partition(spark, wh, contract(layer, name), LAST)

    follows, edge_plan = t("clean", "follows"), t("plan", "edge_plan")
    events, views = t("clean", "events"), t("clean", "views")
    pr, cr, cost = (
        t("rates", "producer_rates"),
        t("rates", "consumer_rates"),
        t("plan", "plan_cost"),
    )
    pf, vf, cf = t("feeds", "producer_feed"), t("feeds", "view_feed"), t("feeds", "consumer_feed")
    store = t("feeds", "event_store")
    good = validate.check_frames(spark, settings, LAST, wh)
    # the served FF-PerPair plan has no shared views: one producer's feed stands in for one
    first = pf.agg(F.min("producer_id")).first()[0]
    view = pf.where(F.col("producer_id") == first).withColumn("view_id", F.lit("v-1"))
    view = view.select(*vf.columns)
    one_producer = pr.orderBy("producer_id").limit(1).select("producer_id")
    one_consumer = cr.orderBy("consumer_id").limit(1).select("consumer_id")
    served = F.col("chosen")
    ingest = read_record(wh, LAST, "ingest")
    lost = {**ingest, "tables": {**ingest["tables"]}}
    lost["tables"]["events"] = {
        **lost["tables"]["events"],
        "rows_in": lost["tables"]["events"]["rows_in"] + 1,
    }
    gates = validate.gates(settings, LAST, wh, ingest)
    gates[0] = {**gates[0], "passed": False}  # one gate failed
    return {
        "clean.follows": (
            good["clean.follows"],
            follows.unionByName(
                follows.limit(1).withColumn("producer_id", F.col("consumer_id"))
            ).withColumn("not_self", F.col("consumer_id") != F.col("producer_id")),
        ),
        "clean.events": (good["clean.events"], events.unionByName(events.limit(1))),
        "clean.views": (
            good["clean.views"],
            views.unionByName(views.limit(1).withColumn("consumer_id", F.lit(None).cast("string"))),
        ),
        "rates.producer_rates": (
            good["rates.producer_rates"],
            validate.rate_coverage_check(
                pr.join(one_producer, "producer_id", "left_anti"), follows, "producer_id"
            ),
        ),
        "rates.consumer_rates": (
            good["rates.consumer_rates"],
            validate.rate_coverage_check(
                cr.join(one_consumer, "consumer_id", "left_anti"), follows, "consumer_id"
            ),
        ),
        "plan.edge_plan": (
            good["plan.edge_plan"],
            validate.edge_coverage_check(
                follows, edge_plan.orderBy("consumer_id", "producer_id").offset(1)
            ),
        ),
        "plan.plan_cost": (
            good["plan.plan_cost"],
            validate.cost_gate_check(
                cost.withColumn(
                    "total_cost",
                    F.when(served, F.col("total_cost") * 1e6).otherwise(F.col("total_cost")),
                ).withColumn("lower_bound", F.lit(1e12)),  # a bound above every plan
                True,
            ),
        ),
        "feeds.producer_feed": (
            good["feeds.producer_feed"],
            validate.in_store_check(
                validate.feed_order_check(pf.unionByName(pf.limit(1)), "producer_id"), store
            ),
        ),
        "feeds.view_feed": (
            good["feeds.view_feed"],
            validate.in_store_check(
                validate.feed_order_check(view.unionByName(view.limit(1)), "view_id"), store
            ),
        ),
        "feeds.consumer_feed": (
            good["feeds.consumer_feed"],
            validate.in_store_check(
                validate.pushed_edge_check(
                    validate.feed_order_check(cf, "consumer_id"),
                    edge_plan.withColumn("mode", F.lit("pull")),
                ),
                store,
            ),
        ),
        "feeds.event_store": (
            good["feeds.event_store"],
            validate.store_check(store.unionByName(store.limit(1))),
        ),
        "ingest.accounting": (
            good["ingest.accounting"],
            validate.accounting_check(spark, wh, LAST, lost),
        ),
        "ingest.gates": (good["ingest.gates"], validate.gates_frame(spark, gates)),
    }


ENGINES = {"spark": 0, "driver": validate.DRIVER_ROWS}
"""Where the suites run: Great Expectations' Spark engine, or pandas on the driver (a small
day's frames, ``validate.DRIVER_ROWS``); both must give the same verdicts."""


def failures(results: dict) -> dict[str, list]:
    return {
        n: sorted((f["expectation"], str(f["kwargs"]), f["unexpected_count"]) for f in r["failed"])
        for n, r in results["suites"].items()
    }


def test_every_suite_passes_the_real_day_and_fails_its_corrupted_input(spark, built_copy):
    s = dataclasses.replace(built_copy, strategy="auto")  # the cost gate applies under auto
    frames = corrupted(spark, s)
    suites = sorted(p.stem for p in validate.schemas_root().joinpath("expectations").glob("*.json"))
    assert sorted(frames) == suites, "a suite without a corruption here"
    params = {"feed_k": s.feed_k}
    seen = {}
    for engine, rows in ENGINES.items():
        good = validate.validate_frames(
            {n: g for n, (g, _) in frames.items()}, params, None, driver_rows=rows
        )
        assert {n: r["success"] for n, r in good["suites"].items()} == dict.fromkeys(suites, True)
        bad = validate.validate_frames(
            {n: b for n, (_, b) in frames.items()}, params, None, driver_rows=rows
        )
        assert set(bad["engines"].values()) == {engine}
        passed = [n for n, r in bad["suites"].items() if r["success"]]
        assert passed == [], f"{engine}: suites that let their corrupted input through: {passed}"
        for name, r in bad["suites"].items():
            assert r["failed"], (engine, name)
        failed = {f["kwargs"].get("column_A") for f in bad["suites"]["plan.plan_cost"]["failed"]}
        assert failed == {"min_pure_cost", "cheapest_cost"}
        seen[engine] = failures(bad)
    assert seen["driver"] == seen["spark"]


def test_a_feed_event_missing_from_the_event_store_fails_that_feed_suite(spark, built_copy):
    """The store loses one event of each feed table (and another has its time changed): each
    feed's suite fails on ``in_event_store`` alone, counting exactly the feed's rows of it."""
    wh = Storage.at(built_copy.warehouse)

    def t(layer: str, name: str):
        return read_partition(spark, wh, contract(layer, name), LAST)

    store, edge_plan = t("feeds", "event_store"), t("plan", "edge_plan")
    feeds = {
        "feeds.producer_feed": (t("feeds", "producer_feed"), "producer_id"),
        "feeds.consumer_feed": (t("feeds", "consumer_feed"), "consumer_id"),
    }
    frames, expected = {}, {}
    for name, (feed, key) in feeds.items():
        lost, shifted = [r.event_id for r in feed.orderBy("event_id").limit(2).collect()]
        broken = store.where(F.col("event_id") != lost).withColumn(
            "created_at",
            F.when(
                F.col("event_id") == shifted, F.col("created_at") + F.expr("INTERVAL 1 SECOND")
            ).otherwise(F.col("created_at")),
        )
        check = validate.feed_order_check(feed, key)
        if name == "feeds.consumer_feed":
            check = validate.pushed_edge_check(check, edge_plan)
        frames[name] = validate.in_store_check(check, broken)
        expected[name] = feed.where(F.col("event_id").isin(lost, shifted)).count()
    for engine, rows in ENGINES.items():
        got = validate.validate_frames(frames, {"feed_k": built_copy.feed_k}, driver_rows=rows)
        assert set(got["engines"].values()) == {engine}
        for name, r in got["suites"].items():
            assert [(f["kwargs"]["column"], f["unexpected_count"]) for f in r["failed"]] == [
                ("in_event_store", expected[name])
            ], (engine, name)

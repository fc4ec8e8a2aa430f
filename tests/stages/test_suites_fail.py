"""Every expectation suite that guards publishing, shown passing on the day's real tables and
failing on a corrupted copy of its input: the clean tables, rate coverage, edge coverage, the
cost gate, feed order and uniqueness, the pushed-edge check, row accounting and the gates."""

from __future__ import annotations

import dataclasses
from typing import Any

from pyspark.sql import functions as F

from jobs.common.records import IngestRecord, Manifest
from jobs.common.storage import Storage
from jobs.common.tables import contract, read_partition, schemas_root
from jobs.stages import checks, one_pass, validate
from jobs.stages import gates as policy
from support.records import ingested, recounted
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
    good = checks.check_frames(spark, settings, LAST, wh)
    # the served FF-PerPair plan has no shared views: one producer's feed stands in for one
    first = pf.agg(F.min("producer_id")).first()[0]
    view = pf.where(F.col("producer_id") == first).withColumn("view_id", F.lit("v-1"))
    view = view.select(*vf.columns)
    one_producer = pr.orderBy("producer_id").limit(1).select("producer_id")
    one_consumer = cr.orderBy("consumer_id").limit(1).select("consumer_id")
    served = F.col("chosen")
    ingest = ingested(wh, LAST)
    lost = recounted(ingest, "events", rows_in=ingest.tables["events"].rows_in + 1)
    gates = policy.gates(settings, LAST, wh, corrupted_counts(wh, ingest))
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
            checks.rate_coverage_check(
                pr.join(one_producer, "producer_id", "left_anti"), follows, "producer_id"
            ),
        ),
        "rates.consumer_rates": (
            good["rates.consumer_rates"],
            checks.rate_coverage_check(
                cr.join(one_consumer, "consumer_id", "left_anti"), follows, "consumer_id"
            ),
        ),
        "plan.edge_plan": (
            good["plan.edge_plan"],
            checks.edge_coverage_check(
                follows, edge_plan.orderBy("consumer_id", "producer_id").offset(1)
            ),
        ),
        "plan.plan_cost": (
            good["plan.plan_cost"],
            checks.cost_gate_check(
                cost.withColumn(
                    "total_cost",
                    F.when(served, F.col("total_cost") * 1e6).otherwise(F.col("total_cost")),
                ).withColumn("lower_bound", F.lit(1e12)),  # a bound above every plan
                True,
            ),
        ),
        "feeds.producer_feed": (
            good["feeds.producer_feed"],
            checks.in_store_check(
                checks.feed_order_check(pf.unionByName(pf.limit(1)), "producer_id"), store
            ),
        ),
        "feeds.view_feed": (
            good["feeds.view_feed"],
            checks.in_store_check(
                checks.feed_order_check(view.unionByName(view.limit(1)), "view_id"), store
            ),
        ),
        "feeds.consumer_feed": (
            good["feeds.consumer_feed"],
            checks.in_store_check(
                checks.pushed_edge_check(
                    checks.feed_order_check(cf, "consumer_id"),
                    edge_plan.withColumn("mode", F.lit("pull")),
                ),
                store,
            ),
        ),
        "feeds.event_store": (
            good["feeds.event_store"],
            checks.store_check(store.unionByName(store.limit(1))),
        ),
        "ingest.accounting": (
            good["ingest.accounting"],
            checks.accounting_check(spark, wh, LAST, lost),
        ),
        "ingest.gates": (good["ingest.gates"], checks.gates_frame(spark, gates)),
    }


def corrupted_counts(wh: Storage, ingest: IngestRecord) -> IngestRecord:
    """The last churn day's ingest counts as a broken delivery would give them, with the days
    before published (their real counts): a tenth of the events, 20 times the views, 60% of
    the graph removed and 30 times the share of edges added; each gate fails on them."""
    from jobs.common import ledger
    from support.workloads import days

    for d in days()[:-1]:
        ledger.mark_published(wh, d, Manifest(ds=d, input=ingested(wh, d).tables))
    t = ingest.tables
    before = t["follows"].edges_before or 0
    past = [ingested(wh, d).tables["follows"].added_share or 0.0 for d in days()[1:-1]]
    share = max(past)
    ingest = recounted(ingest, "events", rows_in=t["events"].rows_in // 10)
    ingest = recounted(ingest, "views", rows_in=t["views"].rows_in * 20)
    return recounted(
        ingest,
        "follows",
        edges_removed=int(0.6 * before),
        edges_added=int(30 * share * before),
    )


def _validated(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The suites' results as ``results.json`` keeps them."""
    return validate.validate_frames(*args, **kwargs).as_dict()


ENGINES = {
    "one-pass": {},
    "spark": {"single_pass": False},
    "driver": {"driver_rows": validate.DRIVER_ROWS},
}
"""How the suites are judged: from one query per frame (``jobs.stages.one_pass``), on
Great Expectations' Spark engine, or with pandas on the driver (a small day's frames,
``validate.DRIVER_ROWS``); all must give the same verdicts. A suite that fails runs again
on Great Expectations' engine with samples, whichever judged it first."""


def failures(results: dict) -> dict[str, list]:
    return {
        n: sorted((f["expectation"], str(f["kwargs"]), f["unexpected_count"]) for f in r["failed"])
        for n, r in results["suites"].items()
    }


def test_every_suite_passes_the_real_day_and_fails_its_corrupted_input(spark, built_copy):
    s = dataclasses.replace(built_copy, strategy="auto")  # the cost gate applies under auto
    frames = corrupted(spark, s)
    suites = sorted(p.stem for p in schemas_root().joinpath("expectations").glob("*.json"))
    assert sorted(frames) == suites, "a suite without a corruption here"
    params = {"feed_k": s.feed_k}
    seen = {}
    for engine, how in ENGINES.items():
        good = _validated({n: g for n, (g, _) in frames.items()}, params, None, **how)
        assert {n: r["success"] for n, r in good["suites"].items()} == dict.fromkeys(suites, True)
        assert set(good["engines"].values()) == {engine}
        bad = _validated({n: b for n, (_, b) in frames.items()}, params, None, **how)
        assert set(bad["engines"].values()) == {"spark" if engine == "one-pass" else engine}
        passed = [n for n, r in bad["suites"].items() if r["success"]]
        assert passed == [], f"{engine}: suites that let their corrupted input through: {passed}"
        for name, r in bad["suites"].items():
            assert r["failed"], (engine, name)
        failed = {f["kwargs"].get("column_A") for f in bad["suites"]["plan.plan_cost"]["failed"]}
        assert failed == {"min_pure_cost", "cheapest_cost"}
        (gate,) = bad["suites"]["ingest.gates"]["failed"]
        assert gate["unexpected_count"] == 4  # every gate: two volume, two follow
        seen[engine] = failures(bad)
    assert seen["driver"] == seen["spark"] == seen["one-pass"]


COUNTED = {"result_format": "BASIC", "partial_unexpected_count": 0}


def _counts(results: list) -> dict[str, tuple]:
    """Each expectation's verdict and counts: rows, rows left out (nulls, or the rows a pair's
    ``ignore_row_if`` drops), unexpected rows."""
    out = {}
    for r in results:
        cfg = r.expectation_config
        got = r.result or {}
        kwargs = sorted((k, v) for k, v in cfg.kwargs.items() if k != "batch_id")
        out[f"{cfg.type} {kwargs}"] = (
            bool(r.success),
            got.get("element_count"),
            got.get("missing_count"),
            got.get("unexpected_count"),
        )
    return out


def test_the_one_pass_counts_what_great_expectations_counts(spark, built_copy):
    """On every suite's frame of the real day and of its corrupted input, the one-query
    counts (``jobs.stages.one_pass``) judged by Great Expectations give each expectation the
    verdict, row count, left-out rows and unexpected rows its Spark engine computes itself."""
    import great_expectations as gx

    s = dataclasses.replace(built_copy, strategy="auto")
    params = {"feed_k": s.feed_k}
    ctx = gx.get_context(mode="ephemeral")
    source = ctx.data_sources.add_spark("oracle", persist=False)
    compared = 0
    for name, frames in sorted(corrupted(spark, s).items()):
        spec = validate.load_suite(name)
        suite = gx.ExpectationSuite(name=name, expectations=spec["expectations"])
        batch_def = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("ds")
        for frame in frames:
            frame = frame.localCheckpoint()  # the same rows for both
            batch = batch_def.get_batch(batch_parameters={"dataframe": frame})
            engine = batch.validate(suite, result_format=COUNTED, expectation_parameters=params)
            counted = one_pass.suite_results(
                frame, one_pass.configurations(spec["expectations"], params), COUNTED
            )
            assert counted is not None, name
            assert _counts(counted) == _counts(engine.results), name
            compared += len(counted)
    assert compared == 2 * 67  # every expectation of every suite, on both inputs


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
        check = checks.feed_order_check(feed, key)
        if name == "feeds.consumer_feed":
            check = checks.pushed_edge_check(check, edge_plan)
        frames[name] = checks.in_store_check(check, broken)
        expected[name] = feed.where(F.col("event_id").isin(lost, shifted)).count()
    for engine, how in ENGINES.items():
        got = _validated(frames, {"feed_k": built_copy.feed_k}, **how)
        # a suite that failed is reported as Great Expectations' engine counted it again
        assert set(got["engines"].values()) == {"spark" if engine == "one-pass" else engine}
        for name, r in got["suites"].items():
            assert [(f["kwargs"]["column"], f["unexpected_count"]) for f in r["failed"]] == [
                ("in_event_store", expected[name])
            ], (engine, name)


def _null(df, column: str):
    """``df`` and a copy of its first row with ``column`` null."""
    typ = dict(df.dtypes)[column]
    return df.unionByName(df.limit(1).withColumn(column, F.lit(None).cast(typ)))


def _again(df):
    """``df`` and a copy of its first row."""
    return df.unionByName(df.limit(1))


def _first(df, key: str, **values):
    """``df`` with the columns of the row whose ``key`` is smallest set to ``values``."""
    low = df.agg(F.min(key)).first()[0]
    for column, value in values.items():
        df = df.withColumn(column, F.when(F.col(key) == low, value).otherwise(F.col(column)))
    return df


def _feed_corruptions(table: str, key: str) -> dict:
    """A feed table's corruptions, by the column its expectation checks."""

    def second():  # a column needs the session, which a module-level table does not have
        return F.col("rank") == 2

    required = [c for c in contract(*table.split("/")).required if c != "rank"]
    return {
        **{c: (lambda c: lambda t: {table: _null(t[table], c)})(c) for c in required},
        "rank/not-null": lambda t: {table: _null(t[table], "rank")},
        # a feed's second row takes rank 1: two rows of one rank
        "rank_unique": lambda t: {
            table: t[table].withColumn("rank", F.when(second(), 1).otherwise(F.col("rank")))
        },
        # a feed's second row repeats its first event
        "event_unique": lambda t: {table: _repeat_first_event(t[table], key)},
        "rank": lambda t: {table: t[table].withColumn("rank", F.col("rank") - 1)},
        # two rows of a feed swap places: rank 2 newer than rank 1
        "order_ok": lambda t: {
            table: t[table].withColumn(
                "rank",
                F.when(second(), 1).when(F.col("rank") == 1, 2).otherwise(F.col("rank")),
            )
        },
        # the store loses the feeds' smallest event
        "in_event_store": lambda t: {
            "feeds/event_store": t["feeds/event_store"].join(
                t[table].agg(F.min("event_id").alias("event_id")), "event_id", "left_anti"
            )
        },
    }


def _repeat_first_event(feed, key: str):
    from pyspark.sql import Window

    w = Window.partitionBy(key).orderBy("rank")
    first_event = F.first("event_id").over(w)
    return feed.withColumn(
        "event_id", F.when(F.col("rank") == 2, first_event).otherwise(F.col("event_id"))
    )


CORRUPTIONS = {
    "clean.events": {
        c: (lambda c: lambda t: {"clean/events": _null(t["clean/events"], c)})(c)
        for c in ("event_id", "producer_id", "created_at")
    }
    | {"event_id/unique": lambda t: {"clean/events": _again(t["clean/events"])}},
    "clean.follows": {
        c: (lambda c: lambda t: {"clean/follows": _null(t["clean/follows"], c)})(c)
        for c in ("consumer_id", "producer_id", "followed_at")
    }
    | {
        "consumer_id,producer_id": lambda t: {"clean/follows": _again(t["clean/follows"])},
        "not_self": lambda t: {
            "clean/follows": _first(
                t["clean/follows"], "consumer_id", producer_id=F.col("consumer_id")
            )
        },
    },
    "clean.views": {
        c: (lambda c: lambda t: {"clean/views": _null(t["clean/views"], c)})(c)
        for c in ("consumer_id", "viewed_at")
    },
    **{
        f"rates.{who}_rates": {
            f"{who}_id": (lambda n, i: lambda t: {n: _null(t[n], i)})(name, f"{who}_id"),
            f"{who}_id/unique": (lambda n: lambda t: {n: _again(t[n])})(name),
            rate: (lambda n, i, r: lambda t: {n: _first(t[n], i, **{r: F.lit(0.0)})})(
                name, f"{who}_id", rate
            ),
            # the rate of the graph's smallest id is lost
            "covers_graph": (
                lambda n, i: lambda t: {
                    n: t[n].join(t["clean/follows"].agg(F.min(i).alias(i)), i, "left_anti")
                }
            )(name, f"{who}_id"),
        }
        for who, rate in (("producer", "events_per_hour"), ("consumer", "views_per_hour"))
        for name in (f"rates/{who}_rates",)
    },
    "plan.edge_plan": {
        c: (lambda c: lambda t: {"plan/edge_plan": _null(t["plan/edge_plan"], c)})(c)
        for c in ("consumer_id", "producer_id")
    }
    | {
        # an edge's plan row without its source
        "source_id": lambda t: {
            "plan/edge_plan": _first(
                t["plan/edge_plan"], "consumer_id", source_id=F.lit(None).cast("string")
            )
        },
        "mode": lambda t: {
            "plan/edge_plan": _first(t["plan/edge_plan"], "consumer_id", mode=F.lit("both"))
        },
        "plan_rows": lambda t: {"plan/edge_plan": _again(t["plan/edge_plan"])},
        # a plan row for an edge nobody follows
        "in_graph": lambda t: {
            "plan/edge_plan": t["plan/edge_plan"].unionByName(
                t["plan/edge_plan"].limit(1).withColumn("producer_id", F.lit("nobody-follows"))
            )
        },
    },
    "plan.plan_cost": {
        "chosen_count": lambda t: {
            "plan/plan_cost": t["plan/plan_cost"].withColumn("chosen", F.lit(True))
        },
        # the served plan dearer than PushAll and PullAll
        "min_pure_cost": lambda t: {
            "plan/plan_cost": t["plan/plan_cost"].withColumn(
                "total_cost",
                F.when(F.col("chosen"), F.col("total_cost") * 1e6).otherwise(F.col("total_cost")),
            )
        },
        # a bound above every plan
        "cheapest_cost": lambda t: {
            "plan/plan_cost": t["plan/plan_cost"].withColumn(
                "lower_bound", F.col("total_cost") * 1e6
            )
        },
    },
    "feeds.producer_feed": _feed_corruptions("feeds/producer_feed", "producer_id"),
    "feeds.consumer_feed": _feed_corruptions("feeds/consumer_feed", "consumer_id")
    | {
        "pushed_edge": lambda t: {
            "plan/edge_plan": t["plan/edge_plan"].withColumn("mode", F.lit("pull"))
        }
    },
    "feeds.view_feed": _feed_corruptions("feeds/view_feed", "view_id"),
    "feeds.event_store": {
        c: (lambda c: lambda t: {"feeds/event_store": _null(t["feeds/event_store"], c)})(c)
        for c in ("event_id", "producer_id", "created_at")
    }
    | {"event_unique": lambda t: {"feeds/event_store": _again(t["feeds/event_store"])}},
}
"""Per table suite, one corruption of the day's tables for each of its expectations (keyed by
the column the expectation checks; ``/unique`` or ``/not-null`` where two check one column;
a feed table's not-nulls are its contract's required columns)."""


def _key(f: dict) -> str:
    kw = f["kwargs"]
    key = kw.get("column") or kw.get("column_A") or ",".join(kw.get("column_list", []))
    unique = f["expectation"] in ("expect_column_values_to_be_unique",)
    if unique and key in ("event_id", "producer_id", "consumer_id"):
        return f"{key}/unique"
    # a feed's rank is checked twice: present, and within 1..k
    not_null = f["expectation"] == "expect_column_values_to_not_be_null"
    return f"{key}/not-null" if not_null and key == "rank" else key


def test_every_expectation_fails_on_an_input_corrupted_for_it(spark, built_copy):
    """Each of the table suites' 64 expectations, on the churn day's tables with one
    corruption made for it, and the row accounting's two on a lost row and a lost count: each
    fails (on Great Expectations' pandas engine; the test above shows both engines agree and
    the gates failing on corrupted counts): every expectation of every suite fails."""

    wh = Storage.at(built_copy.warehouse)
    tables = {
        n: read_partition(spark, wh, contract(*n.split("/")), LAST).localCheckpoint()
        for n in checks.CHECKED_TABLES
    }
    # the served FF-PerPair plan has no shared views: one producer's feed stands in for one
    pf = tables["feeds/producer_feed"]
    first = pf.agg(F.min("producer_id")).first()[0]
    tables["feeds/view_feed"] = (
        pf.where(F.col("producer_id") == first)
        .withColumn("view_id", F.lit("v-1"))
        .select(*tables["feeds/view_feed"].columns)
    )
    declared = {}
    for path in schemas_root().joinpath("expectations").glob("*.json"):
        spec = validate.load_suite(path.stem)  # with the not-nulls the contracts require
        declared[spec["name"]] = sorted(
            _key({"expectation": e["type"], "kwargs": e["kwargs"]}) for e in spec["expectations"]
        )
    assert sum(map(len, declared.values())) == 67
    covered = {n: sorted(c) for n, c in CORRUPTIONS.items()}
    assert covered == {n: k for n, k in declared.items() if n in checks.table_checks(tables, True)}
    good = checks.table_checks(tables, True)
    clean = _validated(good, {"feed_k": built_copy.feed_k}, driver_rows=10**7)
    assert clean["success"], [n for n, r in clean["suites"].items() if not r["success"]]
    missed = []
    for round_ in range(max(map(len, CORRUPTIONS.values()))):
        frames, aimed = {}, {}
        for suite, corruptions in CORRUPTIONS.items():
            keys = sorted(corruptions)
            if round_ < len(keys):
                broken = {**tables, **corruptions[keys[round_]](tables)}
                frames[suite] = checks.table_checks(broken, True)[suite]
                aimed[suite] = keys[round_]
        got = _validated(frames, {"feed_k": built_copy.feed_k}, driver_rows=10**7)
        for suite, key in aimed.items():
            on_pandas = {_key(f): f["unexpected_count"] for f in got["suites"][suite]["failed"]}
            if key not in on_pandas:
                missed.append((suite, key))
            # judged from one query, it fails too, with the pandas engine's count
            specs = validate.load_suite(suite)["expectations"]
            params = {"feed_k": built_copy.feed_k}
            counted = one_pass.suite_results(
                frames[suite], one_pass.configurations(specs, params), COUNTED
            )
            assert counted is not None
            one_query = {
                _key(
                    {
                        "expectation": r.expectation_config.type,
                        "kwargs": r.expectation_config.kwargs,
                    }
                ): r.result.get("unexpected_count")
                for r in counted
                if not r.success
            }
            if one_query.get(key) != on_pandas.get(key, "missed"):
                missed.append((suite, key, "one pass", one_query.get(key), on_pandas.get(key)))
    assert missed == []

    # the row accounting's two expectations: a row read and never written (the ingest record
    # counts one more), and a consumer's count lost from clean/view_counts as written
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    from support.paths import version

    ingest = ingested(wh, LAST)
    lost = recounted(ingest, "events", rows_in=ingest.tables["events"].rows_in + 1)
    folder = version(built_copy.warehouse, "clean", "view_counts", LAST)
    whole = pads.dataset(str(folder)).to_table()
    for f in folder.glob("*"):
        f.unlink()
    pq.write_table(whole.slice(1), folder / "part-0.parquet")
    frames = {"ingest.accounting": checks.accounting_check(spark, wh, LAST, lost)}
    got = _validated(frames, {"feed_k": built_copy.feed_k}, driver_rows=10**7)
    failed = {_key(f) for f in got["suites"]["ingest.accounting"]["failed"]}
    assert failed == set(declared["ingest.accounting"]) == {"rows_in", "clean_rows"}

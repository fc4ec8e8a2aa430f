"""Decision rules and the cost model on a graph small enough to work by hand.

Producers: p1 (phi=1), p2 (phi=4), p3 (phi=0.5). H=3, L=1, so H/L=3.
Consumers: c1 (theta=6) follows p1, p2; c2 (theta=3) follows p1; c3 (theta=1.5) follows p1, p2, p3.
"""

from __future__ import annotations

import pytest

from jobs.selection import cost, feeding_frenzy
from jobs.stages.plan import consumer_sources

H, L = 3.0, 1.0
PHI = {"p1": 1.0, "p2": 4.0, "p3": 0.5}
THETA = {"c1": 6.0, "c2": 3.0, "c3": 1.5}
FOLLOWS = [("c1", "p1"), ("c1", "p2"), ("c2", "p1"), ("c3", "p1"), ("c3", "p2"), ("c3", "p3")]


@pytest.fixture
def edges(spark):
    follows = spark.createDataFrame(FOLLOWS, "consumer_id string, producer_id string")
    pr = spark.createDataFrame(list(PHI.items()), "producer_id string, events_per_hour double")
    cr = spark.createDataFrame(list(THETA.items()), "consumer_id string, views_per_hour double")
    return feeding_frenzy.edge_inputs(follows, pr, cr)


def modes(df) -> dict[tuple[str, str], str]:
    return {(r.consumer_id, r.producer_id): r.mode for r in df.collect()}


def test_edge_inputs_ratio_and_lemma2_sums(edges):
    assert "phi_sum" not in edges.columns  # computed only where Lemma 2 is applied
    rows = {
        (r.consumer_id, r.producer_id): r for r in feeding_frenzy.consumer_totals(edges).collect()
    }
    assert rows[("c1", "p2")].ratio == pytest.approx(1.5)
    assert rows[("c3", "p2")].ratio == pytest.approx(0.375)
    # Lemma 2 compares theta with the sum of the consumer's producers' rates
    assert rows[("c1", "p1")].phi_sum == pytest.approx(5.0)
    assert rows[("c2", "p1")].phi_sum == pytest.approx(1.0)
    assert rows[("c3", "p3")].phi_sum == pytest.approx(5.5)


def test_ff_per_pair_is_lemma1_with_push_at_the_threshold(edges):
    got = modes(feeding_frenzy.ff_per_pair(edges, H / L))
    assert got == {
        ("c1", "p1"): "push",  # 6/1 >= 3
        ("c1", "p2"): "pull",  # 6/4 < 3
        ("c2", "p1"): "push",  # 3/1 == 3: push at the threshold (Lemma 1 uses >=)
        ("c3", "p1"): "pull",
        ("c3", "p2"): "pull",
        ("c3", "p3"): "push",  # 1.5/0.5 == 3
    }


@pytest.mark.parametrize(("theta", "expected"), [(2.999, "pull"), (3.0, "push"), (3.001, "push")])
def test_lemma1_around_the_threshold(spark, theta, expected):
    follows = spark.createDataFrame([("c", "p")], "consumer_id string, producer_id string")
    pr = spark.createDataFrame([("p", 1.0)], "producer_id string, events_per_hour double")
    cr = spark.createDataFrame([("c", theta)], "consumer_id string, views_per_hour double")
    e = feeding_frenzy.edge_inputs(follows, pr, cr)
    assert modes(feeding_frenzy.ff_per_pair(e, 3.0)) == {("c", "p"): expected}


def test_ff_consumer_is_lemma2(edges):
    got = modes(feeding_frenzy.ff_consumer(edges, H / L))
    # c1: 6 < 3*5 -> pull all; c2: 3 >= 3*1 -> push; c3: 1.5 < 3*5.5 -> pull all
    assert got == {
        ("c1", "p1"): "pull",
        ("c1", "p2"): "pull",
        ("c2", "p1"): "push",
        ("c3", "p1"): "pull",
        ("c3", "p2"): "pull",
        ("c3", "p3"): "pull",
    }


def test_source_ids_name_the_feed_or_the_producer(edges):
    rows = feeding_frenzy.ff_per_pair(edges, H / L).collect()
    for r in rows:
        assert r.source_id == (r.consumer_id if r.mode == "push" else r.producer_id)


def _costs(spark, edges):
    stacked = (
        feeding_frenzy.push_all(edges)
        .unionByName(feeding_frenzy.pull_all(edges))
        .unionByName(feeding_frenzy.ff_per_pair(edges, H / L))
        .unionByName(feeding_frenzy.ff_consumer(edges, H / L))
    )
    members = spark.createDataFrame(
        [], "strategy string, view_id string, producer_id string, phi double"
    )
    names = ["push-all", "pull-all", "ff-per-pair", "ff-consumer"]
    return {
        r.strategy: r.asDict()
        for r in cost.plan_costs(stacked, members, cost.CostModel(H, L), names).collect()
    }


def test_costs_worked_by_hand(spark, edges):
    c = _costs(spark, edges)
    # FF-PerPair: c1 push{p1} pull{p2}: M=3*1, EV=6*1*2; c2 push{p1}: M=3, EV=0 (one source);
    # c3 push{p3} pull{p1,p2}: M=3*0.5, EV=1.5*1*3
    assert c["ff-per-pair"]["maintenance_cost"] == pytest.approx(7.5)
    assert c["ff-per-pair"]["evaluation_cost"] == pytest.approx(16.5)
    assert c["ff-per-pair"]["total_cost"] == pytest.approx(24.0)
    # PushAll: H * sum over edges of phi = 3 * (5 + 1 + 5.5); every consumer reads one source
    assert c["push-all"]["total_cost"] == pytest.approx(34.5)
    assert c["push-all"]["evaluation_cost"] == 0
    # PullAll: c1 reads 2 sources (12), c2 one source (free), c3 three (4.5)
    assert c["pull-all"]["total_cost"] == pytest.approx(16.5)
    assert c["pull-all"]["maintenance_cost"] == 0
    # FF-Consumer: only c2 pushes (M=3); c1 and c3 pull everything (12 + 4.5)
    assert c["ff-consumer"]["total_cost"] == pytest.approx(19.5)
    assert c["ff-per-pair"]["push_edges"] == 3 and c["ff-per-pair"]["pull_edges"] == 3
    assert (
        c["push-all"]["views"] == 3
        and c["pull-all"]["views"] == 0
        and c["ff-consumer"]["views"] == 1
    )


def test_latency_percentiles_are_view_weighted(spark, edges):
    c = _costs(spark, edges)
    # ff-per-pair sources per consumer: c1 2 (theta 6), c2 1 (3), c3 3 (1.5); total weight 10.5
    # CDF: 1 -> 3/10.5 = .29, 2 -> 9/10.5 = .86, 3 -> 1.0
    assert (
        c["ff-per-pair"]["sources_p50"],
        c["ff-per-pair"]["sources_p95"],
        c["ff-per-pair"]["sources_p99"],
    ) == (
        2.0,
        3.0,
        3.0,
    )
    assert (c["push-all"]["sources_p50"], c["push-all"]["sources_p99"]) == (1.0, 1.0)


def test_choose_takes_the_cheapest_and_breaks_ties_by_order():
    order = ["push-all", "pull-all", "ff-per-pair", "ff-consumer"]
    assert (
        cost.choose({"push-all": 34.5, "pull-all": 16.5, "ff-per-pair": 24.0}, order) == "pull-all"
    )
    assert cost.choose({"push-all": 10.0, "ff-per-pair": 10.0 + 1e-12}, order) == "push-all"
    assert (
        cost.choose({"push-all": 10.0, "ff-per-pair": 9.0}, order, forced="push-all") == "push-all"
    )


def test_consumer_sources_one_row_per_source(spark, edges):
    plan = feeding_frenzy.ff_per_pair(edges, H / L)
    got = sorted(tuple(r) for r in consumer_sources(plan).collect())
    assert got == [
        ("c1", "consumer_feed", "c1"),
        ("c1", "producer", "p2"),
        ("c2", "consumer_feed", "c2"),
        ("c3", "consumer_feed", "c3"),
        ("c3", "producer", "p1"),
        ("c3", "producer", "p2"),
    ]


def test_consumer_sources_of_a_plan_with_shared_views(spark):
    # c1 reads view v1 for two producers and pushes two more; c2 reads v1 and v2 and pulls p5
    plan = spark.createDataFrame(
        [
            ("c1", "p1", "view", "v1"),
            ("c1", "p2", "view", "v1"),
            ("c1", "p3", "push", "c1"),
            ("c1", "p4", "push", "c1"),
            ("c2", "p1", "view", "v1"),
            ("c2", "p3", "view", "v2"),
            ("c2", "p5", "pull", "p5"),
        ],
        "consumer_id string, producer_id string, mode string, source_id string",
    )
    got = sorted(tuple(r) for r in consumer_sources(plan).collect())
    assert got == [
        ("c1", "consumer_feed", "c1"),
        ("c1", "view", "v1"),
        ("c2", "producer", "p5"),
        ("c2", "view", "v1"),
        ("c2", "view", "v2"),
    ]
    # told the plan has no views, the view edges are not read
    assert sorted(tuple(r) for r in consumer_sources(plan, views=False).collect()) == [
        ("c1", "consumer_feed", "c1"),
        ("c2", "producer", "p5"),
    ]


def test_an_empty_graph_costs_nothing_under_every_strategy(spark):
    empty = spark.createDataFrame([], "consumer_id string, producer_id string")
    pr = spark.createDataFrame([], "producer_id string, events_per_hour double")
    cr = spark.createDataFrame([], "consumer_id string, views_per_hour double")
    e = feeding_frenzy.edge_inputs(empty, pr, cr)
    got = _costs(spark, e)
    assert set(got) == {"push-all", "pull-all", "ff-per-pair", "ff-consumer"}
    assert all(r["total_cost"] == 0 and r["consumers"] == 0 for r in got.values())


@pytest.mark.parametrize(
    ("current", "theta", "expected"),
    [
        (None, 2.9, "pull"),  # no current mode: the plain rule at H/L = 3
        ("push", 2.9, "push"),  # pushed now: stays pushed down to 3/1.2 = 2.5
        ("push", 2.4, "pull"),
        ("pull", 3.3, "pull"),  # pulled now: needs 3*1.2 = 3.6
        ("pull", 3.6, "push"),
    ],
)
def test_hysteresis_around_the_threshold(spark, current, theta, expected):
    follows = spark.createDataFrame([("c", "p")], "consumer_id string, producer_id string")
    pr = spark.createDataFrame([("p", 1.0)], "producer_id string, events_per_hour double")
    cr = spark.createDataFrame([("c", theta)], "consumer_id string, views_per_hour double")
    plan = None
    if current is not None:
        plan = spark.createDataFrame(
            [("c", "p", current)], "consumer_id string, producer_id string, mode string"
        )
    e = feeding_frenzy.edge_inputs(follows, pr, cr, plan)
    assert modes(feeding_frenzy.ff_per_pair(e, 3.0, margin=0.2)) == {("c", "p"): expected}
    assert modes(feeding_frenzy.ff_consumer(e, 3.0, margin=0.2)) == {("c", "p"): expected}


def test_scoped_conf_sets_for_the_block_and_restores_the_session(spark):
    from jobs.common.config import Settings
    from jobs.common.spark import scoped_conf

    # neither is set when the session starts (conftest.py): both are the session's own
    key, other = "spark.sql.inMemoryColumnarStorage.compressed", "spark.sql.files.maxRecordsPerFile"
    before = spark.conf.get(other)
    spark.conf.set(other, "7")
    try:
        block = scoped_conf(spark, {key: "false", other: "3"}, Settings())
        with pytest.raises(RuntimeError), block:
            assert (spark.conf.get(key), spark.conf.get(other)) == ("false", "3")
            raise RuntimeError("a stage that fails still gives the session back")
        # unset before: back to Spark's default; set before: back to that value
        assert (spark.conf.get(key), spark.conf.get(other)) == ("true", "7")
        # what the operator sets in spark_conf is theirs: left alone
        own = Settings(spark_conf={key: "true"})
        with scoped_conf(spark, {key: "false"}, own):
            assert spark.conf.get(key) == "true"
        # and so is what they set for the whole application (spark-submit --conf)
        app = spark.sparkContext._jsc.sc().conf()  # the running application's own conf
        app.set(key, "true")
        spark.conf.set(key, "true")
        try:
            with scoped_conf(spark, {key: "false", other: "3"}, Settings()):
                assert (spark.conf.get(key), spark.conf.get(other)) == ("true", "3")
        finally:
            app.remove(key)
            spark.conf.unset(key)
    finally:
        spark.conf.set(other, before)


def test_side_by_side_returns_in_order_and_raises_only_once_all_have_stopped(spark):
    """Threads that each run Spark jobs: results in the order given, the caller's local
    properties inherited, and a task's error raised after the slower task has finished."""
    import threading
    import time

    from jobs.common.spark import side_by_side

    sc = spark.sparkContext
    sc.setLocalProperty("feedpipe.test", "caller")
    finished = threading.Event()

    def total(n: int):
        return lambda: spark.range(n).selectExpr("sum(id) AS s").first()["s"]

    def inherited():
        return sc.getLocalProperty("feedpipe.test")

    def slow():
        time.sleep(1.0)
        out = total(10)()
        finished.set()
        return out

    def fails():
        raise ValueError("this task fails")

    try:
        assert side_by_side(spark, total(1000), total(10), inherited) == [499500, 45, "caller"]
        with pytest.raises(ValueError, match="this task fails"):
            side_by_side(spark, fails, slow)
        assert finished.is_set()
    finally:
        sc.setLocalProperty("feedpipe.test", None)


def test_plans_with_a_current_plan_are_kept_partitioned_by_consumer(spark):
    """Under the plan stage's settings the current plan's join leaves the edges partitioned by
    consumer, so the costs' per-consumer sums need no shuffle; the costs are the same."""
    import re

    from pyspark.sql import functions as F

    from jobs.common.config import Settings
    from jobs.common.spark import scoped_conf
    from jobs.stages.plan import PLAN_CONF, plans_of

    consumers = [f"c{i:02d}" for i in range(12)]
    producers = ["p0", "p1", "p2"]
    follows = spark.createDataFrame(
        [(c, p) for c in consumers for p in producers], "consumer_id string, producer_id string"
    )
    pr = spark.createDataFrame(
        [(p, 1.0) for p in producers], "producer_id string, events_per_hour double"
    )
    # even consumers view far above H/L = 3 (push), odd ones far below (pull)
    cr = spark.createDataFrame(
        [(c, 10.0 if i % 2 == 0 else 0.5) for i, c in enumerate(consumers)],
        "consumer_id string, views_per_hour double",
    )
    # served now: every edge of the first six consumers is pulled; the rest are new edges
    current = spark.createDataFrame(
        [(c, p, "pull") for c in consumers[:6] for p in producers],
        "consumer_id string, producer_id string, mode string",
    )
    settings = Settings(strategies=("ff-per-pair",), strategy="ff-per-pair")
    # the rates are broadcast, as small tables are; the current plan is not, as at scale
    pr, cr = F.broadcast(pr), F.broadcast(cr)
    no_broadcast = {"spark.sql.autoBroadcastJoinThreshold": "-1"}

    def shape(df) -> str:
        return df._jdf.queryExecution().executedPlan().toString()

    def priced(conf: dict[str, str]) -> tuple[dict, str, set]:
        with scoped_conf(spark, conf, Settings()):
            plans = plans_of(feeding_frenzy.edge_inputs(follows, pr, cr, current), settings)
            try:
                (row,) = plans.costs.collect()
                sources = consumer_sources(plans.stacked, views=False)
                rows = {tuple(r) for r in sources.collect()}
                return row.asDict(), shape(plans.costs) + shape(sources), rows
            finally:
                plans.release()

    row, plan_shape, sources = priced({**PLAN_CONF, **no_broadcast})
    plain_row, plain_shape, plain_sources = priced(no_broadcast)
    # the costs' per-consumer sums and the sources' distinct personal feeds
    per_consumer = (
        r"Exchange hashpartitioning\(strategy#\d+, consumer_id#\d+",
        r"Exchange hashpartitioning\(consumer_id#\d+, \d+\), ENSURE_REQUIREMENTS",
    )
    for pattern in per_consumer:
        assert re.search(pattern, plain_shape) and not re.search(pattern, plan_shape)
    assert row == plain_row
    # a personal feed per pushing consumer, a producer row per pulled edge
    feeds = {(c, "consumer_feed", c) for c in consumers[::2]}
    assert (
        sources
        == plain_sources
        == feeds | {(c, "producer", p) for c in consumers[1::2] for p in producers}
    )
    # c00, c02, c04 are pulled now and pushed under the plan: 3 edges each change mode
    assert (row["push_edges"], row["pull_edges"], row["mode_changes"]) == (18, 18, 9)
    assert row["consumers"] == 12

"""The pipeline end to end on a generated workload with churn.

* Core correctness: for every strategy and coherency mode, every consumer's assembled feed
  equals the naive answer computed from the landing files alone (``naive.py``).
* Incremental maintenance equals a full refresh and the naive answer, every day of five, with
  follows and unfollows every day and edges moving between push and pull both ways.
* Per-producer coherency: k,t-diversity, gapless, time-ordered, duplicate-free feeds, with a
  producer that posts far faster than the others.
* Rerunning a day gives the same rows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import naive
import pandas as pd
import pytest

from jobs.common.config import GLOBAL_ONLY, SHARED_VIEW_STRATEGIES, STRATEGIES, Settings
from jobs.common.storage import Storage
from jobs.common.tables import contract, read_partition
from jobs.serving.reader import FeedReader
from jobs.stages import runner
from jobs.workloads.generate import PROFILES, generate, scaled

START = dt.date(2026, 1, 1)
DAYS = 5
K = 5
K_P = 2
HOURS = 6.0
FAST = "fast-producer"
BUILD = ("ingest", "rates", "plan", "materialize")


def run_build(spark, settings: Settings, ds: dt.date, full_refresh: bool = False) -> None:
    for stage in BUILD:
        runner.run_stage(stage, settings, ds, spark, full_refresh)


def add_fast_producer(landing: Path, consumers: list[str]) -> None:
    """A producer posting 40 events a day, all in the last four hours (about 20 times the
    usual rate), followed from day 2 by ``consumers``."""
    day2 = START + dt.timedelta(days=1)
    rows = [
        {"consumer_id": c, "producer_id": FAST, "ts": f"{day2}T00:30:00Z", "op": "follow"}
        for c in consumers
    ]
    pd.DataFrame(rows).to_csv(landing / "follows" / f"ds={day2}" / "fast.csv", index=False)
    for i in range(DAYS):
        day = START + dt.timedelta(days=i)
        lines = [
            {
                "event_id": f"fast-{day}-{j:02d}",
                "producer_id": FAST,
                "created_at": f"{day}T{20 + j // 10:02d}:{(j % 10) * 6:02d}:00Z",
            }
            for j in range(40)
        ]
        text = "\n".join(json.dumps(x) for x in lines) + "\n"
        (landing / "events" / f"ds={day}" / "fast.jsonl").write_text(text)


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> Path:
    landing = tmp_path_factory.mktemp("landing")
    # 3% of edges unfollowed (and as many followed) a day: churn every day
    profile = dataclasses.replace(scaled(PROFILES["ff2010"], 0.004), unfollow_share=0.03)
    # mixed formats: the ingest must not care
    generate(
        Storage.at(str(landing)),
        START,
        DAYS,
        profile,
        seed=11,
        formats={"follows": "csv", "events": "jsonl", "views": "parquet"},
        gzip_text=True,
    )
    first = naive.graph(landing, START, START)
    add_fast_producer(landing, sorted({c for c, _ in first})[:25])
    return landing


@pytest.fixture(scope="module")
def incremental(spark, workload, tmp_path_factory) -> Settings:
    """Days 1..5 built incrementally, serving FF-PerPair (a mix of push and pull)."""
    s = Settings(
        landing=str(workload),
        warehouse=str(tmp_path_factory.mktemp("wh_inc")),
        feed_k=K,
        feed_k_per_producer=K_P,
        diversity_hours=HOURS,
        strategy="ff-per-pair",
        # the days are built with the Feeding Frenzy strategies; each shared-view strategy
        # is planned on the last day by the test that forces it
        strategies=tuple(x for x in STRATEGIES if x not in SHARED_VIEW_STRATEGIES),
        shuffle_partitions=4,
    )
    for i in range(DAYS):
        run_build(spark, s, START + dt.timedelta(days=i))
    return s


def table_rows(spark, settings: Settings, layer: str, table: str, ds: dt.date) -> list[tuple]:
    df = read_partition(spark, Storage.at(settings.warehouse), contract(layer, table), ds)
    return sorted(tuple(r) for r in df.collect())


def assembled(settings: Settings, ds: dt.date, consumers: list[str]) -> dict[str, list[str]]:
    got = FeedReader(settings.warehouse, ds).feeds(consumers, K)
    return {c: [it.event_id for it in feed] for c, feed in got.items()}


def edge_modes(spark, settings: Settings, ds: dt.date) -> dict[tuple[str, str], str]:
    df = read_partition(spark, Storage.at(settings.warehouse), contract("plan", "edge_plan"), ds)
    return {(r.consumer_id, r.producer_id): r.mode for r in df.collect()}


def test_the_duckdb_reference_gives_the_same_rates_plan_and_feeds_every_day(incremental, tmp_path):
    """bench/'s DuckDB reference (the baseline of the benchmarks, written in SQL from the
    formulas of docs/rates.md and the Feeding Frenzy rules) against the Spark stages, day by
    day: rates equal to 1e-9, the same FF-PerPair plan, consumer sources and cost row
    (costs, edge counts, mode changes, latency percentiles), and the same producer and
    consumer feeds (the reference recomputes feeds from all events; the stages build them
    incrementally)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import duckdb_reference as ref

    for i in range(DAYS):
        ds = START + dt.timedelta(days=i)
        for stage in ("rates", "plan", "materialize"):
            ref.run(stage, incremental, tmp_path, ds)
        diff = ref.compare(incremental.warehouse, tmp_path, ds)
        assert not ref.agrees(diff), (ds, ref.agrees(diff))
        assert diff["consumer_feed"]["rows"][0] > 0
    modes = pd.read_parquet(tmp_path / "edge_plan" / f"ds={ds}")["mode"].value_counts()
    assert modes.get("push", 0) > 0 and modes.get("pull", 0) > 0, modes


def test_incremental_equals_full_refresh_and_the_naive_answer_every_day(
    spark, workload, incremental, tmp_path
):
    full = Settings(**{**incremental.as_dict(), "warehouse": str(tmp_path / "wh_full")})
    moves = {"push->pull": 0, "pull->push": 0}
    churn = {"follow": 0, "unfollow": 0}
    for i in range(DAYS):
        ds = START + dt.timedelta(days=i)
        run_build(spark, full, ds, full_refresh=True)
        for table in ("producer_feed", "consumer_feed"):
            inc_rows = table_rows(spark, incremental, "feeds", table, ds)
            assert inc_rows, f"{table} is empty on {ds}"
            assert inc_rows == table_rows(spark, full, "feeds", table, ds), (
                f"{table} differs on {ds}"
            )
        expected = naive.feeds(workload, ds, START, K)
        got = assembled(incremental, ds, sorted(expected))
        wrong = [c for c in expected if got[c] != expected[c]]
        assert not wrong, f"{ds}: {len(wrong)} of {len(expected)} feeds differ, e.g. {wrong[:3]}"
        if i > 0:
            before = edge_modes(spark, incremental, ds - dt.timedelta(days=1))
            after = edge_modes(spark, incremental, ds)
            for edge, mode in after.items():
                if before.get(edge, mode) != mode:
                    moves[f"{before[edge]}->{mode}"] += 1
            changes = naive.read_table(workload, "follows", ds)
            for op in churn:
                churn[op] += int((changes["op"] == op).sum())
    # follows, unfollows and plan changes both ways really exercised the incremental paths
    assert all(n > 0 for n in moves.values()), moves
    assert all(n > 0 for n in churn.values()), churn


def test_a_new_follow_shows_the_latest_events_at_once(spark, workload, incremental):
    day2 = START + dt.timedelta(days=1)
    followers = sorted({c for c, p in naive.graph(workload, day2, START) if p == FAST})
    expected = naive.feeds(workload, day2, START, K)
    # consumers whose naive feed on the day of the follow holds the new producer's events
    showing = [c for c in followers if any(e.startswith("fast-") for e in expected[c])]
    assert len(showing) >= 10
    got = assembled(incremental, day2, showing)
    assert all(got[c] == expected[c] for c in showing)
    assert all(f"fast-{day2}-39" in got[c] for c in showing)


@pytest.mark.parametrize(
    ("strategy", "coherency"),
    [
        (s, c)
        for c in ("global", "per_producer")
        for s in STRATEGIES
        if not (c == "per_producer" and s in GLOBAL_ONLY)
    ],
)
def test_assembled_feed_equals_the_naive_answer(spark, workload, incremental, strategy, coherency):
    ds = START + dt.timedelta(days=DAYS - 1)
    s = Settings(**{**incremental.as_dict(), "strategy": strategy, "coherency": coherency})
    # replan the last day with this strategy; materialize from the previous day's
    # FF-PerPair state, so edges move between push and pull
    runner.run_stage("plan", s, ds, spark)
    runner.run_stage("materialize", s, ds, spark)
    if coherency == "global":
        expected = naive.feeds(workload, ds, START, K)
    else:
        expected = naive.feeds_per_producer(workload, ds, START, K, K_P, HOURS)
    consumers = sorted(expected)
    got = assembled(s, ds, [*consumers, "nobody-follows-nothing"])
    assert got.pop("nobody-follows-nothing") == []
    mismatched = [c for c in consumers if got[c] != expected[c]]
    assert not mismatched, (
        f"{len(mismatched)} of {len(consumers)} feeds differ, e.g. {mismatched[:3]}"
    )
    plan = edge_modes(spark, s, ds)
    pulled_consumers = {c for (c, _), m in plan.items() if m == "pull"}
    if strategy == "pull-all":
        assert set(plan.values()) == {"pull"}
    elif strategy == "push-all":
        # only consumers without a feed view in the last 7 days (from the landing files) pull
        views = pd.concat(
            [
                naive.read_table(workload, "views", ds - dt.timedelta(days=i))
                for i in range(7)
                if ds - dt.timedelta(days=i) >= START
            ]
        )
        idle = {c for c, _ in plan} - set(views["consumer_id"])
        assert pulled_consumers == idle
    elif strategy in SHARED_VIEW_STRATEGIES:
        # shared views are read; parts where they would cost more serve FF-PerPair's plan
        assert "view" in set(plan.values()) and set(plan.values()) <= {"view", "push", "pull"}
        members = table_rows(spark, s, "plan", "view_members", ds)
        follows = {}
        for c, p in plan:
            follows.setdefault(c, set()).add(p)
        view_of = {}
        for v, p in members:
            view_of.setdefault(v, set()).add(p)
        reads = table_rows(spark, s, "plan", "consumer_sources", ds)
        for c, kind, v in reads:
            if kind == "view":  # a consumer reads only views over producers it follows
                assert view_of[v] <= follows[c]
    else:
        assert set(plan.values()) == {"push", "pull"}


def test_per_producer_feeds_are_diverse_gapless_and_ordered(spark, workload, incremental):
    ds = START + dt.timedelta(days=DAYS - 1)
    s = Settings(**{**incremental.as_dict(), "coherency": "per_producer"})
    runner.run_stage("plan", s, ds, spark)
    runner.run_stage("materialize", s, ds, spark)
    ev = naive.events(workload, ds, START).set_index("event_id")
    by_producer = {
        p: list(g.sort_values(["created_at", "event_id"], ascending=False).index)
        for p, g in ev.reset_index().set_index("event_id").groupby("producer_id")
    }
    since = pd.Timestamp(ds + dt.timedelta(days=1), tz="UTC") - pd.Timedelta(hours=HOURS)
    graph = naive.graph(workload, ds, START)
    follows: dict[str, set[str]] = {}
    for c, p in graph:
        follows.setdefault(c, set()).add(p)
    feeds = FeedReader(s.warehouse, ds).feeds(sorted(follows), K)
    checked_fast = 0
    for c, feed in feeds.items():
        ids = [it.event_id for it in feed]
        assert len(ids) == len(set(ids)) and len(ids) <= K, c  # no duplicates, at most k
        keys = [(ev.loc[i, "created_at"], i) for i in ids]
        assert keys == sorted(keys, reverse=True), c  # time-ordered, newest first
        count: dict[str, int] = {}
        for it in feed:
            assert it.producer_id in follows[c], c
            count[it.producer_id] = count.get(it.producer_id, 0) + 1
        for p, n in count.items():
            # gapless: a producer's shown events are its newest n; at most k_p of them
            assert n <= K_P, (c, p)
            assert [i for i in ids if ev.loc[i, "producer_id"] == p] == by_producer[p][:n], (c, p)
        # k,t-diversity with k = 1: a producer with a recent event missing from the feed
        # means no producer shows more than one
        recent = {
            p
            for p in follows[c]
            if p in by_producer and ev.loc[by_producer[p][0], "created_at"] >= since
        }
        if recent - set(count):
            assert max(count.values()) <= 1, c
        if FAST in follows[c]:
            checked_fast += 1
            assert count.get(FAST, 0) <= K_P
    assert checked_fast >= 20


def test_rerun_of_a_day_gives_the_same_rows(spark, incremental):
    ds = START + dt.timedelta(days=DAYS - 1)
    s = Settings(**{**incremental.as_dict(), "strategy": "auto"})
    tables = [
        ("clean", "follows"),
        ("clean", "events"),
        ("rates", "producer_rates"),
        ("rates", "consumer_rates"),
        ("plan", "edge_plan"),
        ("plan", "plan_cost"),
        ("plan", "consumer_sources"),
        ("feeds", "producer_feed"),
        ("feeds", "consumer_feed"),
    ]
    run_build(spark, s, ds)
    first = {t: table_rows(spark, s, *t, ds) for t in tables}
    run_build(spark, s, ds)
    for t in tables:
        assert table_rows(spark, s, *t, ds) == first[t], f"{t} changed on rerun"
    served = [r for r in table_rows(spark, s, "plan", "plan_cost", ds) if r[1]]
    assert len(served) == 1


@pytest.fixture
def built_copy(incremental, tmp_path) -> Settings:
    """A private copy of the incremental warehouse, so a test may damage it."""
    import shutil

    target = tmp_path / "wh"
    shutil.copytree(incremental.warehouse, target)
    return Settings(**{**incremental.as_dict(), "warehouse": str(target), "strategy": "auto"})


def test_validate_publish_and_report_a_good_day(spark, built_copy, tmp_path):
    import json

    ds = START + dt.timedelta(days=DAYS - 1)
    runner.run_stage("plan", built_copy, ds, spark)  # serve auto: the cost gate applies
    runner.run_stage("materialize", built_copy, ds, spark)
    runner.run_stage("validate", built_copy, ds, spark)
    runner.run_stage("publish", built_copy, ds, spark)
    wh = Path(built_copy.warehouse)
    manifest = json.loads((wh / "manifests" / f"ds={ds}" / "manifest.json").read_text())
    assert (wh / "manifests" / f"ds={ds}" / "_SUCCESS").exists()
    assert (wh / "manifests" / "latest").read_text() == ds.isoformat()
    # Data Docs: the index links every suite's validation page, and each page exists
    docs = wh / "quality" / f"ds={ds}" / "docs"
    results = json.loads((wh / "quality" / f"ds={ds}" / "results.json").read_text())
    index = (docs / "index.html").read_text()
    for suite in results["suites"]:
        layer, table = suite.split(".")
        (page,) = (docs / "validations" / layer / table).rglob("*.html")
        assert page.relative_to(docs).as_posix() in index, suite
    for table, c in manifest["input"].items():
        assert c["rows_in"] == c["clean"] + c["duplicates"] + c["quarantined"], table
    events_in = manifest["input"]["events"]["clean"]
    assert manifest["tables"]["clean/events"]["rows"] == events_in
    served = manifest["plan"]["served"]
    costs = {r["strategy"]: r["total_cost"] for r in manifest["plan"]["strategies"]}
    assert costs[served] == min(costs.values())
    check_report(built_copy, ds, tmp_path)


def latency_shares(settings: Settings, ds: dt.date) -> list[float]:
    """The served plan's feed views by sources read, in the report's buckets, counted here
    from the edge plan and the consumers' view rates: a consumer reads each pulled producer,
    each shared view and its own feed if anything is pushed; weights are views per hour."""
    wh = Path(settings.warehouse)
    plan = pd.read_parquet(wh / "plan" / "edge_plan" / f"ds={ds}")
    theta = pd.read_parquet(wh / "rates" / "consumer_rates" / f"ds={ds}").set_index("consumer_id")[
        "views_per_hour"
    ]
    sources: dict[str, set] = {}
    for r in plan.itertuples():
        sources.setdefault(r.consumer_id, set()).add(
            "own feed" if r.mode == "push" else (r.mode, r.source_id)
        )
    edges = ((0, 1), (2, 2), (3, 3), (4, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 10**9))
    weights = [0.0] * len(edges)
    for c, s in sources.items():
        w = theta.get(c)
        if w is None or pd.isna(w):
            continue
        (i,) = [i for i, (lo, hi) in enumerate(edges) if lo <= len(s) <= hi]
        weights[i] += w
    return [w / sum(weights) for w in weights]


def check_report(settings: Settings, ds: dt.date, tmp_path: Path) -> None:
    """The day's report, rendered by headless Chromium: its numbers and chart marks against
    the tables, the latency distribution against one counted here, and the charts drawn."""
    import browser

    wh = Path(settings.warehouse)
    page = browser.render(wh / "reports" / f"ds={ds}" / "index.html", tmp_path / "report.png")
    costs = pd.read_parquet(wh / "plan" / "plan_cost" / f"ds={ds}").sort_values("total_cost")
    served = costs[costs.chosen].iloc[0]
    assert page.text["status"] == "published"
    assert f"served plan: {served.strategy}" in page.text["served"]
    assert page.text["quality"] == "all suites passed"
    table = page.rows("plan-cost")[1:]
    assert [r[0] for r in table] == [
        s + (" (served)" if s == served.strategy else "") for s in costs.strategy
    ]
    assert [r[1] for r in table] == [f"{x:.1f}" for x in costs.total_cost]
    bars = page.marks["chart-cost"]
    assert bars["maintenance"] == pytest.approx(list(costs.maintenance_cost))
    assert bars["evaluation"] == pytest.approx(list(costs.evaluation_cost))
    split = page.marks["chart-split"]
    for mode in ("push", "pull", "view"):
        assert split[mode] == list(costs[f"{mode}_edges"].astype(float)), mode
    assert page.marks["chart-latency"]["latency"] == pytest.approx(
        latency_shares(settings, ds), abs=1e-6
    )
    p = {r[0]: r[1:4] for r in page.rows("latency")[1:]}
    assert p[served.strategy] == [f"{served[f'sources_p{q}']:g}" for q in (50, 95, 99)]

    flagged = pd.read_parquet(wh / "rates" / "producer_rates" / f"ds={ds}").flash.sum()
    assert page.text["flash"].startswith(f"{flagged} producer(s) flagged")

    days = sorted(d for d in (START + dt.timedelta(days=i) for i in range(DAYS)) if d <= ds)
    modeled, pure = [], []
    for d in days:
        c = pd.read_parquet(wh / "plan" / "plan_cost" / f"ds={d}")
        modeled.append(float(c[c.chosen].total_cost.iloc[0]))
        pure.append(float(c[c.strategy.isin(["push-all", "pull-all"])].total_cost.min()))
    assert page.marks["chart-trend"]["served"] == pytest.approx(modeled)
    assert page.marks["chart-trend"]["best-pure"] == pytest.approx(pure)
    trend = page.rows("trend")[1:]
    assert [r[0] for r in trend] == [d.isoformat() for d in reversed(days)]
    assert [r[2] for r in trend] == [f"{x:,.1f}" for x in reversed(modeled)]
    assert [r[-1] for r in trend] == ["yes"] + ["no"] * (len(days) - 1)

    # the charts were drawn: each series' colour covers part of the screenshot
    drawn = browser.colours(tmp_path / "report.png")
    for colour in ("#4a7fb5", "#e39b3a", "#8e6bb8", "#999999"):
        assert drawn.get(colour, 0) > 200, colour


def test_a_corrupted_feed_fails_validation_and_is_not_published(spark, built_copy):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.stages.publish import PublishRefused
    from jobs.stages.validate import ValidationFailed

    ds = START + dt.timedelta(days=DAYS - 1)
    folder = Path(built_copy.warehouse) / "feeds" / "consumer_feed" / f"ds={ds}"
    files = sorted(folder.glob("*.parquet"))
    table = pq.read_table(files[0])
    rank = table.column("rank").to_pylist()
    swapped = [rank[1], rank[0], *rank[2:]]  # two rows of one feed swap places: order broken
    i = table.schema.get_field_index("rank")
    swapped_column = pa.array(swapped, type=table.schema.field(i).type)  # the file's int32
    pq.write_table(table.set_column(i, "rank", swapped_column), files[0])
    (folder / f".{files[0].name}.crc").unlink()  # else Hadoop refuses the file's new bytes
    with pytest.raises(ValidationFailed, match=r"feeds\.consumer_feed.*order_ok"):
        runner.run_stage("validate", built_copy, ds, spark)
    results = json.loads(
        (Path(built_copy.warehouse) / "quality" / f"ds={ds}" / "results.json").read_text()
    )
    assert not results["success"]
    (failed,) = results["suites"]["feeds.consumer_feed"]["failed"]
    # the failed suite ran again with samples: rank 2 is now newer than rank 1
    assert (failed["unexpected_count"], failed["sample"]) == (1, [False]), failed
    with pytest.raises(PublishRefused, match="failed validation"):
        runner.run_stage("publish", built_copy, ds, spark)
    assert not (Path(built_copy.warehouse) / "manifests" / f"ds={ds}" / "_SUCCESS").exists()
    # the day's report says what failed
    import browser

    report = Path(built_copy.warehouse) / "reports" / f"ds={ds}" / "index.html"
    page = browser.Page(report.read_text())
    assert (page.text["status"], page.text["quality"]) == ("not published", "validation FAILED")
    suites = {r[0]: r[2] for r in page.rows("quality-suites")[1:]}
    assert suites["feeds.consumer_feed"] == failed["expectation"]
    assert suites["clean.events"] == "0"


def test_row_accounting_counts_what_was_written(spark, built_copy):
    """The accounting frame validate checks: rows accounted per landing table equal the rows
    in the written clean and quarantine files (counted here with pyarrow), so a row that ingest
    read and did not write shows up as a mismatch."""
    import pyarrow.dataset as pads

    from jobs.common.storage import Storage
    from jobs.stages.validate import accounting_check

    ds = START + dt.timedelta(days=DAYS - 1)
    wh = Path(built_copy.warehouse)
    ingest = json.loads((wh / "manifests" / f"ds={ds}" / "stages" / "ingest.json").read_text())

    def rows(*parts: str) -> int:
        folder = wh.joinpath(*parts)
        return pads.dataset(str(folder)).count_rows() if folder.exists() else 0

    expected = {}
    for table, c in ingest["tables"].items():
        quarantined = rows("quarantine", table, f"ds={ds}")
        clean = c["clean"] if table == "follows" else rows("clean", table, f"ds={ds}")
        expected[table] = clean + quarantined
    assert set(expected) == {"events", "follows", "views"}
    assert expected["events"] > 0 and expected["views"] > 0

    ingest["tables"]["events"]["rows_in"] += 1  # one row read and never written
    got = accounting_check(spark, Storage.at(str(wh)), ds, ingest).toPandas()
    got = got.set_index("table")
    assert got["rows_accounted"].to_dict() == expected
    mismatched = sorted(got.index[got["rows_in"] != got["rows_accounted"]])
    assert mismatched == ["events"]

    # ingest's per-day counts (what rates reads) sum to the clean rows; a lost count shows
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for table, name in (("events", "event_counts"), ("views", "view_counts")):
        counted = pc.sum(pads.dataset(str(wh / "clean" / name / f"ds={ds}")).to_table()["n"])
        assert counted.as_py() == rows("clean", table, f"ds={ds}") == got["clean_rows"][table]
        assert got["clean_counted"][table] == counted.as_py()
    assert got["clean_rows"].isna()["follows"] and got["clean_counted"].isna()["follows"]
    folder = wh / "clean" / "view_counts" / f"ds={ds}"
    whole = pads.dataset(str(folder)).to_table()
    for f in folder.glob("*.parquet"):
        f.unlink()
    pq.write_table(whole.slice(1), folder / "part-0.parquet")  # one consumer's count lost
    got = accounting_check(spark, Storage.at(str(wh)), ds, ingest).toPandas().set_index("table")
    got = got.drop(index="follows")  # no counts for the graph (NaN != NaN)
    assert sorted(got.index[got["clean_rows"] != got["clean_counted"]]) == ["views"]


def test_feed_command_line_json_shapes(workload, built_copy, tmp_path):
    import json
    import subprocess
    import sys

    ds = START + dt.timedelta(days=DAYS - 1)
    expected = naive.feeds(workload, ds, START, K)
    some = sorted(expected)[:5]
    base = [
        sys.executable,
        "-m",
        "jobs",
        "feed",
        "--ds",
        str(ds),
        "--warehouse",
        built_copy.warehouse,
    ]
    one = subprocess.run(
        [*base, "--consumer", some[0], "--format", "json"], capture_output=True, text=True
    )
    assert one.returncode == 0, one.stderr
    items = json.loads(one.stdout)
    assert [i["event_id"] for i in items] == expected[some[0]]
    assert all(set(i) == {"event_id", "producer_id", "created_at"} for i in items)
    assert all(i["created_at"].endswith("Z") for i in items)
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(some) + "\n")
    many = subprocess.run(
        [*base, "--consumers", str(ids), "--k", "3"], capture_output=True, text=True
    )
    lines = [json.loads(line) for line in many.stdout.splitlines()]
    assert [line["consumer_id"] for line in lines] == some
    assert all(
        [i["event_id"] for i in line["feed"]] == expected[line["consumer_id"]][:3] for line in lines
    )


def test_publish_to_s3_copies_whole_days_and_a_failed_publish_moves_no_pointer(
    spark, workload, built_copy, s3_server, monkeypatch
):
    """``publish_to``: a day is copied to a real S3 server (multipart above the part size), its
    pointers move after the data; a publish failing half-way leaves readers on the previous
    complete day and the retry cleans up; re-publishing a past day keeps ``latest``."""
    import threading

    import boto3

    from jobs.common.pointers import PublishFailed, resolve
    from jobs.common.tables import PUBLISHED_TABLES
    from jobs.stages import publish
    from jobs.stages.publish_s3 import listing

    for key, value in s3_server.items():
        monkeypatch.setenv(key, value)
    part = 16 * 1024
    s = dataclasses.replace(
        built_copy, publish_to="s3://pub/feedpipe", publish_part_mb=part / 1024 / 1024
    )
    s3 = boto3.client("s3", endpoint_url=s3_server["FEEDPIPE_S3_ENDPOINT"])
    s3.create_bucket(Bucket="pub")
    d1, d2 = START + dt.timedelta(days=2), START + dt.timedelta(days=3)
    for ds in (d1, d2):
        runner.run_stage("validate", s, ds, spark)

    def objects(prefix: str) -> dict[str, int]:
        return listing(s3, "pub", prefix)

    def snapshots(ds: dt.date) -> set[str]:
        prefix = f"feedpipe/snapshots/ds={ds}/"
        return {k[len(prefix) :].split("/", 1)[0] for k in objects(prefix)}

    def published_feeds(ds: dt.date | None) -> dict[str, list[str]]:
        reader = FeedReader.published_copy(s.publish_to, ds, s3=s3)
        got = reader.feeds(consumers, K)
        return {c: [it.event_id for it in f] for c, f in got.items()}

    expected = {d: naive.feeds(workload, d, START, K) for d in (d1, d2)}
    consumers = sorted(expected[d1].keys() | expected[d2].keys())
    for d in (d1, d2):
        expected[d] = {c: expected[d].get(c, []) for c in consumers}

    # day 1: every warehouse file of the day's tables is in the snapshot, byte for byte
    out = publish.run(s, d1, Storage.at(s.warehouse))
    root, day = resolve(s.publish_to, None, s3)
    assert day == d1 and root == out["published"]["root"]
    snap_key = root[len("s3://pub/") :]
    wh = Path(s.warehouse)
    local = {
        str(p.relative_to(wh)): p
        for layer, table in PUBLISHED_TABLES
        for p in (wh / layer / table / f"ds={d1}").rglob("*.parquet")
    }
    assert local and any(p.stat().st_size > 2 * part for p in local.values())
    for rel, path in local.items():
        head = s3.head_object(Bucket="pub", Key=f"{snap_key}/{rel}")
        body = s3.get_object(Bucket="pub", Key=f"{snap_key}/{rel}")["Body"].read()
        assert body == path.read_bytes(), rel
        size = path.stat().st_size
        if size > part:  # a multipart upload: the ETag names the number of parts
            assert head["ETag"].strip('"').endswith(f"-{-(-size // part)}"), rel
    manifest = json.loads(
        s3.get_object(Bucket="pub", Key=f"{snap_key}/manifests/ds={d1}/manifest.json")[
            "Body"
        ].read()
    )
    assert manifest["tables"]["feeds/consumer_feed"]["location"] == (
        f"{root}/feeds/consumer_feed/ds={d1}"
    )
    assert published_feeds(None) == expected[d1]

    # day 2, failing after a few uploads: nothing moves, no multipart upload is left open
    faulty = boto3.client("s3", endpoint_url=s3_server["FEEDPIPE_S3_ENDPOINT"])
    calls, lock = [0], threading.Lock()

    def fail_after_five(**_):
        with lock:
            calls[0] += 1
            if calls[0] > 5:
                raise ConnectionError("injected: connection reset mid-publish")

    for op in ("PutObject", "UploadPart"):
        faulty.meta.events.register(f"before-call.s3.{op}", fail_after_five)
    with pytest.raises(PublishFailed, match="injected"):
        publish.run(s, d2, Storage.at(s.warehouse), s3=faulty)
    assert resolve(s.publish_to, None, s3) == (root, d1)
    with pytest.raises(PublishFailed, match=str(d2)):
        resolve(s.publish_to, d2, s3)
    assert not (wh / "manifests" / f"ds={d2}" / "_SUCCESS").exists()
    assert s3.list_multipart_uploads(Bucket="pub").get("Uploads", []) == []
    assert len(snapshots(d2)) == 1  # the failed attempt's files, which nothing points at
    assert published_feeds(None) == expected[d1]

    # the retry publishes day 2 and removes the failed attempt
    out2 = publish.run(s, d2, Storage.at(s.warehouse))
    root2, day = resolve(s.publish_to, None, s3)
    assert day == d2 and root2 == out2["published"]["root"] != root
    assert snapshots(d2) == {root2.rsplit("/", 1)[1]}
    assert out2["published"]["removed"] > 0
    assert (wh / "manifests" / f"ds={d2}" / "_SUCCESS").exists()
    assert published_feeds(None) == expected[d2]

    # re-publishing day 1 (a backfill): latest stays on day 2; the day keeps the snapshot
    # readers were sent to until now, and the one before that goes
    publish.run(s, d1, Storage.at(s.warehouse))
    root1b, _ = resolve(s.publish_to, d1, s3)
    assert resolve(s.publish_to, None, s3) == (root2, d2)
    assert snapshots(d1) == {root.rsplit("/", 1)[1], root1b.rsplit("/", 1)[1]}
    publish.run(s, d1, Storage.at(s.warehouse))
    root1c, _ = resolve(s.publish_to, d1, s3)
    assert snapshots(d1) == {root1b.rsplit("/", 1)[1], root1c.rsplit("/", 1)[1]}
    assert published_feeds(d1) == expected[d1]


def weighted_quantile(values: dict[str, int], weights: dict[str, int], q: float) -> float:
    """The smallest value whose cumulative weight share reaches ``q``."""
    total = sum(weights.values())
    cum = 0
    for value, key in sorted((values[k], k) for k in weights):
        cum += weights[key]
        if cum / total >= q - 1e-12:
            return float(value)
    raise AssertionError("no weight")


def test_replay_counts_what_each_plan_would_have_cost_the_next_day(spark, incremental):
    """``feedpipe evaluate`` against counts made here from the Parquet tables alone: PushAll
    and PullAll from the follow graph and consumer activity, the served FF-PerPair plan from
    its edge plan; the predictions are the plan stage's own costs per hour times 24."""
    from jobs.evaluation import replay

    s = incremental
    d = START + dt.timedelta(days=DAYS - 2)
    nxt = d + dt.timedelta(days=1)
    rows = {r["strategy"]: r for r in replay.evaluate(spark, s, d, d)}
    wh = Path(s.warehouse)

    def table(layer: str, name: str, day: dt.date) -> pd.DataFrame:
        return pd.read_parquet(wh / layer / name / f"ds={day}")

    edges = list(table("clean", "follows", d)[["consumer_id", "producer_id"]].itertuples(False))
    events = table("clean", "events", nxt)
    per_p = events.groupby("producer_id").size().to_dict()
    viewed = table("clean", "views", nxt).groupby("consumer_id").size().to_dict()
    rates = table("rates", "consumer_rates", d).dropna(subset=["last_view_ds"])
    cutoff = d - dt.timedelta(days=s.inactive_after_days - 1)
    active = set(rates.consumer_id[rates.last_view_ds >= cutoff])
    degree: dict[str, int] = {}
    for c, _ in edges:
        degree[c] = degree.get(c, 0) + 1
    assert active & set(degree)

    plan = table("plan", "edge_plan", d)
    assert set(plan["strategy"]) == {"ff-per-pair"} and set(plan["mode"]) == {"push", "pull"}
    pulls = plan[plan["mode"] == "pull"].groupby("consumer_id").size().to_dict()
    pushing = set(plan[plan["mode"] == "push"]["consumer_id"])
    sources = {
        "push-all": {c: 1 if c in active else k for c, k in degree.items()},
        "pull-all": dict(degree),
        "ff-per-pair": {c: pulls.get(c, 0) + (c in pushing) for c in degree},
    }
    pushes = {
        "push-all": sum(per_p.get(p, 0) for c, p in edges if c in active),
        "pull-all": 0,
        "ff-per-pair": sum(per_p.get(p, 0) for p in plan[plan["mode"] == "push"]["producer_id"]),
    }
    views_of = {c: n for c, n in viewed.items() if c in degree}
    for strategy, n_sources in sources.items():
        r = rows[strategy]
        reads = sum(n * n_sources[c] for c, n in views_of.items() if n_sources[c] > 1)
        assert (r["events"], r["feed_views"]) == (len(events), sum(views_of.values()))
        assert (r["pushes"], r["pull_reads"]) == (pushes[strategy], reads), strategy
        assert r["realized_cost"] == pytest.approx(s.push_cost * pushes[strategy] + reads)
        for q in (0.50, 0.95, 0.99):
            expected = weighted_quantile(n_sources, views_of, q)
            assert r[f"sources_p{round(q * 100)}"] == expected, (strategy, q)
    assert pushes["push-all"] > pushes["ff-per-pair"] > 0

    costs = table("plan", "plan_cost", d)
    assert set(rows) == set(costs["strategy"])
    for c in costs.itertuples():
        r = rows[c.strategy]
        assert r["predicted_cost"] == pytest.approx(c.total_cost * 24, rel=1e-9)
        assert r["served"] == c.chosen
        assert r["error"] == pytest.approx(r["realized_cost"] / r["predicted_cost"] - 1)
    written = table("eval", "replay", d)
    assert sorted(written["strategy"]) == sorted(rows)
    # a day without the next day's events is skipped, not failed
    last = START + dt.timedelta(days=DAYS - 1)
    assert replay.evaluate(spark, s, last, last) == []

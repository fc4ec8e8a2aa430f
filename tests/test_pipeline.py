"""The pipeline end to end on a generated workload with churn.

* Core correctness: for every strategy, every consumer's assembled feed equals the naive
  answer computed from the landing files alone (``naive.py``).
* Incremental maintenance equals a full refresh, every day.
* Rerunning a day gives the same rows.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import naive
import pytest

from jobs import stages
from jobs.common.config import STRATEGIES, Settings
from jobs.common.storage import Storage
from jobs.common.tables import contract, read_partition
from jobs.generate import PROFILES, generate, scaled
from jobs.reader import FeedReader

START = dt.date(2026, 1, 1)
DAYS = 3
K = 5
BUILD = ("ingest", "rates", "plan", "materialize")


def run_build(spark, settings: Settings, ds: dt.date, full_refresh: bool = False) -> None:
    for stage in BUILD:
        stages.run_stage(stage, settings, ds, spark, full_refresh)


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> Path:
    landing = tmp_path_factory.mktemp("landing")
    profile = scaled(PROFILES["ff2010"], 0.004)
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
    return landing


@pytest.fixture(scope="module")
def incremental(spark, workload, tmp_path_factory) -> Settings:
    """Days 1..3 built incrementally, serving FF-PerPair (a mix of push and pull)."""
    s = Settings(
        landing=str(workload),
        warehouse=str(tmp_path_factory.mktemp("wh_inc")),
        feed_k=K,
        strategy="ff-per-pair",
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


def test_incremental_equals_full_refresh_every_day(spark, workload, incremental, tmp_path):
    full = Settings(**{**incremental.as_dict(), "warehouse": str(tmp_path / "wh_full")})
    changed_days = 0
    for i in range(DAYS):
        ds = START + dt.timedelta(days=i)
        run_build(spark, full, ds, full_refresh=True)
        for table in ("producer_feed", "consumer_feed"):
            inc_rows = table_rows(spark, incremental, "feeds", table, ds)
            assert inc_rows, f"{table} is empty on {ds}"
            assert inc_rows == table_rows(spark, full, "feeds", table, ds), (
                f"{table} differs on {ds}"
            )
        if i > 0:
            before = set(
                table_rows(spark, incremental, "plan", "edge_plan", ds - dt.timedelta(days=1))
            )
            after = set(table_rows(spark, incremental, "plan", "edge_plan", ds))
            changed_days += before != after
    assert changed_days == DAYS - 1  # follows churn and rate changes really exercised the paths


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_assembled_feed_equals_the_naive_answer(spark, workload, incremental, strategy):
    ds = START + dt.timedelta(days=DAYS - 1)
    s = Settings(**{**incremental.as_dict(), "strategy": strategy})
    # replan the last day with this strategy; materialize incrementally from the previous
    # day's FF-PerPair state, so edges move between push and pull
    stages.run_stage("plan", s, ds, spark)
    stages.run_stage("materialize", s, ds, spark)
    expected = naive.feeds(workload, ds, START, K)
    consumers = sorted(expected)
    got = assembled(s, ds, [*consumers, "nobody-follows-nothing"])
    assert got.pop("nobody-follows-nothing") == []
    mismatched = [c for c in consumers if got[c] != expected[c]]
    assert not mismatched, (
        f"{len(mismatched)} of {len(consumers)} feeds differ, e.g. {mismatched[:3]}"
    )
    modes = {r[2] for r in table_rows(spark, s, "plan", "edge_plan", ds)}
    assert modes == {"push-all": {"push"}, "pull-all": {"pull"}}.get(strategy, {"push", "pull"})


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


def test_validate_and_publish_a_good_day(spark, built_copy):
    import json

    ds = START + dt.timedelta(days=DAYS - 1)
    stages.run_stage("plan", built_copy, ds, spark)  # serve auto: the cost gate applies
    stages.run_stage("materialize", built_copy, ds, spark)
    stages.run_stage("validate", built_copy, ds, spark)
    stages.run_stage("publish", built_copy, ds, spark)
    wh = Path(built_copy.warehouse)
    manifest = json.loads((wh / "manifests" / f"ds={ds}" / "manifest.json").read_text())
    assert (wh / "manifests" / f"ds={ds}" / "_SUCCESS").exists()
    assert (wh / "manifests" / "latest").read_text() == ds.isoformat()
    assert (wh / "quality" / f"ds={ds}" / "docs" / "index.html").exists()
    for table, c in manifest["input"].items():
        assert c["rows_in"] == c["clean"] + c["duplicates"] + c["quarantined"], table
    events_in = manifest["input"]["events"]["clean"]
    assert manifest["tables"]["clean/events"]["rows"] == events_in
    served = manifest["plan"]["served"]
    costs = {r["strategy"]: r["total_cost"] for r in manifest["plan"]["strategies"]}
    assert costs[served] == min(costs.values())


def test_a_corrupted_feed_fails_validation_and_is_not_published(spark, built_copy):
    import pyarrow.parquet as pq

    from jobs.publish import PublishRefused
    from jobs.validate import ValidationFailed

    ds = START + dt.timedelta(days=DAYS - 1)
    folder = Path(built_copy.warehouse) / "feeds" / "consumer_feed" / f"ds={ds}"
    files = sorted(folder.glob("*.parquet"))
    table = pq.read_table(files[0])
    rank = table.column("rank").to_pylist()
    swapped = [rank[1], rank[0], *rank[2:]]  # two rows of one feed swap places: order broken
    pq.write_table(
        table.set_column(table.schema.get_field_index("rank"), "rank", [swapped]), files[0]
    )
    with pytest.raises(ValidationFailed, match=r"feeds\.consumer_feed.*order_ok"):
        stages.run_stage("validate", built_copy, ds, spark)
    results = (Path(built_copy.warehouse) / "quality" / f"ds={ds}" / "results.json").read_text()
    assert '"success": false' in results
    with pytest.raises(PublishRefused, match="failed validation"):
        stages.run_stage("publish", built_copy, ds, spark)
    assert not (Path(built_copy.warehouse) / "manifests" / f"ds={ds}" / "_SUCCESS").exists()


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

"""The README's query recipes (`feedpipe tables`, `feedpipe catalog`, the DuckDB database of
views, pandas, Spark SQL over registered tables), run as written in a folder with the demo's
layout against a warehouse whose published day is being rebuilt: every answer is the
published version's, never the rebuild's; the assembled-feed view equals the naive answer,
payloads included. The catalogs name the same tables as `feedpipe tables`, and a name, day
or warehouse that is not published is an error naming what is."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import shlex
import shutil
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from jobs import cli
from jobs.common.storage import StorageError
from jobs.serving import catalog, published
from jobs.stages import runner
from support import naive
from support.once import private_copy, shared_folder
from support.workloads import START, K

ROOT = Path(__file__).resolve().parents[2]
DAY = dt.date(2026, 1, 3)
"""The README's day: the third built day, the only one published here."""
DEMO = Path("var", "demo", "warehouse")
"""Where `make demo` writes its warehouse, below the repository (jobs/dev/demo.py)."""


def recipes() -> tuple[list[str], list[str]]:
    """The shell lines and Python blocks of the README's "Querying the tables" section."""
    section = (ROOT / "README.md").read_text().split("## Querying the tables", 1)[1]
    section = section.split("\n## ", 1)[0]
    shell = [ln for b in re.findall(r"```sh\n(.*?)```", section, re.S) for ln in b.splitlines()]
    return shell, re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture(scope="module")
def published_day(spark, built, tmp_path_factory):
    """Settings of the built warehouse with `DAY` validated and published (the other days
    built, not published), once per run. Read it only; copy it to change it."""

    def make(folder: Path) -> None:
        shutil.copytree(built.warehouse, folder, dirs_exist_ok=True)
        for stage in ("validate", "publish"):
            runner.run_stage(stage, dataclasses.replace(built, warehouse=str(folder)), DAY, spark)

    folder = shared_folder(tmp_path_factory, "churn-published", make)
    return dataclasses.replace(built, warehouse=str(folder))


def run_shell(lines: list[str], monkeypatch, capsys) -> list[list[str]]:
    """Each `feedpipe` line through the command line's `main`; `export` lines set variables."""
    outs = []
    for line in lines:
        words = shlex.split(line, comments=True)
        if words[0] == "export":
            name, value = words[1].split("=", 1)
            monkeypatch.setenv(name, value)
            continue
        assert words[0] == "feedpipe" and cli.main(words[1:]) == 0, line
        outs.append(capsys.readouterr().out.splitlines())
    return outs


def groups(pattern: str, lines: list[str]) -> set[tuple[str, ...]]:
    return {m.groups() for ln in lines if (m := re.match(pattern, ln))}


def check_hive_statements(hive: list[str], wh: Path, manifest: dict) -> None:
    """Every published table, its one day at its published folder, nothing dropped; each
    partition added when missing, moved when there."""
    assert groups(r"CREATE EXTERNAL TABLE IF NOT EXISTS (\S+) ", hive) == {
        (k.replace("/", "."),) for k in manifest["versions"]
    }
    assert not [ln for ln in hive if "DROP" in ln]
    day = r"PARTITION \(ds = '(\S+)'\)"
    added = groups(rf"ALTER TABLE (\S+) ADD IF NOT EXISTS {day} LOCATION '(\S+)';", hive)
    moved = groups(rf"ALTER TABLE (\S+) {day} SET LOCATION '(\S+)';", hive)
    want = {
        (k.replace("/", "."), str(DAY), str(wh / k / f"ds={DAY}" / v))
        for k, v in manifest["versions"].items()
    }
    assert added == moved == want


def test_the_readmes_query_recipes_read_published_versions_only(
    spark, published_day, tmp_path, monkeypatch, capsys
):
    wh = private_copy(published_day.warehouse, tmp_path / DEMO)
    catalog.write_duckdb(str(wh))  # publish wrote the original's with the original's paths
    s = dataclasses.replace(published_day, warehouse=str(wh))
    monkeypatch.chdir(tmp_path)
    manifest = json.loads((wh / "manifests" / f"ds={DAY}" / "manifest.json").read_text())

    def published_rows(table: str) -> list[dict]:
        return pq.read_table(wh / manifest["tables"][table]["path"]).to_pylist()

    # a rebuild of the day is under way: a plan that pulls every edge, not yet published
    runner.run_stage("plan", dataclasses.replace(s, strategy="pull-all"), DAY, spark)
    working = json.loads((wh / "manifests" / f"ds={DAY}" / "stages" / "plan.json").read_text())
    rebuilt = wh / "plan" / "edge_plan" / f"ds={DAY}" / working["outputs"]["plan/edge_plan"]
    assert set(pq.read_table(rebuilt).column("mode").to_pylist()) == {"pull"}
    expected_modes = Counter(r["mode"] for r in published_rows("plan/edge_plan"))
    assert len(expected_modes) > 1, "the published plan should differ from the rebuild's"

    shell, blocks = recipes()
    assert len(blocks) == 3 and len(shell) == 4
    outs = run_shell(shell, monkeypatch, capsys)
    listed = {ln.split()[1]: ln.split()[2] for ln in outs[0] if ln.startswith(str(DAY))}
    assert listed == {k: str(wh / k / f"ds={DAY}" / v) for k, v in manifest["versions"].items()}
    assert outs[1] == [str(wh / manifest["tables"]["plan/plan_cost"]["path"])]
    check_hive_statements(outs[2], wh, manifest)

    ns: dict = {"spark": spark}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), ns)

    costs = sorted(published_rows("plan/plan_cost"), key=lambda r: r["total_cost"])
    got = ns["costs"]
    assert list(got.strategy) == [r["strategy"] for r in costs]
    assert list(got.total_cost) == [r["total_cost"] for r in costs]
    assert dict(zip(ns["modes"]["mode"], ns["modes"]["edges"], strict=True)) == expected_modes

    feed = ns["feed"].drop(columns=["ds", "run"])
    want_feed = sorted(
        tuple(r[c] for c in feed.columns) for r in published_rows("feeds/consumer_feed")
    )
    assert sorted(feed.itertuples(index=False, name=None)) == want_feed
    assert {str(d) for d in ns["all_costs"].ds} == {str(DAY)}  # the only published day
    assert len(ns["all_costs"]) == len(costs)

    by_day = {(str(r["ds"]), r["mode"]): r["edges"] for r in ns["by_day"].collect()}
    assert by_day == {(str(DAY), m): n for m, n in expected_modes.items()}

    # a catalog whose partition names another folder (the version a day had before it was
    # published again) is moved to the published folder when the statements run again
    def modes_by_day() -> dict[tuple[str, str], int]:
        rows = spark.sql("SELECT ds, mode, count(*) AS n FROM plan.edge_plan GROUP BY ds, mode")
        return {(str(r["ds"]), r["mode"]): r["n"] for r in rows.collect()}

    spark.sql(f"ALTER TABLE plan.edge_plan PARTITION (ds = '{DAY}') SET LOCATION '{rebuilt}'")
    assert {mode for _, mode in modes_by_day()} == {"pull"}
    catalog.register(spark, str(DEMO))
    assert modes_by_day() == by_day

    # feeds.assembled: every consumer's feed as the reader returns it, with its payloads
    seen = ns["seen"]
    got = {c: list(g.sort_values("rank").event_id) for c, g in seen.groupby("consumer_id")}
    expected = naive.feeds(Path(s.landing), DAY, START, K)
    assert got == {c: f for c, f in expected.items() if f}
    store = naive.store(Path(s.landing), DAY, START, K)
    assert list(seen.payload) == [store[e][1] for e in seen.event_id]
    assert seen.attributes.isna().all()  # the generator sets no attributes

    # the tables the recipes registered live in the run's temporary folder, not the checkout
    sql_warehouse = Path(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:"))
    checkout = Path(__file__).resolve().parents[2]
    assert checkout not in sql_warehouse.parents
    assert not (checkout / "spark-warehouse").exists() and not (checkout / "metastore_db").exists()


def test_the_catalogs_name_the_tables_feedpipe_tables_lists(published_day, capsys):
    """The same published tables, quarantine and count tables included, in `feedpipe
    tables`, both dialects' statements (with or without --replace) and the DuckDB database
    publish wrote (which adds its own two)."""
    wh = published_day.warehouse
    assert cli.main(["tables", "--warehouse", wh]) == 0
    tables = {ln.split()[1].replace("/", ".") for ln in capsys.readouterr().out.splitlines()}
    assert {"quarantine.events", "clean.event_counts", "plan.plan_cost"} <= tables
    for dialect in ("hive", "spark"):
        for replace in ([], ["--replace"]):
            assert cli.main(["catalog", "--warehouse", wh, "--dialect", dialect, *replace]) == 0
            out = capsys.readouterr().out.splitlines()
            created = groups(r"CREATE (?:EXTERNAL )?TABLE IF NOT EXISTS (\S+) ", out)
            assert {name for (name,) in created} == tables, dialect
            dropped = groups(r"DROP TABLE IF EXISTS (\S+);", out)
            assert {name for (name,) in dropped} == (tables if replace else set())
            assert len(dropped) == sum("DROP" in ln for ln in out)
    con = duckdb.connect(str(Path(wh, *catalog.DUCKDB_FILE)), read_only=True)
    rows = con.sql("SELECT table_schema || '.' || table_name FROM information_schema.tables")
    in_duckdb = {name for (name,) in rows.fetchall()}
    con.close()
    assert in_duckdb - set(catalog.DUCKDB_ONLY) == tables
    assert set(catalog.DUCKDB_ONLY) <= in_duckdb


def test_a_table_is_named_either_way_and_what_is_not_published_is_an_error(
    published_day, tmp_path, capsys
):
    wh = published_day.warehouse
    both = [published.dataset(wh, name).to_table() for name in ("plan/plan_cost", "plan.plan_cost")]
    assert both[0].num_rows > 0 and both[0].equals(both[1])
    assert published.dataset(wh, "plan.plan_cost", DAY).to_table().equals(both[0])
    assert cli.main(["tables", "plan.plan_cost", "--warehouse", wh, "--format", "paths"]) == 0
    assert capsys.readouterr().out == published.folders(wh, "plan/plan_cost")[0] + "\n"

    (tmp_path / "empty").mkdir()
    later = DAY + dt.timedelta(days=1)  # built, not published
    cases = [
        ((str(tmp_path / "nowhere"), "plan/plan_cost"), f"no warehouse at {tmp_path / 'nowhere'}"),
        ((str(tmp_path / "empty"), "plan/plan_cost"), "no published day in the warehouse"),
        ((wh, "plan.plan_costs"), "no table 'plan.plan_costs' in the published days of"),
        ((wh, "plan_cost"), "no table 'plan_cost' in the published days of"),
        ((wh, "plan/plan_cost", later), f"{later} is not published in {wh}; published days: {DAY}"),
    ]
    for args, message in cases:
        with pytest.raises(published.NotPublished) as caught:
            published.dataset(*args)
        assert isinstance(caught.value, StorageError) and message in str(caught.value), args
        assert "\n" not in str(caught.value)
    with pytest.raises(published.NotPublished, match="; tables: clean/event_counts, clean/events"):
        published.dataset(wh, "plan.plan_costs")


def test_reading_a_published_days_latest_run_says_nothing(published_day, capsys):
    """`feed --unpublished` warns only when the day's latest run is not its published
    version (tests/stages/test_serving.py has a day that is not published)."""
    wh = published_day.warehouse
    consumer = sorted(naive.feeds(Path(published_day.landing), DAY, START, K))[0]
    args = ["feed", "--warehouse", wh, "--ds", str(DAY), "--consumer", consumer, "--format", "json"]
    assert cli.main(args) == 0
    plain = capsys.readouterr()
    assert cli.main([*args, "--unpublished"]) == 0
    debug = capsys.readouterr()
    assert json.loads(debug.out) == json.loads(plain.out) != []
    assert debug.err == plain.err == ""

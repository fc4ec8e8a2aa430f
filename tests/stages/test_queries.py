"""The README's query recipes (`feedpipe tables`, `feedpipe catalog`, the DuckDB database of
views, pandas, Spark SQL over registered tables), run as written against a warehouse whose
published day is being rebuilt: every answer is the published version's, never the
rebuild's; the assembled-feed view equals the naive answer, payloads included."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from jobs import cli
from jobs.common.tables import PUBLISHED_TABLES
from jobs.stages import runner
from support import naive
from support.workloads import LAST, START, K

ROOT = Path(__file__).resolve().parents[2]


def recipes() -> tuple[list[str], list[str]]:
    """The shell lines and Python blocks of the README's "Querying the tables" section."""
    section = (ROOT / "README.md").read_text().split("## Querying the tables", 1)[1]
    section = section.split("\n## ", 1)[0]
    shell = [ln for b in re.findall(r"```sh\n(.*?)```", section, re.S) for ln in b.splitlines()]
    return shell, re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readmes_query_recipes_read_published_versions_only(spark, built_copy, capsys):
    s = built_copy
    for stage in ("validate", "publish"):
        runner.run_stage(stage, s, LAST, spark)
    wh = Path(s.warehouse)
    manifest = json.loads((wh / "manifests" / f"ds={LAST}" / "manifest.json").read_text())

    def published(table: str) -> list[dict]:
        return pq.read_table(wh / manifest["tables"][table]["path"]).to_pylist()

    # a rebuild of the day is under way: a plan that pulls every edge, not yet published
    runner.run_stage("plan", dataclasses.replace(s, strategy="pull-all"), LAST, spark)
    working = json.loads((wh / "manifests" / f"ds={LAST}" / "stages" / "plan.json").read_text())
    rebuilt = pq.read_table(
        wh / "plan" / "edge_plan" / f"ds={LAST}" / working["outputs"]["plan/edge_plan"]
    )
    assert set(rebuilt.column("mode").to_pylist()) == {"pull"}
    expected_modes = Counter(r["mode"] for r in published("plan/edge_plan"))
    assert len(expected_modes) > 1, "the published plan should differ from the rebuild's"

    shell, blocks = recipes()
    assert len(blocks) == 3 and len(shell) == 3
    outs = []
    for line in shell:
        args = line.split("#")[0].split()[1:]
        args = [str(LAST) if a == "2026-01-03" else a for a in args]
        assert cli.main([*args, "--warehouse", s.warehouse]) == 0, line
        outs.append(capsys.readouterr().out.splitlines())
    listed = {ln.split()[1]: ln.split()[2] for ln in outs[0] if ln.startswith(str(LAST))}
    assert listed == {k: str(wh / k / f"ds={LAST}" / v) for k, v in manifest["versions"].items()}
    assert outs[1] == [str(wh / manifest["tables"]["plan/plan_cost"]["path"])]
    # the Hive statements: every published table, its one day at its published folder
    hive = outs[2]
    named = {f"{ly}/{t}" for ly, t in PUBLISHED_TABLES}
    assert sum(ln.startswith("CREATE EXTERNAL TABLE") for ln in hive) == len(named)
    partitions = {
        re.match(r"ALTER TABLE (\S+) ADD PARTITION \(ds = '(\S+)'\) LOCATION '(\S+)';", ln).groups()
        for ln in hive
        if ln.startswith("ALTER TABLE")
    }
    assert partitions == {
        (k.replace("/", "."), str(LAST), str(wh / k / f"ds={LAST}" / v))
        for k, v in manifest["versions"].items()
        if k in named
    }

    ns: dict = {"spark": spark}
    for block in blocks:
        code = block.replace("var/warehouse", s.warehouse).replace("2026-01-03", str(LAST))
        code = code.replace(
            "dt.date(2026, 1, 3)", f"dt.date({LAST.year}, {LAST.month}, {LAST.day})"
        )
        exec(compile(code, "README.md", "exec"), ns)

    costs = sorted(published("plan/plan_cost"), key=lambda r: r["total_cost"])
    got = ns["costs"]
    assert list(got.strategy) == [r["strategy"] for r in costs]
    assert list(got.total_cost) == [r["total_cost"] for r in costs]
    assert dict(zip(ns["modes"]["mode"], ns["modes"]["edges"], strict=True)) == expected_modes

    feed = ns["feed"].drop(columns=["ds", "run"])
    want = sorted(tuple(r[c] for c in feed.columns) for r in published("feeds/consumer_feed"))
    assert sorted(feed.itertuples(index=False, name=None)) == want
    assert {str(d) for d in ns["all_costs"].ds} == {str(LAST)}  # the only published day
    assert len(ns["all_costs"]) == len(costs)

    by_day = {(str(r["ds"]), r["mode"]): r["edges"] for r in ns["by_day"].collect()}
    assert by_day == {(str(LAST), m): n for m, n in expected_modes.items()}

    # feeds.assembled: every consumer's feed as the reader returns it, with its payloads
    seen = ns["seen"]
    got = {c: list(g.sort_values("rank").event_id) for c, g in seen.groupby("consumer_id")}
    expected = naive.feeds(Path(s.landing), LAST, START, K)
    assert got == {c: f for c, f in expected.items() if f}
    store = naive.store(Path(s.landing), LAST, START, K)
    assert list(seen.payload) == [store[e][1] for e in seen.event_id]
    assert seen.attributes.isna().all()  # the generator sets no attributes

"""The README's query recipes, run as written against a warehouse whose published day is being
rebuilt: every answer is the published version's, never the rebuild's."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from jobs import cli
from jobs.stages import runner
from support.workloads import LAST

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
    assert len(blocks) == 3 and len(shell) == 2
    for line in shell:
        args = line.split("#")[0].split()[1:]
        args = [str(LAST) if a == "2026-01-03" else a for a in args]
        assert cli.main([*args, "--warehouse", s.warehouse]) == 0, line
    out = capsys.readouterr().out.splitlines()
    listed = {ln.split()[1]: ln.split()[2] for ln in out if ln.startswith(str(LAST))}
    assert listed == {k: str(wh / k / f"ds={LAST}" / v) for k, v in manifest["versions"].items()}
    assert out[-1] == str(wh / manifest["tables"]["plan/plan_cost"]["path"])

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

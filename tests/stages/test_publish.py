"""Stage ``publish``: a validated day is published with its manifest, Data Docs and report
(rendered by headless Chromium and read against the tables)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pandas as pd
import pytest

from jobs.common.config import Settings
from jobs.common.ledger import read_record
from jobs.common.storage import Storage
from jobs.stages import runner
from support import browser
from support.paths import version
from support.workloads import LAST
from support.workloads import days as all_days


@pytest.fixture(scope="module")
def published(spark, built, tmp_path_factory):
    """The last churn day planned under ``auto`` (the cost gate applies), materialized,
    validated and published, in a copy of the shared build of this module's own."""
    from support.once import private_copy

    copy = private_copy(built.warehouse, tmp_path_factory.mktemp("published") / "wh")
    s = dataclasses.replace(built, warehouse=str(copy), strategy="auto")
    for stage in ("plan", "materialize", "validate", "publish"):
        runner.run_stage(stage, s, LAST, spark)
    return s


def test_validate_and_publish_a_good_day(published):
    ds = LAST
    s = published
    wh = Path(s.warehouse)
    manifest = json.loads((wh / "manifests" / f"ds={ds}" / "manifest.json").read_text())
    assert (wh / "manifests" / f"ds={ds}" / "_SUCCESS").exists()
    assert (wh / "manifests" / "latest").read_text() == ds.isoformat()
    # the manifest names the run folder of every table the stages wrote, and only those
    # folders are left of the day
    records = {
        st: json.loads((wh / "manifests" / f"ds={ds}" / "stages" / f"{st}.json").read_text())
        for st in ("ingest", "rates", "plan", "materialize")
    }
    named = {k: v for r in records.values() for k, v in r["outputs"].items()}
    assert manifest["versions"] == named and "feeds/consumer_feed" in named
    left = {
        f"{p.parent.parent.parent.name}/{p.parent.parent.name}": p.name
        for p in wh.glob(f"*/*/ds={ds}/run=*")
    }
    assert left == named
    for key, entry in manifest["tables"].items():
        assert entry["path"] == f"{key}/ds={ds}/{named[key]}"
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


def test_the_published_days_report_in_a_browser(published, tmp_path):
    check_report(published, LAST, tmp_path)


def latency_shares(settings: Settings, ds: dt.date) -> list[float]:
    """The served plan's feed views by sources read, in the report's buckets, counted here
    from the edge plan and the consumers' view rates: a consumer reads each pulled producer,
    each shared view and its own feed if anything is pushed; weights are views per hour."""
    wh = Path(settings.warehouse)
    plan = pd.read_parquet(version(wh, "plan", "edge_plan", ds))
    theta = pd.read_parquet(version(wh, "rates", "consumer_rates", ds)).set_index("consumer_id")[
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
    wh = Path(settings.warehouse)
    page = browser.render(wh / "reports" / f"ds={ds}" / "index.html", tmp_path / "report.png")
    costs = pd.read_parquet(version(wh, "plan", "plan_cost", ds)).sort_values("total_cost")
    served = costs[costs.chosen].iloc[0]
    assert page.text["status"] == "published"
    assert f"served plan: {served.strategy}" in page.text["served"]
    assert page.text["quality"] == "all suites passed"
    table = page.rows("plan-cost")[1:]
    assert [r[0] for r in table] == [
        s + (" (served)" if s == served.strategy else "") for s in costs.strategy
    ]
    assert [r[1] for r in table] == [f"{x:,.1f}" for x in costs.total_cost]
    assert [r[5] for r in table] == [f"{x:,}" for x in costs.push_edges]
    # why the plan was served and the target it was judged against, from the day's plan
    # (the test days run with a forced strategy or auto: either is said in words)
    plan = read_record(Storage.at(str(wh)), ds, "plan")
    assert plan is not None
    if plan.forced:
        assert page.text["served-why"].startswith(
            f"forced by configuration (strategy = {served.strategy})"
        )
    else:
        assert page.text["served-why"] == f"auto: the cheapest of {len(costs)} strategies computed"
        assert served.total_cost == costs.total_cost.min()
    assert page.text["latency-target"] == (
        f"latency target: at most {settings.latency_bound:g} {settings.latency_metric} per feed "
        f"view for {100 * settings.latency_quantile:g}% of feed views."
    )
    # the certificate: every strategy's distance above the day's bound, which none is below
    assert (costs.lower_bound <= costs.total_cost + 1e-9).all()
    gaps = (costs.total_cost - costs.lower_bound) / costs.lower_bound
    assert [r[-1] for r in table] == [f"+{100 * g:.1f}%" for g in gaps]
    assert f"lower bound {costs.lower_bound.iloc[0]:.1f} per hour" in page.text["bound"]
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

    flagged = pd.read_parquet(version(wh, "rates", "producer_rates", ds)).flash.sum()
    assert page.text["flash"].startswith(f"{flagged} producer(s) flagged")

    days = [d for d in all_days() if d <= ds]
    modeled, pure = [], []
    for d in days:
        c = pd.read_parquet(version(wh, "plan", "plan_cost", d))
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

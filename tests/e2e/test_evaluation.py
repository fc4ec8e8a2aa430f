"""Evaluation over several days: the replay of each day's plans on the next day, counted
independently from the Parquet tables; the trend-aware rate estimator against the trailing
mean on a workload with trends (``feedpipe evaluate-rates``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pandas as pd
import pytest

from jobs.common.config import Settings
from jobs.common.storage import Storage
from jobs.evaluation import replay
from jobs.evaluation.rates import evaluate
from jobs.stages import runner
from jobs.workloads.generate import PROFILES, generate, scaled
from support.paths import version
from support.workloads import LAST

START = dt.date(2026, 2, 1)


def test_eb_trend_beats_the_trailing_mean_under_trends(spark, tmp_path):
    profile = dataclasses.replace(
        scaled(PROFILES["ff2010"], 0.01), trend_share=0.5, trend_per_day=0.25
    )
    generate(Storage.at(str(tmp_path / "landing")), START, 6, profile, seed=9)
    s = Settings(
        landing=str(tmp_path / "landing"), warehouse=str(tmp_path / "wh"), shuffle_partitions=4
    )
    for i in range(6):
        runner.run_stage("ingest", s, START + dt.timedelta(days=i), spark)
    results = evaluate(
        spark,
        s,
        START + dt.timedelta(days=2),
        START + dt.timedelta(days=4),
        ("eb_trend", "trailing_mean"),
    )
    assert len(results) == 3 * 2 * 2
    for table in ("events", "views"):
        for ds in {r["ds"] for r in results}:
            by = {r["method"]: r for r in results if r["table"] == table and r["ds"] == ds}
            assert by["eb_trend"]["weighted_male"] < by["trailing_mean"]["weighted_male"], (
                table,
                ds,
                by,
            )


def weighted_quantile(values: dict[str, int], weights: dict[str, int], q: float) -> float:
    """The smallest value whose cumulative weight share reaches ``q``."""
    total = sum(weights.values())
    cum = 0
    for value, key in sorted((values[k], k) for k in weights):
        cum += weights[key]
        if cum / total >= q - 1e-12:
            return float(value)
    raise AssertionError("no weight")


def test_replay_counts_what_each_plan_would_have_cost_the_next_day(spark, built_copy):
    """``feedpipe evaluate`` against counts made here from the Parquet tables alone: PushAll
    and PullAll from the follow graph and consumer activity, the served FF-PerPair plan from
    its edge plan; the predictions are the plan stage's own costs per hour times 24."""
    s = built_copy
    d = LAST - dt.timedelta(days=1)
    nxt = d + dt.timedelta(days=1)
    rows = {r["strategy"]: r for r in replay.evaluate(spark, s, d, d)}
    wh = Path(s.warehouse)

    def table(layer: str, name: str, day: dt.date) -> pd.DataFrame:
        return pd.read_parquet(version(wh, layer, name, day))

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
    assert replay.evaluate(spark, s, LAST, LAST) == []

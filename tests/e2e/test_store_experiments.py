"""The papers' serving experiments on a real Redis server (started by the test): a drawn
workload's plans written into the store in ``feedpipe store load``'s layout serve every
consumer the newest k events of the producers it follows (a naive merge of their histories,
before and after live events), whatever the plan; and ``feedpipe evaluate --experiment
NAME-store`` measures, refusing a store that serves a day."""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq

import numpy as np
import pytest

from jobs import cli
from jobs.common import live, store
from jobs.evaluation import served, store_experiments
from jobs.evaluation.experiments import Workload, edge_frame
from jobs.serving.store_reader import StoreReader
from jobs.stages import plan
from jobs.workloads.generate import PROFILES, scaled, user_ids

K = 5


@pytest.fixture()
def url(redis_server):
    store.connect(redis_server.url).flushdb()
    return redis_server.url


def naive(w: Workload, events: dict[str, list[tuple[str, dt.datetime]]]) -> dict[str, list[str]]:
    """Each consumer's newest K event ids over the producers it follows (newest first, ties by
    event id then producer, as the store orders equal scores by member bytes)."""
    ids = user_ids(np.arange(max(w.phi.size, w.theta.size)))
    follows: dict[str, list[str]] = {}
    for c, p in zip(w.consumers, w.producers, strict=True):
        follows.setdefault(ids[c], []).append(ids[p])
    out = {}
    for c, producers in follows.items():
        items = [(at, e, p) for p in producers for e, at in events.get(p, [])]
        out[c] = [e for _, e, _ in heapq.nlargest(K, items, key=lambda x: (x[0], x[1], x[2]))]
    return out


def test_every_plan_serves_the_naive_feeds_before_and_after_live_events(spark, url):
    w = Workload.draw(scaled(PROFILES["ff2010"], 0.002), 3)
    strategies = ("push-all", "pull-all", "ff-per-pair", "cz-lp")
    settings = store_experiments.settings_for(strategies)
    plans = plan.plans_of(edge_frame(spark, w), settings)
    producers = list(user_ids(np.arange(w.phi.size)))
    consumers = list(user_ids(np.arange(w.theta.size)))
    start = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    history = served.history(producers, w.phi, K, start, seed=1)
    ops = served.hour_of(producers, w.phi, consumers, w.theta, start, 0.5, seed=1)
    new = [what for _, kind, what in ops if kind == "event"]
    assert len(new) > 50 and any(kind == "view" for _, kind, _ in ops)
    later = {p: list(v) for p, v in history.items()}
    for e in new:
        later.setdefault(e.producer_id, []).append((e.event_id, e.created_at))
    before, after = naive(w, history), naive(w, later)
    assert before != after  # the live events change some feeds
    try:
        modes = set()
        for s in strategies:
            chosen = served.Served.of(plans, s)
            modes |= {m for *_, m, _ in chosen.edges}
            served.load(url, chosen, history, start.date(), K)
            reader = StoreReader(url)
            got = reader.feeds(sorted(before), K)
            assert {c: [it.event_id for it in f] for c, f in got.items()} == before, s
            live.add_events(store.connect(url), new)
            got = reader.feeds(sorted(after), K)
            assert {c: [it.event_id for it in f] for c, f in got.items()} == after, s
        assert modes == {"push", "pull", "view"}  # every kind of source was served
    finally:
        plans.release()
    # one generation at a time: each load removed the one before
    assert len(store.connect(url).hkeys(store.GENERATIONS)) == 1
    served.clear(url)
    assert store.connect(url).keys("*") == []


def test_a_store_experiment_measures_and_refuses_a_store_in_use(
    spark, url, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(store_experiments, "OPS", 1500)
    args = ["evaluate", "--experiment", "ff-fig8-store", "--scale", "0.002"]
    assert cli.main([*args, "--out", str(tmp_path)]) == 2
    assert "give an empty one with --store URL" in capsys.readouterr().err

    client = store.connect(url)
    client.set(store.SERVED, store.ServedDay(ds="2026-01-03", generation="g").to_json())
    assert cli.main([*args, "--store", url, "--out", str(tmp_path)]) == 1
    assert "serves 2026-01-03: the store experiments replace what it holds" in (
        capsys.readouterr().err
    )
    client.flushdb()

    # measured (in this session: the command line would build its own Spark settings)
    (r,) = store_experiments.run(spark, "ff-fig8-store", tmp_path, url, scale=0.002, seed=3)
    assert "Figure 8, measured" in r.markdown()
    rows = (tmp_path / "ff-fig8-store.csv").read_text().splitlines()
    assert len(rows) == 4 and rows[0].startswith("target sources (95%),per-pair mean ms")
    for line in rows[1:]:
        cells = [float(x) for x in line.split(",")]
        assert all(x > 0 for x in cells[1:7])  # latencies and CPU measured
    assert (tmp_path / "ff-fig8-store.png").stat().st_size > 10_000
    assert client.keys("*") == []  # the experiment left the store empty


def test_thresholds_push_more_users_as_they_fall():
    """``_pushed_shares`` on a hand-worked plan: consumer a follows x (φ 3) and y (φ 1), b
    follows y; x pushed to a only."""
    w = dataclasses.replace(
        Workload(np.array([0, 0, 1]), np.array([2, 3, 3]), np.zeros(4), np.zeros(4)),
        phi=np.array([0.0, 0.0, 3.0, 1.0]),
        theta=np.array([1.0, 3.0, 0.0, 0.0]),
    )
    ids = user_ids(np.arange(4))
    p = served.Served(
        "t",
        (
            (ids[0], ids[2], "push", None),
            (ids[0], ids[3], "pull", None),
            (ids[1], ids[3], "pull", None),
        ),
        {},
    )
    half, whole, local = store_experiments._pushed_shares(p, w)
    # a: 3 of 4 events an hour pushed (>= half, not all); b: none; no view is pull-free
    assert (half, whole, local) == (50.0, 0.0, 0.0)

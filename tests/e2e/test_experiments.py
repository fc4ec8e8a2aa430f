"""The papers' experiments (``feedpipe evaluate --experiment``): the costs they report against
the cost model worked out here with numpy on the same drawn workload, and the files each
experiment writes."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest

from jobs.evaluation import experiments
from jobs.evaluation.experiments import FLASH_FACTOR, FLASH_FAN_OUT, H, L, Workload
from jobs.workloads.generate import PROFILES, scaled

SCALE = 0.005


@pytest.fixture(scope="module")
def workload() -> Workload:
    return Workload.draw(scaled(PROFILES["ff2010"], SCALE), seed=3)


def modeled(w: Workload, threshold: float | None) -> dict[str, float]:
    """Cost per hour (docs/cost-model.md) with numpy: a pushed edge costs H·φ; a consumer
    reading n > 1 sources costs θ·L·n, its own feed being one source when anything is pushed.
    ``threshold``: push iff θ >= t·φ (FF-PerPair); None: every edge pushed."""
    phi, theta = w.phi[w.producers], w.theta[w.consumers]
    push = np.ones(phi.size, bool) if threshold is None else theta >= threshold * phi
    n_pull = np.bincount(w.consumers, weights=~push, minlength=w.theta.size)
    has_push = np.bincount(w.consumers, weights=push, minlength=w.theta.size) > 0
    sources = n_pull + has_push
    evaluation = np.where(sources > 1, w.theta * L * sources, 0.0).sum()
    return {"cost": H * phi[push].sum() + evaluation, "pushed": int(push.sum())}


def test_workload_ratio_scales_views_only(workload):
    w = workload.with_ratio(16)
    assert w.ratio() == pytest.approx(16)
    assert np.array_equal(w.phi, workload.phi)
    assert np.allclose(w.theta / workload.theta, w.theta[0] / workload.theta[0])


def test_prices_equal_the_cost_model_worked_with_numpy(spark, workload):
    for ratio in (2, 16):
        w = workload.with_ratio(ratio)
        got = experiments.price(spark, w, ("push-all", "pull-all", "ff-per-pair"))
        pull = modeled(w, threshold=float("inf"))
        assert got["push-all"]["total_cost"] == pytest.approx(modeled(w, None)["cost"], rel=1e-6)
        assert got["pull-all"]["total_cost"] == pytest.approx(pull["cost"], rel=1e-6)
        hybrid = modeled(w, H / L)
        assert got["ff-per-pair"]["total_cost"] == pytest.approx(hybrid["cost"], rel=1e-6)
        assert got["ff-per-pair"]["push_edges"] == hybrid["pushed"]
    for t in (0.5, 8.0):
        w = workload.with_ratio(16)
        r = experiments.price_plan(spark, w, w, t)
        assert r["total_cost"] == pytest.approx(modeled(w, t)["cost"], rel=1e-6)
        assert r["push_edges"] == modeled(w, t)["pushed"]


def test_a_plan_made_at_old_rates_is_priced_at_new_ones(spark, workload):
    """The flash experiment's 'during' phase: decisions from the old rates, cost from the new."""
    before, grown, flashed, flash = experiments.flash_workloads(workload.with_ratio(16), seed=3)
    P = before.phi.size
    old = set((before.consumers * P + before.producers).tolist())
    new = set((grown.consumers * P + grown.producers).tolist())
    assert old < new
    for p in flash:
        assert np.count_nonzero(grown.producers == p) >= min(FLASH_FAN_OUT, before.theta.size - 1)
    assert np.array_equal(flashed.phi[flash], grown.phi[flash] * FLASH_FACTOR)
    others = np.setdiff1d(np.arange(P), flash)
    assert np.array_equal(flashed.phi[others], grown.phi[others])

    got = experiments.price_plan(spark, grown, flashed, H / L)
    push = grown.theta[grown.consumers] >= (H / L) * grown.phi[grown.producers]
    # the old decisions priced at the new rates (the graph and view rates are the same)
    phi, cons, theta = flashed.phi[flashed.producers], flashed.consumers, flashed.theta
    n_pull = np.bincount(cons, weights=~push, minlength=theta.size)
    sources = n_pull + (np.bincount(cons, weights=push, minlength=theta.size) > 0)
    expected = H * phi[push].sum() + np.where(sources > 1, theta * L * sources, 0).sum()
    assert got["total_cost"] == pytest.approx(expected, rel=1e-6)


def test_an_experiment_writes_its_table_chart_and_finding(spark, tmp_path):
    from PIL import Image

    (r,) = experiments.run(spark, "ff-fig4", tmp_path, scale=SCALE, seed=3)
    w = Workload.draw(scaled(PROFILES["ff2010"], SCALE), seed=3)
    with open(r.files["csv"]) as f:
        table = list(csv.DictReader(f))
    assert [int(x["ratio"]) for x in table] == [1, 2, 4, 8, 16, 24, 32]
    for row in table:
        ww = w.with_ratio(int(row["ratio"]))
        push, pull, hybrid = modeled(ww, None), modeled(ww, float("inf")), modeled(ww, H / L)
        assert float(row["push-all"]) == pytest.approx(push["cost"], rel=1e-6)
        assert float(row["pull-all"]) == pytest.approx(pull["cost"], rel=1e-6)
        assert float(row["hybrid"]) == pytest.approx(hybrid["cost"], rel=1e-6)
        best = min(push["cost"], pull["cost"])
        assert float(row["gain %"]) == pytest.approx(100 * (1 - hybrid["cost"] / best), abs=1e-6)
    # the finding is decided from the numbers: the hybrid never loses to a pure strategy
    assert r.holds == all(
        float(x["hybrid"]) <= min(float(x["push-all"]), float(x["pull-all"])) + 1e-6 for x in table
    ) and float(table[0]["push-all"]) > float(table[0]["pull-all"])
    with Image.open(r.files["png"]) as im:
        assert im.size == (700, 420)
        assert len(im.convert("RGB").getcolors(1 << 16) or []) > 20  # lines, not a blank page
    md = open(r.files["md"]).read()
    assert ("Finding (holds)" if r.holds else "Finding (does NOT hold)") in md
    assert "ff-fig4.png" in md


def test_unknown_experiment_is_a_clear_error(spark, tmp_path):
    with pytest.raises(ValueError, match="unknown experiment 'ff-fig99'"):
        experiments.run(spark, "ff-fig99", tmp_path)


def test_a_shared_view_sweep_prices_every_strategy(spark):
    """Chen & Zhou's sweeps (``cz_sweep``): the FF baselines against numpy, the shared-view
    strategies never above FF-PerPair (they fall back to it part by part), and the verdict
    from the numbers."""
    base = Workload.draw(scaled(PROFILES["cz2015"], 0.01), seed=3)

    def make(ratio: float) -> Workload:  # the update rates varied, as in Figure 6c
        return dataclasses.replace(base, phi=base.phi * (base.ratio() / ratio))

    r = experiments.cz_sweep(spark, "cz-test", "a sweep", "ratio", (30.0,), make)
    assert [row["ratio"] for row in r.rows] == [30.0]
    for row in r.rows:
        w = make(row["ratio"])
        assert w.ratio() == pytest.approx(row["ratio"])
        assert row["edges"] == len(w.consumers)
        assert row["push-all"] == pytest.approx(modeled(w, None)["cost"], rel=1e-6)
        assert row["pull-all"] == pytest.approx(modeled(w, float("inf"))["cost"], rel=1e-6)
        assert row["ff-per-pair"] == pytest.approx(modeled(w, H / L)["cost"], rel=1e-6)
        for s in ("cz-greedy", "cz-hierarchy1", "cz-hierarchy2"):
            assert row[s] <= row["ff-per-pair"] * (1 + 1e-9), s
        assert row["H2 vs FF-PerPair %"] == pytest.approx(
            100 * (row["cz-hierarchy2"] / row["ff-per-pair"] - 1)
        )
    assert r.holds == all(
        row["cz-hierarchy2"] <= min(row[s] for s in experiments.CZ_STRATEGIES) + 1e-6
        for row in r.rows
    )
    assert ("cheapest at" in r.finding) and str(len(r.rows)) in r.finding

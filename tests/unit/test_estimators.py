"""Rates: the trailing window, the estimators on numbers worked by hand or by an independent
numpy transcription of the documented formulas, and flash detection."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from jobs.estimators import RateParams, estimate
from jobs.stages.rates import flag_flash, previous_forecast, window_days

D = dt.date


def test_window_is_shorter_at_the_start_of_the_data():
    available = [D(2026, 1, 1), D(2026, 1, 2), D(2026, 1, 3)]
    assert window_days(available, D(2026, 1, 3), 7) == available
    assert window_days(available, D(2026, 1, 1), 7) == [D(2026, 1, 1)]


def test_window_is_capped_at_its_length():
    available = [D(2026, 1, 1) + dt.timedelta(days=i) for i in range(10)]
    got = window_days(available, D(2026, 1, 10), 7)
    assert got[0] == D(2026, 1, 4) and got[-1] == D(2026, 1, 10) and len(got) == 7


def test_window_counts_days_without_data_inside_it():
    assert len(window_days([D(2026, 1, 1), D(2026, 1, 3)], D(2026, 1, 3), 7)) == 3


def frame(spark, rows):
    return spark.createDataFrame(rows, "id string, t int, n long")


def ids_frame(spark, ids):
    return spark.createDataFrame([(i,) for i in ids], "id string")


def run(spark, rows, ids, offsets, **params):
    out = estimate(frame(spark, rows), ids_frame(spark, ids), "id", offsets, RateParams(**params))
    return {r.id: r for r in out.collect()}


def test_trailing_mean_prior_by_hand(spark):
    rows = [("a", -1, 24), ("a", 0, 24), ("c", 0, 24)]
    got = run(spark, rows, ["a", "b"], [-1, 0], method="trailing_mean_prior", prior_hours=24.0)
    # 48 hours; population mean m = (48 + 0 + 24) / (3 ids * 48 h) = 0.5 per hour
    assert got["a"].prior_rate == pytest.approx(0.5)
    assert got["a"].rate == pytest.approx((48 + 0.5 * 24) / (48 + 24))
    assert got["b"].rate == pytest.approx((0 + 0.5 * 24) / 72)  # no activity: still > 0
    assert got["c"].rate == pytest.approx((24 + 12) / 72)  # an id only seen in the counts
    assert (got["b"].n, got["a"].n_today) == (0, 24)


def test_trailing_mean_is_the_plain_average(spark):
    got = run(spark, [("a", -2, 10), ("a", 0, 20)], ["a", "z"], [-2, -1, 0], method="trailing_mean")
    assert got["a"].rate == pytest.approx(30 / 72)
    assert got["z"].rate == 0.0


def reference_eb_trend(
    counts: np.ndarray, offsets: np.ndarray, half_life: float, damping: float, floor: float
):
    """The formulas of jobs/estimators.py's docstring, written again with numpy."""
    w = 2.0 ** (offsets / half_life)
    exposure = 24 * w.sum()
    s0 = counts @ w
    r = s0 / exposure
    m, v = max(r.mean(), floor), r.var()
    s2 = max(v - m * (w**2).sum() / (24 * w.sum() ** 2), (m / 20) ** 2)
    alpha, beta = m * m / s2, m / s2
    tb = (w * offsets).sum() / w.sum()
    q = (w * (offsets - tb) ** 2).sum()
    slope = counts @ (w * (offsets - tb)) / q
    level = (alpha + s0) / (beta + exposure)
    qw2 = (w**2 * (offsets - tb) ** 2).sum()
    s1 = counts @ (w * (offsets - tb))
    rss = (counts**2) @ w - s0**2 / w.sum() - s1**2 / q
    fit_dof = w.sum() - (w**2).sum() / w.sum() - qw2 / q
    dispersion = max(1.0, np.maximum(rss, 0).sum() / (s0 / w.sum() * fit_dof).sum())
    slope_var = 24 * level * qw2 / q**2 * dispersion

    shrink = slope**2 / (slope**2 + slope_var)
    per_slope = damping * s0 / (s0 + alpha) * shrink * (1 - tb) / 24
    sd = np.sqrt(
        (np.sqrt(alpha + s0) / (beta + exposure)) ** 2 + (per_slope * np.sqrt(slope_var)) ** 2
    )
    return np.maximum(level + per_slope * slope, floor), sd


def test_eb_trend_matches_an_independent_transcription(spark):
    rng = np.random.default_rng(3)
    offsets = np.arange(-6, 1)
    base = rng.gamma(2.0, 10.0, size=40)
    growth = rng.uniform(-0.2, 0.2, size=40)
    counts = rng.poisson(base[:, None] * (1 + growth[:, None]) ** (offsets[None, :] + 6))
    rows = [
        (f"i{i}", int(t), int(c))
        for i in range(40)
        for t, c in zip(offsets, counts[i], strict=True)
        if c
    ]
    got = run(
        spark,
        rows,
        [f"i{i}" for i in range(40)],
        list(offsets),
        half_life_days=2.5,
        trend_damping=0.7,
    )
    rate, sd = reference_eb_trend(counts.astype(float), offsets.astype(float), 2.5, 0.7, 1e-3)
    assert [got[f"i{i}"].rate for i in range(40)] == pytest.approx(list(rate), rel=1e-9)
    assert [got[f"i{i}"].rate_sd for i in range(40)] == pytest.approx(list(sd), rel=1e-9)


def test_eb_trend_follows_trends_and_shrinks_the_unknown(spark):
    offsets = list(range(-6, 1))
    rows = []
    for i in range(30):  # a population of steady ids around 24 a day
        rows += [(f"s{i}", t, 20 + (i % 9)) for t in offsets]
    rows += [("up", t, 10 * (t + 7)) for t in offsets]  # 10, 20, ..., 70
    rows += [("down", t, 10 * (7 - (t + 6))) for t in offsets]  # 70, 60, ..., 10
    got = run(spark, rows, ["new"], offsets, trend_damping=0.5)
    mean_up = sum(10 * (t + 7) for t in offsets) / (24 * 7)

    assert mean_up == pytest.approx(40 / 24)
    assert got["up"].rate > 55 / 24  # far above the trailing mean (40/day), heading for ~80/day
    assert got["down"].rate < 25 / 24  # far below it, heading for ~0
    assert got["up"].trend_per_day == pytest.approx(10.0) and got[
        "down"
    ].trend_per_day == pytest.approx(-10.0)
    # an id without a single event all week: a week of silence is evidence of a low rate,
    # but the prior keeps it above zero (posterior mean alpha / (beta + exposure))
    assert 0 < got["new"].rate < 0.25 * got["new"].prior_rate
    assert got["new"].trend_per_day == 0
    steady = got["s4"]  # 24 a day, every day: barely moved by the prior
    assert steady.rate == pytest.approx(24 / 24, rel=0.02)
    assert steady.rate_sd < 0.1 * steady.rate


def test_a_flash_producer_is_flagged_and_its_rate_jumps(spark):
    rates = spark.createDataFrame(
        [("flash", 1.5, 100), ("steady", 1.0, 26), ("tiny", 0.2, 5), ("newcomer", 3.0, 80)],
        "producer_id string, rate double, n_today long",
    )
    previous = spark.createDataFrame(
        [("flash", 0.8, 1.0), ("steady", 0.8, 1.0), ("tiny", 0.005, 0.01)],
        "producer_id string, events_per_hour double, rate_hi double",
    )
    carried = rates.join(previous_forecast(previous), "producer_id", "left")
    got = {r.producer_id: r for r in flag_flash(carried, factor=4.0, min_events=12).collect()}
    assert got["flash"].flash and got["flash"].rate == pytest.approx(100 / 24)
    assert not got["steady"].flash and got["steady"].rate == 1.0
    assert got["flash"].forecast_prev == 0.8  # yesterday's point forecast is kept for reports
    assert not got["tiny"].flash  # 5 events is 20x the forecast, but too few to call a flash
    assert (
        not got["newcomer"].flash and got["newcomer"].forecast_prev is None
    )  # no forecast to beat


def test_carried_columns_ride_along_and_ids_only_carried_get_no_row(spark):
    rows = [("a", -2, 3), ("a", -1, 0), ("c", 0, 6)]
    carried = spark.createDataFrame([("a", 1.5), ("z", 9.0)], "id string, x double")
    out = estimate(
        frame(spark, rows),
        ids_frame(spark, ["a", "b"]),
        "id",
        [-2, -1, 0],
        RateParams(method="trailing_mean"),
        carried=carried,
    )
    got = {r.id: r for r in out.collect()}
    assert set(got) == {"a", "b", "c"}  # z is only yesterday's: not an id of today
    assert (got["a"].x, got["b"].x, got["c"].x) == (1.5, None, None)
    # the last day with a count: a day with 0 does not count, an id without counts has none
    assert (got["a"].last_t, got["b"].last_t, got["c"].last_t) == (-2, None, 0)
    assert [(got[i].n, got[i].n_today) for i in "abc"] == [(3, 0), (0, 0), (6, 6)]
    assert got["a"].rate == pytest.approx(3 / 72) and got["b"].rate == 0.0


def test_window_counts_read_ingests_counts_and_count_older_days_from_clean_rows(
    spark, make_settings
):
    from jobs.common.storage import Storage
    from jobs.common.tables import contract, write_partition
    from jobs.stages.rates import window_counts
    from support.paths import recorded

    wh = Storage.at(make_settings().warehouse)
    ds = D(2026, 5, 3)
    events = contract("clean", "events")
    schema = (
        "event_id string, producer_id string, created_at timestamp, payload string, "
        "attributes map<string,string>"
    )
    at = dt.datetime(2026, 5, 1, 12)
    # 2026-05-01: clean rows only (ingested before counts existed): a x2, b x1
    rows = [("e1", "a", at, None, None), ("e2", "a", at, None, None), ("e3", "b", at, None, None)]
    with recorded(wh.root, D(2026, 5, 1), "ingest"):
        write_partition(spark.createDataFrame(rows, schema), wh, events, D(2026, 5, 1))
    # 2026-05-03: counts as ingest writes them; no clean rows needed to read them
    counts = spark.createDataFrame([("a", 5), ("c", 7)], "producer_id string, n long")
    with recorded(wh.root, ds, "ingest"):
        write_partition(counts, wh, contract("clean", "event_counts"), ds)
    # 2026-05-02 has no data at all
    days = [D(2026, 5, 1), D(2026, 5, 2), ds]
    got = {tuple(r) for r in window_counts(spark, wh, "events", days, ds).collect()}
    assert got == {("a", -2, 2), ("b", -2, 1), ("a", 0, 5), ("c", 0, 7)}

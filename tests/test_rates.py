"""Rates: the trailing window and the shrinkage prior, on numbers worked by hand."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs.rates import estimate_rates, window_days

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
    # a day with no partition in the middle still counts as observed time (zero events)
    assert len(window_days([D(2026, 1, 1), D(2026, 1, 3)], D(2026, 1, 3), 7)) == 3


def test_shrunk_rates_by_hand(spark):
    counts = spark.createDataFrame([("a", 48), ("c", 24)], "id string, n long")
    ids = spark.createDataFrame([("a",), ("b",)], "id string")
    got = {
        r.id: r
        for r in estimate_rates(
            counts, ids, "id", hours=48.0, prior_hours=24.0, rate_floor=1e-3
        ).collect()
    }
    # population mean m = (48 + 0 + 24) / (3 ids * 48 h) = 0.5 per hour
    assert got["a"].prior_rate == pytest.approx(0.5)
    assert got["a"].rate == pytest.approx((48 + 0.5 * 24) / (48 + 24))  # 0.8333
    assert got["b"].rate == pytest.approx((0 + 0.5 * 24) / 72)  # no activity: still > 0
    assert got["c"].rate == pytest.approx((24 + 12) / 72)  # an id only seen in the counts
    assert got["b"].n == 0


def test_no_history_at_all_gives_the_floor_prior(spark):
    counts = spark.createDataFrame([], "id string, n long")
    ids = spark.createDataFrame([("x",), ("y",)], "id string")
    got = {r.id: r.rate for r in estimate_rates(counts, ids, "id", 24.0, 24.0, 0.01).collect()}
    assert got == {"x": pytest.approx(0.01 * 24 / 48), "y": pytest.approx(0.005)}


def test_without_prior_the_rate_is_the_trailing_mean(spark):
    counts = spark.createDataFrame([("a", 30)], "id string, n long")
    ids = spark.createDataFrame([("a",)], "id string")
    (row,) = estimate_rates(counts, ids, "id", 120.0, 0.0, 1e-3).collect()
    assert row.rate == pytest.approx(30 / 120)

"""The volume and follow gates of ``validate`` on hand-worked counts, and the defaults against
the shapes of data they must let through (docs/data-contracts.md, "Volume gates")."""

from __future__ import annotations

import itertools

import pytest

from jobs.common.config import ConfigError, Settings
from jobs.stages.validate import follow_gate, gate_line, volume_gate

S = Settings()


def test_a_volume_gate_compares_with_the_median_of_the_previous_days():
    past = [120, 80, 100, 1000]  # median 110: one odd day does not move it
    assert volume_gate("events", 110, past, S)["ratio"] == 1.0
    assert volume_gate("events", 22, past, S)["passed"] is True  # 0.2x, the lower end
    assert volume_gate("events", 21, past, S)["passed"] is False
    assert volume_gate("events", 550, past, S)["passed"] is True  # 5x, the upper end
    g = volume_gate("events", 551, past, S)
    assert (g["passed"], g["reference"], g["days"]) == (False, 110.0, 4)
    assert gate_line(g, "2026-03-05") == (
        "volume gate: events has 551 rows on 2026-03-05, 5.01x the median 110 of the 4 "
        "previous published days (allowed 0.2x to 5x: volume_low, volume_high)"
    )
    assert volume_gate("views", 0, past, S)["passed"] is False  # a header-only delivery


def test_a_volume_gate_is_off_without_enough_history_or_for_an_allowed_outage():
    assert volume_gate("events", 0, [100, 100], S)["passed"] is None  # fewer than 3 days
    assert volume_gate("events", 0, [100, 100, 100], S)["passed"] is False
    assert volume_gate("events", 0, [100, 100, 100], S, allowed=True)["passed"] is None
    assert volume_gate("events", 50, [0, 0, 0], S)["passed"] is None  # nothing to compare with
    two = Settings(volume_min_days=2)
    assert volume_gate("events", 0, [100, 100], two)["passed"] is False


def test_the_follow_gate_bounds_the_share_of_edges_changed():
    g = follow_gate({"edges_before": 1000, "edges_added": 300, "edges_removed": 200}, S)
    assert (g["observed"], g["passed"]) == (0.5, True)
    g = follow_gate({"edges_before": 1000, "edges_added": 300, "edges_removed": 201}, S)
    assert g["passed"] is False
    assert gate_line(g, "2026-03-05") == (
        "follow gate: 50.1% of the 1,000 follow edges changed on 2026-03-05 "
        "(allowed up to 50%: max_follow_change)"
    )
    assert follow_gate({"edges": 1000}, S)["passed"] is None  # the first day: no graph before


@pytest.mark.parametrize(
    ("profile", "scale", "variant"),
    [
        ("ff2010", 0.01, {"trend_share": 0.5, "trend_per_day": 0.15}),
        ("cz2015", 0.02, {"flash_producers": 5, "flash_day": 5, "flash_factor": 30.0}),
        ("gplus", 0.001, {"flash_producers": 5, "flash_day": 5, "flash_factor": 30.0}),
    ],
)
def test_the_default_gates_let_generated_days_through(tmp_path, profile, scale, variant):
    """Ten days of each generated shape, with daily trends or a flash event: every day from
    the fourth on passes the default gates (the Higgs week's burst needs a wider band:
    tests/e2e/test_real_data.py)."""
    import dataclasses
    import datetime as dt

    from jobs.common.storage import Storage
    from jobs.workloads.generate import PROFILES, generate, scaled

    shape = dataclasses.replace(scaled(PROFILES[profile], scale), **variant)
    stats = generate(Storage.at(str(tmp_path)), dt.date(2026, 1, 1), 10, shape, seed=7)
    for table in ("events", "views"):
        counts = [getattr(st, table) for st in stats]
        for i in range(3, len(counts)):
            past = list(reversed(counts[max(0, i - 7) : i]))
            g = volume_gate(table, counts[i], past, S)
            assert g["passed"] is True, (table, i, g["ratio"])
    for before, day in itertools.pairwise(stats):
        changed = {"edges_before": before.edges, "edges_added": day.follow_rows, "edges_removed": 0}
        assert follow_gate(changed, S)["passed"] is True  # every change row at most one edge


def test_volume_settings_are_checked():
    with pytest.raises(ConfigError, match="volume_low"):
        Settings(volume_low=1.5)
    with pytest.raises(ConfigError, match="volume_low"):
        Settings(volume_high=0.5)
    with pytest.raises(ConfigError, match="volume_min_days"):
        Settings(volume_days=2, volume_min_days=3)

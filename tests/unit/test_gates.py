"""The volume and follow gates of ``validate`` on hand-worked counts, and the defaults against
the shapes of data they must let through (docs/data-contracts.md, "Volume gates")."""

from __future__ import annotations

import itertools

import pytest

from jobs.common.config import ConfigError, Settings
from jobs.common.records import IngestRecord, Manifest, TableAccount
from jobs.stages.gates import (
    follow_added_gate,
    follow_removed_gate,
    gate_line,
    volume_gate,
)

S = Settings()


def test_a_volume_gate_compares_with_the_median_of_the_previous_days():
    past = [120, 80, 100, 1000]  # median 110: one odd day does not move it
    assert volume_gate("events", 110, past, S).ratio == 1.0
    assert volume_gate("events", 22, past, S).passed is True  # 0.2x, the lower end
    assert volume_gate("events", 21, past, S).passed is False
    assert volume_gate("events", 550, past, S).passed is True  # 5x, the upper end
    g = volume_gate("events", 551, past, S)
    assert (g.passed, g.reference, g.days) == (False, 110.0, 4)
    assert gate_line(g, "2026-03-05") == (
        "volume gate: events has 551 rows on 2026-03-05, 5.01x the median 110 of the 4 "
        "previous published days (allowed 0.2x to 5x: volume_low, volume_high)"
    )
    assert volume_gate("views", 0, past, S).passed is False  # a header-only delivery


def test_a_volume_gate_is_off_without_enough_history_or_for_an_allowed_outage():
    assert volume_gate("events", 0, [100, 100], S).passed is None  # fewer than 3 days
    assert volume_gate("events", 0, [100, 100, 100], S).passed is False
    assert volume_gate("events", 0, [100, 100, 100], S, allowed=True).passed is None
    assert volume_gate("events", 50, [0, 0, 0], S).passed is None  # nothing to compare with
    two = Settings(volume_min_days=2)
    assert volume_gate("events", 0, [100, 100], two).passed is False


def test_the_removal_gate_bounds_the_share_of_edges_removed():
    g = follow_removed_gate(TableAccount(edges_before=1000, edges_added=900, edges_removed=200), S)
    assert (g.observed, g.passed) == (0.2, True)  # additions are not counted here
    g = follow_removed_gate(TableAccount(edges_before=1000, edges_added=0, edges_removed=201), S)
    assert g.passed is False
    assert gate_line(g, "2026-03-05") == (
        "follow gate: 20.1% of the 1,000 follow edges were removed on 2026-03-05 "
        "(allowed up to 20%: max_follow_removed)"
    )
    g = follow_removed_gate(TableAccount(edges=1000), S)  # the first day: no graph before
    assert g.passed is None and "no follow graph" in g.note


def test_additions_are_judged_against_the_graphs_own_history():
    day = TableAccount(edges_before=1000, edges_added=500, edges_removed=0)  # 50% added
    g = follow_added_gate(day, [0.2, 0.1], S)
    assert g.passed is None and "needs 3" in g.note  # too little history
    g = follow_added_gate(day, [0.1, 0.12, 0.08], S)  # median 10%: 5x, the upper end
    assert (g.ratio, g.passed) == (5.0, True)
    g = follow_added_gate(day.model_copy(update={"edges_added": 510}), [0.1, 0.12, 0.08], S)
    assert g.passed is False
    assert gate_line(g, "2026-03-05") == (
        "follow gate: 51.0% of the follow edges were added on 2026-03-05, 5.10x the median "
        "share 10.00% of the 3 previous published days (allowed up to 5x: follow_added_high)"
    )
    g = follow_added_gate(day, [0.1, 0.12, 0.08], Settings(follow_added_high=0))
    assert g.passed is None and "follow_added_high is 0" in g.note


def growing(edges: list[int], removed: list[int] | None = None):
    """The ingest records' follows counts of a graph with ``edges`` at the end of each day."""
    removed = removed or [0] * len(edges)
    return [
        TableAccount(edges_before=b, edges_added=e - b + r, edges_removed=r)
        for b, e, r in zip(edges, edges[1:], removed[1:], strict=False)
    ]


def test_a_graph_that_doubles_then_grows_a_fifth_a_day_passes_and_a_cut_snapshot_does_not():
    edges = [1000, 2000]
    for _ in range(8):
        edges.append(int(edges[-1] * 1.2))
    days = growing(edges)
    for i, day in enumerate(days):
        past = [d.edges_added / d.edges_before for d in reversed(days[max(0, i - 7) : i])]
        assert follow_removed_gate(day, S).passed is True
        assert follow_added_gate(day, past, S).passed is (True if i >= 3 else None), i
    cut = TableAccount(
        edges_before=edges[-1], edges_added=0, edges_removed=edges[-1] - int(0.4 * edges[-1])
    )
    g = follow_removed_gate(cut, S)
    assert g.passed is False
    assert gate_line(g, "2026-03-05").startswith("follow gate: 60.0% of the")


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
            assert g.passed is True, (table, i, g.ratio)
    shares = []
    for before, day in itertools.pairwise(stats):
        # every change row changes at most one edge, either way
        changed = TableAccount(
            edges_before=before.edges, edges_added=day.follow_rows, edges_removed=day.follow_rows
        )
        assert follow_removed_gate(changed, S).passed is True
        assert follow_added_gate(changed, shares[::-1][:7], S).passed in (True, None)
        shares.append(day.follow_rows / before.edges)


def test_volume_settings_are_checked():
    with pytest.raises(ConfigError, match="volume_low"):
        Settings(volume_low=1.5)
    with pytest.raises(ConfigError, match="volume_low"):
        Settings(volume_high=0.5)
    with pytest.raises(ConfigError, match="volume_min_days"):
        Settings(volume_days=2, volume_min_days=3)


def test_follow_and_accept_settings_are_checked(tmp_path):
    from jobs.common.config import load_settings

    with pytest.raises(ConfigError, match="max_follow_removed"):
        Settings(max_follow_removed=1.5)
    with pytest.raises(ConfigError, match="unknown gates"):
        Settings(accept_gates=("volumes",))
    assert load_settings(environ={"FEEDPIPE_ACCEPT_GATES": "volume, follows"}).accept_gates == (
        "volume",
        "follows",
    )
    old = tmp_path / "feedpipe.toml"
    old.write_text("max_follow_change = 0.5\n")
    with pytest.raises(ConfigError, match="'max_follow_change' is now max_follow_removed"):
        load_settings(str(old), environ={})
    with pytest.raises(ConfigError, match="FEEDPIPE_MAX_FOLLOW_CHANGE is set"):
        load_settings(environ={"FEEDPIPE_MAX_FOLLOW_CHANGE": "0.5"})


def test_an_accepted_gate_is_kept_and_marked(tmp_path):
    """A failed volume gate under ``accept_gates = volume``: still failed, accepted, with the
    day in its note; the follow gates, not named, are not accepted."""
    import datetime as dt

    from jobs.common import ledger
    from jobs.common.storage import Storage
    from jobs.stages.gates import failed_gates, gates

    wh = Storage.at(str(tmp_path))
    d = dt.date(2026, 3, 1)
    for i in range(3):
        day = d + dt.timedelta(days=i)
        ledger.mark_published(
            wh,
            day,
            Manifest.model_validate(
                {"ds": str(day), "input": {"events": {"rows_in": 100}, "views": {"rows_in": 100}}}
            ),
        )
    today = d + dt.timedelta(days=3)
    ingest = IngestRecord.model_validate(
        {
            "tables": {
                "events": {"rows_in": 10},
                "views": {"rows_in": 100},
                "follows": {"edges_before": 100, "edges_added": 0, "edges_removed": 50},
            }
        }
    )
    plain = gates(S, today, wh, ingest)
    assert [(g.gate, g.table) for g in failed_gates(plain)] == [
        ("volume", "events"),
        ("follow_removed", "follows"),
    ]
    accepted = gates(Settings(accept_gates=("volume",)), today, wh, ingest)
    assert [(g.gate, g.passed, g.accepted) for g in accepted[:2]] == [
        ("volume", False, True),
        ("volume", True, True),
    ]
    assert f"accepted for {today}" in accepted[0].note
    assert [g.gate for g in failed_gates(accepted)] == ["follow_removed"]

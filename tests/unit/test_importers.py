"""Importers on hand-made SNAP edge lists: comments, CRLF, tabs, self-loops, generated
activity, and a clear error for a file without edges."""

from __future__ import annotations

import datetime as dt
import gzip

import pandas as pd
import pytest

from jobs.common.storage import Storage
from jobs.workloads.importers import SourceError, import_snap_edges

D = dt.date(2026, 1, 1)


def test_snap_edge_list_with_comments_crlf_tabs_and_self_loops(tmp_path):
    src = tmp_path / "edges.txt.gz"
    text = (
        "# Directed graph\r\n# FromNodeId\tToNodeId\r\n"
        "1\t2\r\n1 3\r\n2\t2\r\n\r\n3  1\r\n1\t2\r\nlonely\r\n"
    )
    src.write_bytes(gzip.compress(text.encode()))
    result = import_snap_edges(src, Storage.at(str(tmp_path / "landing")), D)
    stats = result["follows"]
    assert (stats["comments"], stats["self_loops"], stats["duplicates"], stats["malformed"]) == (
        2,
        1,
        1,
        1,
    )
    assert stats["edges"] == 3
    follows = pd.read_parquet(tmp_path / "landing" / "follows" / f"ds={D}")
    assert sorted(zip(follows.consumer_id, follows.producer_id, strict=True)) == [
        ("1", "2"),
        ("1", "3"),
        ("3", "1"),
    ]
    assert "op" not in follows.columns  # a snapshot


def test_reverse_and_generated_activity(tmp_path):
    src = tmp_path / "e.txt"
    src.write_text("a b\na c\nb c\n")
    out = Storage.at(str(tmp_path / "l"))
    result = import_snap_edges(src, out, D, reverse=True, activity_profile="ff2010", days=2, seed=1)
    follows = pd.read_parquet(tmp_path / "l" / "follows" / f"ds={D}")
    assert set(zip(follows.consumer_id, follows.producer_id, strict=True)) == {
        ("b", "a"),
        ("c", "a"),
        ("c", "b"),
    }
    events = pd.read_parquet(tmp_path / "l" / "events")
    assert set(events.producer_id) <= {"a", "b"}  # only producers of the graph post
    assert result["activity"]["events"] == len(events) > 0
    assert sorted(p.name for p in (tmp_path / "l" / "views").iterdir()) == [
        "ds=2026-01-01",
        "ds=2026-01-02",
    ]


def test_a_file_without_edges_is_an_error(tmp_path):
    src = tmp_path / "e.txt"
    src.write_text("# nothing here\n")
    with pytest.raises(SourceError, match="no edges"):
        import_snap_edges(src, Storage.at(str(tmp_path / "l")), D)


def test_growth_days_land_the_graph_as_a_growing_network(tmp_path):
    """Ten edges over four days: a snapshot, then change logs of ``follow`` rows; every edge
    lands exactly once, the days' sizes differ by at most one, and the seed fixes the order."""
    src = tmp_path / "e.txt"
    edges = {(f"c{i}", f"p{(i * 7) % 5}") for i in range(10)}
    src.write_text("".join(f"{c} {p}\n" for c, p in sorted(edges)))

    def land(root, seed):
        out = Storage.at(str(root))
        result = import_snap_edges(
            src, out, D, activity_profile="ff2010", days=4, seed=seed, growth_days=4
        )
        days = [
            pd.read_parquet(root / "follows" / f"ds={D + dt.timedelta(days=i)}") for i in range(4)
        ]
        return result, days

    result, days = land(tmp_path / "a", 3)
    assert "op" not in days[0].columns  # day one: a snapshot
    for later in days[1:]:
        assert set(later.op) == {"follow"}
    landed = [set(zip(d.consumer_id, d.producer_id, strict=True)) for d in days]
    assert set().union(*landed) == edges
    assert sum(map(len, landed)) == len(edges)  # each edge once
    assert sorted(map(len, landed)) == [2, 2, 3, 3]
    assert result["growth"] == {str(D + dt.timedelta(days=i)): len(landed[i]) for i in range(4)}
    _, again = land(tmp_path / "b", 3)
    assert [set(zip(d.consumer_id, d.producer_id, strict=True)) for d in again] == landed
    _, other = land(tmp_path / "c", 4)
    assert [set(zip(d.consumer_id, d.producer_id, strict=True)) for d in other] != landed


def test_growth_needs_activity_on_every_day(tmp_path):
    src = tmp_path / "e.txt"
    src.write_text("a b\na c\n")
    with pytest.raises(SourceError, match="--growth-days 3"):
        import_snap_edges(
            src,
            Storage.at(str(tmp_path / "l")),
            D,
            activity_profile="ff2010",
            days=2,
            growth_days=3,
        )

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

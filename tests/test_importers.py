"""Importers: SNAP edge lists (hand-made and wiki-Vote) and higgs-twitter into the landing."""

from __future__ import annotations

import datetime as dt
import gzip

import pandas as pd
import pytest
from conftest import SHARED

from jobs.common.storage import Storage
from jobs.workloads.importers import SourceError, import_higgs, import_snap_edges

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


@pytest.mark.skipif(
    not (SHARED / "data" / "wiki-vote").exists(), reason="../shared/data/wiki-vote is absent"
)
def test_wiki_vote(tmp_path):
    result = import_snap_edges(
        SHARED / "data" / "wiki-vote" / "wiki-Vote.txt.gz", Storage.at(str(tmp_path)), D
    )
    s = result["follows"]
    # every non-comment line is an edge, a self-loop or a repeat: nothing is lost silently
    assert (
        s["lines"] - s["comments"] - s["blank"]
        == s["edges"] + s["self_loops"] + s["duplicates"] + s["malformed"]
    )
    assert s["edges"] + s["self_loops"] + s["duplicates"] == 103_689
    assert len(pd.read_parquet(tmp_path / "follows")) == s["edges"]


@pytest.mark.skipif(
    not (SHARED / "data" / "higgs-twitter").exists(),
    reason="../shared/data/higgs-twitter is absent",
)
def test_higgs(tmp_path):
    result = import_higgs(SHARED / "data" / "higgs-twitter", Storage.at(str(tmp_path)))
    assert result["activity_rows"] == 563_069 and result["malformed_activity_rows"] == 0
    assert list(result["days"]) == [f"2012-07-0{d}" for d in range(1, 8)]
    assert sum(result["days"].values()) == 563_069
    assert (
        result["follows"]["edges"]
        + result["follows"]["self_loops"]
        + result["follows"]["duplicates"]
        == 328_132
    )
    events = pd.read_parquet(tmp_path / "events" / "ds=2012-07-04")
    assert len(events) == result["days"]["2012-07-04"] and events["event_id"].is_unique
    day = pd.Timestamp("2012-07-04", tz="UTC")
    assert events["created_at"].between(day, day + pd.Timedelta(days=1), inclusive="left").all()
    follows = pd.read_parquet(tmp_path / "follows")
    assert sorted(p.name for p in (tmp_path / "follows").iterdir()) == ["ds=2012-07-01"]
    assert len(follows) == result["follows"]["edges"]


@pytest.mark.skipif(
    not (SHARED / "data" / "higgs-twitter").exists(),
    reason="../shared/data/higgs-twitter is absent",
)
def test_higgs_week_through_the_pipeline(spark, tmp_path):
    """All seven Higgs days through ingest, rates, plan and materialize; every day, the
    assembled feeds of 300 sampled consumers equal the naive answer from the landing files."""
    import random

    import naive

    from jobs.common.config import Settings
    from jobs.serving.reader import FeedReader
    from jobs.stages import runner

    landing = tmp_path / "landing"
    result = import_higgs(SHARED / "data" / "higgs-twitter", Storage.at(str(landing)))
    days = [dt.date.fromisoformat(d) for d in result["days"]]
    # The served plan is FF-PerPair; the two pure strategies are costed beside it. The other
    # strategies are checked on generated data (tests/test_pipeline.py); here the point is
    # real, bursty input end to end, at a cost that fits the test suite.
    s = Settings(
        landing=str(landing),
        warehouse=str(tmp_path / "wh"),
        feed_k=10,
        shuffle_partitions=4,
        strategy="ff-per-pair",
        strategies=("push-all", "pull-all", "ff-per-pair"),
    )
    consumers = sorted({c for c, _ in naive.graph(landing, days[0], days[0])})
    sample = set(random.Random(7).sample(consumers, 300))
    for ds in days:
        for stage in ("ingest", "rates", "plan", "materialize"):
            runner.run_stage(stage, s, ds, spark)
        expected = naive.feeds(landing, ds, days[0], 10, sample)
        got = FeedReader(s.warehouse, ds).feeds(sorted(expected), 10)
        wrong = [c for c in expected if [it.event_id for it in got[c]] != expected[c]]
        assert not wrong, f"{ds}: {len(wrong)} of {len(expected)} feeds differ, e.g. {wrong[:3]}"
        assert sum(len(v) for v in expected.values()) > 0

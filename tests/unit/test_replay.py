"""The replay's counts (``jobs.evaluation.replay.realized``) on a plan worked by hand."""

from __future__ import annotations

import pytest

from jobs.evaluation import replay
from jobs.selection.cost import CostModel

COLUMNS = (
    "strategy string, consumer_id string, producer_id string, mode string, source_id string, "
    "phi double, theta double, ratio double, current_mode string, active boolean"
)


def test_pushes_reads_and_latency_of_a_plan_with_a_shared_view(spark):
    # c1 pushes p1 into its own feed and reads view v1 (p2, p3); c2 reads v1 alone; c3 pulls
    # p1 and p4; c4 follows nobody
    edges = [
        ("c1", "p1", "push", "c1"),
        ("c1", "p2", "view", "v1"),
        ("c1", "p3", "view", "v1"),
        ("c2", "p2", "view", "v1"),
        ("c2", "p3", "view", "v1"),
        ("c3", "p1", "pull", "p1"),
        ("c3", "p4", "pull", "p4"),
    ]
    stacked = spark.createDataFrame(
        [("s", c, p, m, src, 1.0, 1.0, 1.0, None, True) for c, p, m, src in edges], COLUMNS
    )
    members = spark.createDataFrame(
        [("s", "v1", "p2", 1.0), ("s", "v1", "p3", 1.0)],
        "strategy string, view_id string, producer_id string, phi double",
    )
    posts = {"p1": 2, "p2": 1, "p3": 3, "p4": 5}
    events = spark.createDataFrame(
        [(f"{p}-{i}", p) for p, n in posts.items() for i in range(n)],
        "event_id string, producer_id string",
    )
    looks = {"c1": 2, "c2": 6, "c3": 4, "c4": 7}
    views = spark.createDataFrame(
        [(c,) for c, n in looks.items() for _ in range(n)], "consumer_id string"
    )
    (row,) = replay.realized(stacked, members, events, views, CostModel(3.0, 1.0)).collect()
    r = row.asDict()

    # pushes: p1's 2 events into c1's feed, p2's 1 and p3's 3 into v1 (once, whoever reads it)
    # reads: c1 reads 2 sources (its feed, v1) in each of 2 views; c2 reads 1 source: free;
    # c3 reads 2 pulled producers in each of 4 views
    assert (r["events"], r["feed_views"]) == (11, 2 + 6 + 4)
    assert (r["pushes"], r["pull_reads"]) == (2 + 1 + 3, 2 * 2 + 4 * 2)
    assert r["realized_cost"] == pytest.approx(3.0 * 6 + 12)
    # sources per view: 1 for c2's 6 views, 2 for the other 6: half the views read 1 source
    assert (r["sources_p50"], r["sources_p95"], r["sources_p99"]) == (1.0, 2.0, 2.0)

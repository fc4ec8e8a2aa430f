"""The validate stage's check frames, on small feeds whose faults are known row by row."""

from __future__ import annotations

import datetime as dt
from collections import Counter


def test_feed_checks_flag_broken_order_duplicate_ranks_and_duplicate_events(spark):
    from jobs.stages.checks import feed_order_check

    t = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
    minute = dt.timedelta(minutes=1)
    rows = [
        # a: a good feed, newest first
        ("a", 1, "e3", t + 3 * minute),
        ("a", 2, "e2", t + 2 * minute),
        ("a", 3, "e1", t + minute),
        # b: rank 2 twice (and so no rank 3)
        ("b", 1, "e3", t + 3 * minute),
        ("b", 2, "e2", t + 2 * minute),
        ("b", 2, "e1", t + minute),
        # c: one event twice (its rank 2 is then not older than rank 1: the order breaks too)
        ("c", 1, "e3", t + 3 * minute),
        ("c", 2, "e3", t + 3 * minute),
        ("c", 3, "e1", t + minute),
        # d: rank 2 newer than rank 1
        ("d", 1, "e1", t + minute),
        ("d", 2, "e2", t + 2 * minute),
        # e: a gap (ranks 1, 3)
        ("e", 1, "e2", t + 2 * minute),
        ("e", 3, "e1", t + minute),
    ]
    schema = "consumer_id string, rank int, event_id string, created_at timestamp"
    out = feed_order_check(spark.createDataFrame(rows, schema), "consumer_id").collect()
    got = {
        (r["consumer_id"], r["rank"], r["event_id"]): (
            r["order_ok"],
            r["rank_unique"],
            r["event_unique"],
        )
        for r in out
    }
    ranks = Counter((c, k) for c, k, _, _ in rows)
    events = Counter((c, e) for c, _, e, _ in rows)
    for c, k, e, _ in rows:
        assert got[(c, k, e)][1] is (ranks[(c, k)] == 1), (c, k, e)
        assert got[(c, k, e)][2] is (events[(c, e)] == 1), (c, k, e)
    # the order, derived row by row for the feeds without tied ranks (b's two rank-2 rows
    # may come in either order: one of them is flagged, as rank 3 is missing)
    for c in "acde":
        feed = sorted((r for r in rows if r[0] == c), key=lambda r: r[1])
        for pos, (_, k, e, at) in enumerate(feed, start=1):
            prev = feed[pos - 2] if pos > 1 else None
            newer = prev is None or prev[3] > at or (prev[3] == at and prev[2] > e)
            assert got[(c, k, e)][0] is (k == pos and newer), (c, k, e)
    assert [got[("b", 2, e)][0] for e in ("e1", "e2")].count(False) == 1

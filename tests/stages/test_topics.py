"""Topic producers through the stages (``support.workloads.topics_workload``: three days of
``cz2015`` with generated topics, definitions a user may get wrong, a day that keeps the
definitions and a day that changes one and removes one).

* ``ingest``: the definitions in force each day, what was quarantined and why, the row
  accounting, and ``clean/topic_events`` equal to every predicate evaluated on every event
  (brute force, ``support.naive``) with the definitions of the day the event landed.
* The assembled feeds equal the naive answer, each event once although many reach a
  consumer through their author and a topic; topic items name their author
  (``support.strategies.check_topic_feeds``: here the default strategies' two kinds of
  plan, every other strategy in tests/e2e/test_strategies.py).
* Incremental maintenance equals a full refresh; per-producer coherency refuses topics.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import pytest

from jobs.common.ledger import read_record
from jobs.common.records import MaterializeRecord
from jobs.common.storage import Storage
from jobs.common.tables import contract, read_partition
from jobs.serving.report import html_report
from jobs.stages import runner
from jobs.stages.ingest_topics import TopicsUnsupported
from support import naive
from support.records import ingested
from support.strategies import author_of, check_topic_feeds, naive_topic_feeds
from support.workloads import (
    CHANGED,
    CONFLICTING,
    HAND_TOPICS,
    REMOVED,
    STAGE_TIER,
    START,
    TOPIC_DATES,
    TOPIC_LAST,
    TOPICS,
    table_rows,
)

DAYS = TOPIC_DATES


@functools.cache
def expected_streams(landing: str) -> dict[str, set[tuple[str, str]]]:
    """Per day, the (topic, event) pairs of the events that landed that day (brute force)."""
    ev = naive.events(Path(landing), TOPIC_LAST, START, with_day=True)
    streams = naive.streams(Path(landing), TOPIC_LAST, START)
    topic_rows = streams[streams["stream_id"] != streams["producer_id"]]
    day_of = dict(zip(ev["event_id"], ev["_day"], strict=True))
    out: dict[str, set[tuple[str, str]]] = {str(d): set() for d in DAYS}
    for t, e in zip(topic_rows["stream_id"], topic_rows["event_id"], strict=True):
        out[str(day_of[e])].add((t, e))
    return out


def test_ingest_keeps_the_definitions_in_force_and_quarantines_the_bad_ones(spark, topics_built):
    s = topics_built
    wh = Storage.at(s.warehouse)
    defined = {d: {r[0]: r[1] for r in table_rows(spark, s, "clean", "topics", d)} for d in DAYS}
    generated = {f"topic{i:06d}" for i in range(40)}
    good = generated | {t for t, (_, why) in HAND_TOPICS.items() if why is None}
    assert set(defined[DAYS[0]]) == good
    assert defined[DAYS[1]] == defined[DAYS[0]]  # no topics folder: the definitions stay
    assert set(defined[DAYS[2]]) == generated - {REMOVED} | {"not-eu"}
    assert defined[DAYS[2]][CHANGED] == "region = eu AND score <= 40" != defined[DAYS[0]][CHANGED]
    since = {r[0]: r[2] for r in table_rows(spark, s, "clean", "topics", DAYS[1])}
    assert set(since.values()) == {START}

    rows = read_partition(spark, wh, contract("quarantine", "rows"), DAYS[0], table="topics")
    reasons = sorted((r["reason"], r["raw"]) for r in rows.collect())
    by_reason: dict[str, int] = {}
    for reason, _ in reasons:
        by_reason[reason] = by_reason.get(reason, 0) + 1
    assert by_reason == {
        "malformed_predicate": 1,
        "topic_id_is_account": 1,
        "conflicting_definition": 2,
        "duplicate": 1,
    }, reasons
    counts = ingested(wh, DAYS[0]).topics
    assert counts.rows_in == 40 + len(HAND_TOPICS) + 3
    assert counts.rows_in == (counts.clean or 0) + counts.duplicates + counts.quarantined
    assert counts.quarantine_reasons == {
        "conflicting_definition": 2,
        "malformed_predicate": 1,
        "topic_id_is_account": 1,
    }
    assert counts.snapshot is True
    carried = ingested(wh, DAYS[1]).topics
    assert carried.snapshot is False
    assert carried.carried == carried.clean == len(good)
    for d in DAYS:
        assert ingested(wh, d).topics.matches == len(expected_streams(s.landing)[str(d)])
    # the day's page shows them
    page = html_report(wh, DAYS[0])
    found = re.search(r"<table id=[\"']topics[\"']>(.*?)</table>", page, re.S)
    assert found, "the day's page has no topics table"
    table = found.group(1)
    assert f"<td>{len(good)}</td>" in table and "conflicting_definition 2" in table
    assert f"<td>{len(expected_streams(s.landing)[str(DAYS[0])])}</td>" in table


def test_topic_events_are_every_predicate_evaluated_on_every_event(spark, topics_built):
    s = topics_built
    expected = expected_streams(s.landing)
    assert all(len(expected[str(d)]) > 500 for d in DAYS)  # the test has something to check
    for d in DAYS:
        got = {(r[0], r[1]) for r in table_rows(spark, s, "clean", "topic_events", d)}
        assert got == expected[str(d)], (d, len(got ^ expected[str(d)]))
    # the removed topic gets no events after its removal, the changed one its new matches
    assert any(t == REMOVED for t, _ in expected[str(DAYS[1])])
    assert not any(t == REMOVED for t, _ in expected[str(DAYS[2])])
    # a topic's rate is estimated like an account's: from its daily matches
    rates = {r[0]: r for r in table_rows(spark, s, "rates", "producer_rates", TOPIC_LAST)}
    assert "topic000000" in rates and "not-eu" in rates


@pytest.mark.parametrize("strategy", STAGE_TIER)
def test_assembled_feeds_with_topics_equal_the_naive_answer(spark, topics_copy, strategy):
    check_topic_feeds(spark, topics_copy, strategy)


def test_feeds_meet_events_through_author_and_topic_once(topics_built):
    """The workload is one where it matters: many feeds hold an event that reaches the
    consumer both ways, and items that came only through a topic."""
    landing = Path(topics_built.landing)
    edges = naive.graph(landing, TOPIC_LAST, START)
    author = author_of(topics_built.landing)
    both = through_topic = 0
    for c, feed in naive_topic_feeds(topics_built.landing).items():
        for e in feed:
            if (c, author[e]) in edges:
                both += 1
            else:
                through_topic += 1
    assert through_topic > 100
    assert both > 100


def test_incremental_with_topics_equals_a_full_refresh(spark, topics_copy):
    s = topics_copy
    tables = ("producer_feed", "consumer_feed", "view_feed", "event_store")
    incremental = {t: table_rows(spark, s, "feeds", t, TOPIC_LAST) for t in tables}
    record = read_record(Storage.at(s.warehouse), TOPIC_LAST, "materialize")
    assert isinstance(record, MaterializeRecord)
    assert record.mode == "incremental" and record.topic_streams
    runner.run_stage("materialize", s, TOPIC_LAST, spark, full_refresh=True)
    for t in tables:
        assert table_rows(spark, s, "feeds", t, TOPIC_LAST) == incremental[t], t


def test_per_producer_coherency_refuses_topics(spark, topics_copy):
    s = dataclasses.replace(topics_copy, coherency="per_producer")
    with pytest.raises(TopicsUnsupported, match="coherency = global"):
        runner.run_stage("ingest", s, TOPIC_LAST, spark)
    assert CONFLICTING[0] not in {r[0] for r in table_rows(spark, s, "clean", "topics", START)}


def test_topic_days_are_validated_and_published_with_topics_accounted_apart(spark, topics_copy):
    """Every topic day passes validate and is published; the row accounting checks the
    accounts' counts against the clean events and the topics' counts against the matches,
    each equal to the brute-force count; a topic's lost count fails the topics' row only."""
    import pyarrow.compute as pc
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    from jobs.common import ledger
    from jobs.stages.checks import accounting_check
    from support.paths import version

    s = topics_copy
    wh = Storage.at(s.warehouse)
    for d in DAYS:
        runner.run_stage("validate", s, d, spark)
        runner.run_stage("publish", s, d, spark)
        assert ledger.is_published(wh, d)
    assert ledger.latest(wh) == TOPIC_LAST
    expected = expected_streams(s.landing)
    all_events = naive.events(Path(s.landing), TOPIC_LAST, START, with_day=True)
    for d in DAYS:
        ingest = ingested(wh, d)
        got = accounting_check(spark, wh, d, ingest).toPandas().set_index("table")
        n_events = int((all_events["_day"] == d).sum())
        assert got.loc["events", "clean_rows"] == got.loc["events", "clean_counted"] == n_events
        n = len(expected[str(d)])
        assert n > 0
        assert got.loc["topic_events"].tolist() == [n, n, n, n]
    folder = version(s.warehouse, "clean", "event_counts", TOPIC_LAST)
    whole = pads.dataset(str(folder)).to_table()
    lost = sorted(TOPICS & set(whole["producer_id"].to_pylist()))[0]
    kept = whole.filter(pc.not_equal(whole["producer_id"], lost))
    for f in folder.glob("*.parquet"):
        f.unlink()
    pq.write_table(kept, folder / "part-0.parquet")  # one topic's count lost
    ingest = ingested(wh, TOPIC_LAST)
    got = accounting_check(spark, wh, TOPIC_LAST, ingest).toPandas().set_index("table")
    got = got.drop(index="follows")
    assert sorted(got.index[got["clean_rows"] != got["clean_counted"]]) == ["topic_events"]

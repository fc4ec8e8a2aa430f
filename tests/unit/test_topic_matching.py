"""The topic matcher in Spark (jobs/stages/topics.py) against brute force: every predicate
evaluated on every event by the reference (jobs/common/predicates.py), on random
predicates and attributes: numeric comparisons on non-numeric values, missing attributes,
numbers spelled several ways, topics with no equality term and topics of ``!=`` only."""

from __future__ import annotations

import random

from jobs.common.predicates import holds, parse
from jobs.stages import topics

NAMES = ["cat", "region", "score", "lang"]
VALUES = ["x", "y", "X", "1", "1.0", "2", "10", "-0", "0", "1e1", "abc", " 1", "", "x y"]
LITERALS = ["x", "y", "X", "abc", "'1'", "'x y'", "''", "1", "1.0", "2", "10", "0", "-0.0", "1e1"]
OPS = ["=", "!=", "<", "<=", ">", ">="]


def random_predicate(r: random.Random) -> str:
    terms = []
    for _ in range(r.randint(1, 3)):
        name = r.choice(NAMES)
        if r.random() < 0.25:
            listed = ", ".join(r.sample(LITERALS, r.randint(1, 3)))
            terms.append(f"{name} {r.choice(['IN', 'in'])} ({listed})")
        else:
            terms.append(f"{name} {r.choice(OPS)} {r.choice(LITERALS)}")
    return f" {r.choice(['AND', 'and'])} ".join(terms)


def test_matches_equal_brute_force_on_random_predicates_and_attributes(spark):
    r = random.Random(41)
    events = []
    for i in range(120):
        attrs = {n: r.choice(VALUES) for n in NAMES if r.random() < 0.6}
        events.append((f"e{i}", attrs if attrs or r.random() < 0.5 else None))
    defs = [(f"t{i}", random_predicate(r)) for i in range(150)]
    # the paths without an equality term: ordering terms only, and != only
    defs += [("t_range", "score >= 1 AND score < 10"), ("t_ne", "cat != x AND lang != '1'")]
    defs += [("t_in", "region IN (1, x, 'x y')"), ("t_bad", "cat === x"), ("t_none", None)]
    # a number and its text listed together: an event's "1" meets both keys, matched once
    defs += [("t_both", "score IN (1, '1', 1e0)")]
    expected = {
        (t, e)
        for t, text in defs
        if text is not None and "===" not in text
        for e, attrs in events
        if holds(parse(text), attrs)
    }
    ev = spark.createDataFrame(events, "event_id string, attributes map<string,string>")
    parsed = topics.parse_topics(spark.createDataFrame(defs, "topic_id string, predicate string"))
    errors = {row.topic_id: row.error for row in parsed.where("error is not null").collect()}
    assert errors == {
        "t_bad": "a value expected after cat =, got '='",
        "t_none": "no predicate",
    }
    got = [tuple(row) for row in topics.match(ev, parsed).collect()]
    assert len(got) == len(set(got))  # each pair once
    assert set(got) == expected
    # the random cases do reach every path
    assert any(t == "t_range" for t, _ in expected) and any(t == "t_ne" for t, _ in expected)
    assert any(t == "t_both" and dict(events)[e]["score"] == "1" for t, e in expected)
    assert len(expected) > 200

"""The topic predicate language (jobs/common/predicates.py), case by case from
../shared/DESIGN.md ("Topic producers")."""

from __future__ import annotations

import pytest

from jobs.common.predicates import Malformed, Term, Value, holds, is_number, parse


def test_terms_values_and_keywords_as_written():
    got = parse("category = health and Region IN ('eu', \"us\") AND score >= -1.5e2")
    assert got == (
        Term("category", "=", (Value("health"),)),
        Term("Region", "in", (Value("eu"), Value("us"))),
        Term("score", ">=", (Value("-1.5e2", -150.0),)),
    )
    # whitespace outside quotes is insignificant; inside quotes AND, commas and parentheses
    # are part of the value, and a doubled quote is one quote
    assert parse("tag in('a AND b','(x, y)' ,'it''s')") == (
        Term("tag", "in", (Value("a AND b"), Value("(x, y)"), Value("it's"))),
    )
    assert parse('t="say ""hi"""') == (Term("t", "=", (Value('say "hi"'),)),)
    assert parse("lang.code:v-1!=en-GB") == (Term("lang.code:v-1", "!=", (Value("en-GB"),)),)
    # numbers: all forms of the pattern; a quoted number is a string
    for text, number in (("1", 1.0), ("+.5", 0.5), ("3.", 3.0), ("2E3", 2000.0)):
        assert parse(f"x < {text}") == (Term("x", "<", (Value(text, number),)),)
    assert parse("x = '1'") == (Term("x", "=", (Value("1"),)),)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty predicate"),
        ("   ", "empty predicate"),
        ("a IN ()", "a value expected in a IN"),
        ("a IN (x,)", "a value expected in a IN"),
        ("a IN x", "'(' expected after a IN"),
        ("a IN (x", "',' or ')' in a IN"),
        ("a = b AND", "a dangling AND"),
        ("AND a = b", "an operator or IN expected after 'AND'"),
        ("a === b", "a value expected after a =, got '='"),
        ("a == b", "a value expected after a =, got '='"),
        ("a = ", "a value after a = expected at the end"),
        ("a", "an operator after 'a' expected"),
        ("a = b c = d", "AND expected, got 'c'"),
        ("a = b OR c = d", "AND expected, got 'OR'"),
        ("a = 5x", "AND expected, got 'x'"),
        ("a = 'open", "an unterminated quote"),
        ("1a = b", "an attribute name expected, got '1'"),
        ("a ~ b", "unexpected '~ b'"),
        ("a = b; drop", "unexpected ';"),
    ],
)
def test_malformed_predicates_say_why(text, reason):
    with pytest.raises(Malformed, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse(text)


def test_numeric_attribute_values_are_the_whole_value():
    assert is_number("12") and is_number("-0.5e-3") and is_number(".5")
    assert not is_number(" 12") and not is_number("12 ") and not is_number("1e")
    assert not is_number("nan") and not is_number("inf") and not is_number("")


@pytest.mark.parametrize(
    "predicate, attributes, expected",
    [
        # strings compare exactly, case-sensitive
        ("c = health", {"c": "health"}, True),
        ("c = health", {"c": "Health"}, False),
        ("c != health", {"c": "Health"}, True),
        ("c < b", {"c": "a"}, True),  # code point order
        ("c < b", {"c": "B"}, True),  # "B" (66) < "b" (98)
        ("c >= b", {"c": "ba"}, True),
        # a number literal compares numbers, and only with numeric attributes
        ("s > 5", {"s": "10"}, True),  # as strings "10" < "5"
        ("s > 5", {"s": "4.99"}, False),
        ("s = 5", {"s": "5.0"}, True),
        ("s = 5", {"s": "5e0"}, True),
        ("s = '5'", {"s": "5.0"}, False),  # a quoted 5 is a string
        ("s != 5", {"s": "abc"}, False),  # non-numeric fails every numeric term
        ("s < 5", {"s": "abc"}, False),
        ("s != 5", {"s": "6"}, True),
        ("s != 5", {"s": "5"}, False),
        # a missing attribute satisfies != only
        ("s != 5", {}, True),
        ("c != x", {"d": "x"}, True),
        ("c = x", {}, False),
        ("c < x", None, False),
        ("c IN (x)", {}, False),
        # IN: any value that would satisfy =
        ("t IN (f1, motogp)", {"t": "motogp"}, True),
        ("t IN (f1, motogp)", {"t": "F1"}, False),
        ("t IN (1, x)", {"t": "1.0"}, True),
        ("t IN (1, x)", {"t": "x"}, True),
        ("t IN (1, x)", {"t": "y"}, False),
        # AND: every term
        ("c = health AND r = eu", {"c": "health", "r": "eu"}, True),
        ("c = health AND r = eu", {"c": "health", "r": "us"}, False),
        ("c = health AND r != eu", {"c": "health"}, True),
    ],
)
def test_evaluation_follows_the_contract(predicate, attributes, expected):
    assert holds(parse(predicate), attributes) is expected

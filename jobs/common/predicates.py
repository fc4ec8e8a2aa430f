"""Topic predicates: the language of ``LANDING/topics/ds=D/*`` (``../shared/DESIGN.md``,
"Topic producers"), parsed and evaluated on one event's attributes, in plain Python.

A predicate is terms joined by the keyword ``AND``; a term is ``attribute OP value`` (OP one
of ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``) or ``attribute IN (value, ...)``. Keywords are
case-insensitive, whitespace outside quotes is insignificant, attribute names match
``[A-Za-z_][A-Za-z0-9_.:-]*`` and names and values are case-sensitive. A value is a quoted
string (``'...'`` or ``"..."``, the quote doubled inside), an unquoted number (compared as a
double) or an unquoted word (a string).

Evaluation (:func:`holds`): a string term compares strings exactly (ordering by code point,
as Spark orders strings); a numeric term holds only for an attribute whose whole value is a
number; ``IN`` holds when any listed value would satisfy ``=``; a missing attribute satisfies
``!=`` and nothing else; a present non-numeric attribute fails every numeric term, ``!=``
included.

This is the reference the topic matcher is checked against and the parser that tells a
malformed definition (:class:`Malformed`, with the reason) from a good one. Its cost does
not grow with the data: one definition, or one event, at a time.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]*")
OPS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<quoted>'(?:[^']|'')*'|"(?:[^"]|"")*")
      | (?P<op>!=|<=|>=|=|<|>)
      | (?P<punct>[(),])
      | (?P<number>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
      | (?P<word>[A-Za-z_][A-Za-z0-9_.:-]*)
    )""",
    re.VERBOSE,
)


class Malformed(ValueError):
    """A predicate outside the language; the message says where."""


@dataclass(frozen=True)
class Value:
    """A literal: a string, or a number (``number`` set) written as ``text``."""

    text: str
    number: float | None = None


@dataclass(frozen=True)
class Term:
    """``attribute op value``; ``op`` ``in`` has several values."""

    attribute: str
    op: str
    values: tuple[Value, ...]


def is_number(text: str) -> bool:
    """Whether an attribute value is numeric: all of it matches the number pattern."""
    return NUMBER.fullmatch(text) is not None


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.lastgroup is None:
            rest = text[pos:].lstrip()
            what = "an unterminated quote" if rest[:1] in "'\"" else repr(rest[:10])
            raise Malformed(f"unexpected {what} at character {len(text) - len(rest) + 1}")
        kind = m.lastgroup
        token = m.group(kind)
        if kind == "word" and token.upper() in ("AND", "IN"):
            kind = token.upper()
        out.append((kind, token))
        pos = m.end()
    return out


def _value(kind: str, token: str) -> Value:
    if kind == "quoted":
        q = token[0]
        return Value(token[1:-1].replace(q + q, q))
    if kind == "number":
        return Value(token, float(token))
    return Value(token)  # a word, AND and IN included: after an operator they are values


def parse(text: str) -> tuple[Term, ...]:
    """The terms of ``text``; :class:`Malformed` with a reason when it is not a predicate."""
    tokens = _tokens(text)
    if not tokens:
        raise Malformed("empty predicate")
    terms: list[Term] = []
    i = 0

    def want(what: str) -> tuple[str, str]:
        nonlocal i
        if i >= len(tokens):
            raise Malformed(f"{what} expected at the end")
        i += 1
        return tokens[i - 1]

    values = ("quoted", "number", "word", "AND", "IN")
    while True:
        kind, name = want("an attribute name")
        if kind not in ("word", "AND", "IN") or NAME.fullmatch(name) is None:
            raise Malformed(f"an attribute name expected, got {name!r}")
        kind, op = want(f"an operator after {name!r}")
        if kind == "op":
            kind, token = want(f"a value after {name} {op}")
            if kind not in values:
                raise Malformed(f"a value expected after {name} {op}, got {token!r}")
            terms.append(Term(name, op, (_value(kind, token),)))
        elif kind == "IN":
            if want(f"'(' after {name} IN")[1] != "(":
                raise Malformed(f"'(' expected after {name} IN")
            listed: list[Value] = []
            while True:
                kind, token = want(f"a value in {name} IN (...)")
                if kind not in values:
                    raise Malformed(f"a value expected in {name} IN (...), got {token!r}")
                listed.append(_value(kind, token))
                kind, token = want(f"',' or ')' in {name} IN (...)")
                if token == ")":
                    break
                if token != ",":
                    raise Malformed(f"',' or ')' expected in {name} IN (...), got {token!r}")
            terms.append(Term(name, "in", tuple(listed)))
        else:
            raise Malformed(f"an operator or IN expected after {name!r}, got {op!r}")
        if i == len(tokens):
            return tuple(terms)
        kind, token = want("AND")
        if kind != "AND":
            raise Malformed(f"AND expected, got {token!r}")
        if i == len(tokens):
            raise Malformed("a dangling AND at the end")


def _term_holds(op: str, value: Value, attribute: str) -> bool:
    if value.number is None:
        return OPS[op](attribute, value.text)
    if not is_number(attribute):
        return False
    return OPS[op](float(attribute), value.number)


def holds(terms: tuple[Term, ...], attributes: Mapping[str, str] | None) -> bool:
    """Whether an event with ``attributes`` is one of the topic's events: every term holds."""
    attrs = attributes or {}
    for t in terms:
        present = attrs.get(t.attribute)
        if present is None:
            if t.op != "!=":
                return False
            continue
        if t.op == "in":
            if not any(_term_holds("=", v, present) for v in t.values):
                return False
        elif not _term_holds(t.op, t.values[0], present):
            return False
    return True

"""Topic matching in Spark: which of a day's events belong to which topics, in the spirit of
Fabret et al. (seed 004, Sections 3-4): each subscription (topic) is indexed by one access
predicate, the candidates found through it, and the remaining predicates checked on those
candidates only.

* :func:`parse_topics`: ``topic_id, predicate`` -> ``topic_id, terms`` or ``error`` (the
  reason a definition is malformed), parsed by ``jobs.common.predicates`` in
  ``mapInPandas`` batches (one definition at a time: bounded).
* :func:`match`: ``(topic_id, event_id)`` for every event whose attributes satisfy every
  term of a topic (``jobs.common.predicates.holds`` is the reference).

Access predicates (:func:`match`): a topic with an equality or ``IN`` term is indexed by the
one whose (attribute, value) pairs are rarest among the day's events, and meets the events
through an equi-join on that pair (a numeric value meets every numeric spelling of the same
double: ``5``, ``5.0``, ``5e0``); a topic whose terms are all comparisons is indexed by the
attribute of one of its ordering terms (``<``, ``<=``, ``>``, ``>=``), which every matching
event must have, and meets the events that have it; a topic of ``!=`` terms only (which a
missing attribute satisfies) meets every event: that is the one cross join, and its output
is as large as its input. Every candidate is then checked against all of the topic's terms
with Spark expressions (no Python per event).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

VALUE = "struct<text:string,number:double>"
TERM = f"struct<attribute:string,op:string,values:array<{VALUE}>>"
NUMBER_RE = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"


def parse_topics(topics: DataFrame) -> DataFrame:
    """``topics`` (with ``topic_id`` and ``predicate``, and any other columns, kept) plus
    ``terms`` and ``error``: ``terms`` null and ``error`` the reason when the predicate is
    malformed (or missing)."""
    from pyspark.sql.types import StructType

    def parse(batches):  # type: ignore[no-untyped-def]
        from jobs.common.predicates import Malformed, parse

        for b in batches:
            terms: list[list[dict[str, Any]] | None] = []
            errors: list[str | None] = []
            for text in b["predicate"]:
                try:
                    if text is None:
                        raise Malformed("no predicate")
                    parsed = parse(text)
                    terms.append(
                        [
                            {
                                "attribute": t.attribute,
                                "op": t.op,
                                "values": [{"text": v.text, "number": v.number} for v in t.values],
                            }
                            for t in parsed
                        ]
                    )
                    errors.append(None)
                except Malformed as exc:
                    terms.append(None)
                    errors.append(str(exc))
            yield b.assign(terms=terms, error=errors)

    extra = StructType.fromDDL(f"terms array<{TERM}>, error string")
    assert isinstance(extra, StructType)
    schema = StructType(topics.schema.fields + extra.fields)
    return topics.mapInPandas(parse, schema)


def _key(kind: str, value: Column) -> Column:
    """The join key of an (attribute, value) pair: strings by their text, numbers by their
    double (``-0.0`` as ``0.0``)."""
    from pyspark.sql import functions as F

    if kind == "s":
        return F.concat(F.lit("s:"), value)
    number = F.when(value == 0, F.lit(0.0)).otherwise(value)
    return F.concat(F.lit("n:"), number.cast("string"))


def _holds(attributes: Column, term: Column) -> Column:
    """Whether ``term`` holds for an event with ``attributes`` (the contract of
    ``jobs.common.predicates.holds``, as a Spark expression)."""
    from pyspark.sql import functions as F

    a = F.try_element_at(attributes, term["attribute"])
    numeric = a.rlike(NUMBER_RE)
    as_double = a.try_cast("double")

    def compare(op: Column | None, v: Column) -> Column:
        """``attribute op v``; ``op`` None: equality (an ``IN`` list's values)."""
        s, n = v["text"], v["number"]

        def by(left: Column, right: Column) -> Column:
            if op is None:
                return left == right
            return (
                F.when(op == "=", left == right)
                .when(op == "!=", left != right)
                .when(op == "<", left < right)
                .when(op == "<=", left <= right)
                .when(op == ">", left > right)
                .when(op == ">=", left >= right)
                .otherwise(F.lit(False))
            )

        return F.when(n.isNull(), by(a, s)).otherwise(numeric & by(as_double, n))

    return (
        F.when(a.isNull(), term["op"] == "!=")
        .when(term["op"] == "in", F.exists(term["values"], lambda v: compare(None, v)))
        .otherwise(compare(term["op"], term["values"][0]))
    )


def match(events: DataFrame, topics: DataFrame, *carry: str) -> DataFrame:
    """``topic_id, event_id`` (and the events' columns ``carry``), each pair once, for
    ``events`` (``event_id``, ``attributes`` map<string,string> with unique keys, as
    ``ingest`` writes them) and parsed ``topics`` (``topic_id``, ``terms``; rows with null
    ``terms`` are ignored)."""
    from pyspark.sql import functions as F

    return (
        _candidates(events, topics, carry)
        .where(F.forall("terms", lambda t: _holds(F.col("attributes"), t)))
        .select("topic_id", "event_id", *carry)
    )


def candidates(events: DataFrame, topics: DataFrame) -> DataFrame:
    """``topic_id, event_id``, each pair once: the events each topic's access predicate
    finds (a superset of its matches; :func:`match` checks every term on them)."""
    return _candidates(events, topics, ()).select("topic_id", "event_id")


def _candidates(events: DataFrame, topics: DataFrame, carry: tuple[str, ...]) -> DataFrame:
    """The candidate pairs with what checking them needs beside them: the topic's ``terms``
    and the event's ``attributes`` (and ``carry``), joined to each side where the access
    predicate meets it, so the candidates themselves are never shuffled.

    Each pair comes once without a ``distinct``: a topic takes exactly one path; through an
    attribute, or every event, an event meets a topic once (its attributes' keys are unique);
    through equality keys an event's value gives its text key and, when it is a number, its
    numeric key, so a topic listing both (``IN (5, '5')``) would meet it twice: the text
    key's row is dropped when the topic's keys hold the event's numeric key."""
    from pyspark.sql import functions as F

    good = topics.where(F.col("terms").isNotNull()).select("topic_id", "terms")
    ev = events.select("event_id", "attributes", *carry)
    pairs = ev.select("*", F.explode("attributes").alias("attribute", "value"))
    numeric = F.when(F.col("value").rlike(NUMBER_RE), _key("n", F.col("value").try_cast("double")))
    event_keys = (
        pairs.withColumn("nkey", numeric)
        .select("*", F.explode(F.array(_key("s", F.col("value")), F.col("nkey"))).alias("key"))
        .where(F.col("key").isNotNull())
        .drop("value")
    )
    # every equality-like term of every topic, with its (attribute, key) pairs
    terms = good.select("topic_id", F.posexplode("terms").alias("pos", "t"))
    eq_keys = (
        terms.where(F.col("t.op").isin("=", "in"))
        .select(
            "topic_id",
            "pos",
            F.col("t.attribute").alias("attribute"),
            F.explode("t.values").alias("v"),
        )
        .select(
            "topic_id",
            "pos",
            "attribute",
            F.when(F.col("v.number").isNull(), _key("s", F.col("v.text")))
            .otherwise(_key("n", F.col("v.number")))
            .alias("key"),
        )
        .distinct()
    )
    # the rarest term of each topic: the fewest events through its keys (Fabret's access
    # predicate: the most selective equality)
    freq = event_keys.groupBy("attribute", "key").agg(F.count("*").alias("n"))
    weight = (
        eq_keys.join(freq, ["attribute", "key"], "left")
        .groupBy("topic_id", "pos")
        .agg(F.sum(F.coalesce("n", F.lit(0))).alias("n"))
    )
    best = weight.groupBy("topic_id").agg(F.min(F.struct("n", "pos"))["pos"].alias("pos"))
    access = (
        eq_keys.join(best, ["topic_id", "pos"])
        .groupBy("topic_id")
        .agg(F.first("attribute").alias("attribute"), F.collect_set("key").alias("keys"))
        .join(good, "topic_id")
        .select("topic_id", "terms", "attribute", "keys", F.explode("keys").alias("key"))
    )
    by_equality = event_keys.join(access, ["attribute", "key"]).where(
        ~F.col("key").startswith("s:")
        | ~F.coalesce(F.array_contains("keys", F.col("nkey")), F.lit(False))
    )

    # topics without an equality term: through an ordering term's attribute, or every event
    rest = good.join(best.select("topic_id"), "topic_id", "left_anti").withColumn(
        "o", F.filter("terms", lambda t: t["op"].isin("<", "<=", ">", ">="))
    )
    by_attribute = (
        rest.where(F.size("o") > 0)
        .select("topic_id", "terms", F.col("o")[0]["attribute"].alias("attribute"))
        .join(pairs.drop("value"), "attribute")
    )
    by_all = rest.where(F.size("o") == 0).select("topic_id", "terms").crossJoin(ev)

    cols = ["topic_id", "event_id", "terms", "attributes", *carry]
    return (
        by_equality.select(cols)
        .unionByName(by_attribute.select(cols))
        .unionByName(by_all.select(cols))
    )


TOPIC_REASONS = (
    "unparseable_row",
    "null_key",
    "malformed_predicate",
    "topic_id_is_account",
    "conflicting_definition",
)
"""Why a topic definition is quarantined, in the order the rules are checked (repeats of an
identical definition are ``duplicate``)."""


def tag_definitions(rows: DataFrame, accounts: DataFrame) -> DataFrame:
    """Topic definitions (``topic_id``, ``predicate``, ``_corrupt_text``, ...) with ``terms``
    parsed and ``reason``/``detail`` (null when the definition is in force).

    ``accounts``: one column ``id``, every id known as an account (an event's producer or a
    consumer): a topic with such an id would share its stream with the account, so it is
    quarantined. An id defined twice with different predicates is ambiguous: all its rows
    are quarantined; an identical repeat is a ``duplicate``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    parsed = parse_topics(rows)
    flagged = parsed.join(
        accounts.select(F.col("id").alias("topic_id"), F.lit(True).alias("_account")).distinct(),
        "topic_id",
        "left",
    )
    blank = F.col("topic_id").isNull() | (F.trim(F.col("topic_id")) == "")
    first = (
        F.when(F.col("_corrupt_text").isNotNull(), F.lit("unparseable_row"))
        .when(blank, F.lit("null_key"))
        .when(F.col("error").isNotNull(), F.lit("malformed_predicate"))
        .when(F.col("_account").isNotNull(), F.lit("topic_id_is_account"))
    )
    detail = F.when(F.col("error").isNotNull() & ~blank, F.col("error"))
    df = flagged.withColumn("reason", first).withColumn("detail", detail)
    ok = F.col("reason").isNull()
    by_id = Window.partitionBy("topic_id")
    spellings = F.size(F.collect_set(F.when(ok, F.col("predicate"))).over(by_id))
    order = Window.partitionBy("topic_id", "predicate").orderBy("_file")
    return (
        df.withColumn(
            "reason",
            F.when(ok & (spellings > 1), F.lit("conflicting_definition"))
            .when(ok & (F.row_number().over(order) > 1), F.lit("duplicate"))
            .otherwise(F.col("reason")),
        )
        .withColumn(
            "detail",
            F.when(
                F.col("reason") == "conflicting_definition",
                F.concat(F.lit("defined "), spellings.cast("string"), F.lit(" ways")),
            ).otherwise(F.col("detail")),
        )
        .drop("_account", "error")
    )


def brute_force(events: DataFrame, topics: DataFrame) -> DataFrame:
    """:func:`match` without access predicates: every topic checked on every event (a cross
    join; the reference of ``bench/topics.py``)."""
    from pyspark.sql import functions as F

    good = topics.where(F.col("terms").isNotNull()).select("topic_id", "terms")
    return (
        good.crossJoin(events.select("event_id", "attributes"))
        .where(F.forall("terms", lambda t: _holds(F.col("attributes"), t)))
        .select("topic_id", "event_id")
    )


def topic_events(events: DataFrame, topics: DataFrame) -> DataFrame:
    """``topic_id, event_id, producer_id, created_at``: the ``events`` (clean, with
    ``attributes``) that match each of the parsed ``topics`` in force, the author kept as
    ``producer_id``."""
    return match(events, topics, "producer_id", "created_at")

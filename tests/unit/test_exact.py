"""Exact sums (``jobs.common.exact``): the value is the documented function of the exact
sum of the truncated terms, whatever the order and partitioning, and the DuckDB reference
gives the same bits."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCALE = 1 << 60


def expected(terms: list[float]) -> float:
    """The module's definition, in Python integers: each term floored to a multiple of
    2^-60, the exact total split into its integer part and 60 fraction bits, and those two
    turned into doubles and added."""
    total = sum(math.floor(Fraction(x) * SCALE) for x in terms)
    whole, frac = total >> 60, total & (SCALE - 1)
    return float(whole) + float(frac) * 2.0**-60


def awkward_terms(n: int, seed: int) -> list[float]:
    """Terms whose plain double sum depends on the order: mixed signs, magnitudes from 1e-12
    to 1e12, values that cancel, and exact zeros."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rnd.random()
        if kind < 0.1:
            out.append(0.0)
        elif kind < 0.3:
            out.append(rnd.uniform(-1.0, 1.0) * 10.0 ** rnd.randint(-12, 12))
        elif kind < 0.4:
            big = rnd.uniform(1e11, 1e12)
            out.extend([big, -big + rnd.uniform(-1e-6, 1e-6)])
        else:
            out.append(rnd.expovariate(1.0) * 10.0 ** rnd.randint(-3, 3))
    return out


def test_exact_sum_is_the_documented_value_in_any_order_and_partitioning(spark):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from jobs.common.exact import exact_partial_sum, exact_resum, exact_sum, exact_value

    groups = {g: awkward_terms(400, seed=g) for g in range(6)}
    rows = [(g, i, x) for g, xs in groups.items() for i, x in enumerate(xs)]
    want = {g: expected(xs) for g, xs in groups.items()}
    # the terms really are order-sensitive in plain double arithmetic
    assert any(sum(xs) != sum(reversed(xs)) for xs in groups.values())

    seen = set()
    for seed, parts in ((1, 1), (2, 3), (3, 7)):
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        df = spark.createDataFrame(shuffled, "g int, i int, x double").repartition(parts)
        got = {
            r["g"]: r["s"] for r in df.groupBy("g").agg(exact_sum(F.col("x")).alias("s")).collect()
        }
        assert got == want  # bit for bit
        seen.add(tuple(sorted(got.items())))
        # two levels (partial sums per sub-group, summed again) give the same bits
        two = (
            df.groupBy("g", (F.col("i") % 5).alias("k"))
            .agg(exact_partial_sum(F.col("x")).alias("p"))
            .groupBy("g")
            .agg(exact_value(exact_resum(F.col("p"))).alias("s"))
        )
        assert {r["g"]: r["s"] for r in two.collect()} == want
        # the window form gives every row of a group its group's sum
        win = df.select("g", exact_sum(F.col("x"), over=Window.partitionBy("g")).alias("s"))
        assert {(r["g"], r["s"]) for r in win.collect()} == set(want.items())
    assert len(seen) == 1

    # close to the true sum: within a few units in the last place plus 2^-60 per term
    for g, xs in groups.items():
        true = math.fsum(xs)
        assert abs(want[g] - true) <= 4 * math.ulp(max(abs(true), 1.0)) + len(xs) * 2.0**-60


def test_exact_sum_of_no_terms_is_null_and_nulls_are_skipped(spark):
    from pyspark.sql import functions as F

    from jobs.common.exact import exact_sum

    df = spark.createDataFrame([(1, None), (2, None), (2, 0.25), (2, -1.5)], "g int, x double")
    got = {r["g"]: r["s"] for r in df.groupBy("g").agg(exact_sum(F.col("x")).alias("s")).collect()}
    assert got == {1: None, 2: -1.25}


def test_a_term_that_is_not_a_finite_double_below_2_63_fails_the_query(spark):
    """docs/operations.md: with Spark's ANSI mode (the default) a NaN, an infinity or a term
    beyond 2^63 stops the query instead of adding a wrong value."""
    from pyspark.errors import ArithmeticException
    from pyspark.sql import functions as F

    from jobs.common.exact import exact_sum

    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    for bad in (math.nan, math.inf, -1e19):
        df = spark.createDataFrame([(1, 1.0), (1, bad)], "g int, x double")
        with pytest.raises(ArithmeticException, match="CAST_OVERFLOW"):
            df.groupBy("g").agg(exact_sum(F.col("x"))).collect()
    big = spark.createDataFrame([(1, 2.0**62), (1, 0.5)], "g int, x double")
    assert big.groupBy("g").agg(exact_sum(F.col("x")).alias("s")).first()["s"] == 2.0**62


def test_the_duckdb_reference_sums_to_the_same_bits(tmp_path):
    import duckdb

    from bench import duckdb_reference as ref

    groups = {g: awkward_terms(300, seed=100 + g) for g in range(4)}
    con = duckdb.connect()
    con.execute("CREATE TABLE t (g INTEGER, x DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(g, x) for g, xs in groups.items() for x in xs])
    got = dict(con.execute(f"SELECT g, {ref.exact_sum_sql('x')} FROM t GROUP BY g").fetchall())
    assert got == {g: expected(xs) for g, xs in groups.items()}

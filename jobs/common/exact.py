"""Exact sums of doubles that do not depend on the order Spark adds them in.

Spark adds a column's values in whatever order its tasks and shuffles deliver them, so a
plain ``sum`` of doubles can differ in its last bits between two runs on the same data, and
a decision taken on it (push or pull, a flash producer, the cheapest strategy) could flip on
a rerun. The costs, the rates' sums and Lemma 2's ``phi_sum`` therefore go through
:func:`exact_sum`.

Each term ``x`` is cut to a fixed-point number with 60 binary fraction digits (truncated
toward minus infinity: the error is below 2^-60, about 8.7e-19, per term) and held as three
longs:

* ``hi``: ``floor(x)``;
* ``mid``: the upper 30 of the 60 fraction bits;
* ``lo``: the lower 30.

Longs add exactly, in any order. ``mid`` and ``lo`` are below 2^30, so their sums cannot
overflow before 2^33 terms; an overflow of ``hi`` fails the query (Spark's ANSI mode). At the
end the three sums are carried into an integer part ``H`` and 60 fraction bits ``F``, and
the result is ``double(H) + double(F) * 2^-60``: a function of the exact sum alone, so the
same terms give the same double whatever the partitioning, the number of tasks or the order
of the rows. Terms must be finite and below 2^63 in magnitude (a larger one fails the cast).

This replaced sums of ``decimal(38,18)`` terms, which gave the same guarantee at about five
times the cost: Spark adds such decimals as ``java.math.BigDecimal`` objects, one per row
(docs/tuning.md, "Exact sums"). The DuckDB reference in ``bench/`` sums the same
way (``bench/duckdb_reference.py``, ``exact_sum_sql``), so both give the same bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, WindowSpec

FRACTION_BITS = 60
HALF_BITS = FRACTION_BITS // 2
HALF_MASK = (1 << HALF_BITS) - 1
PARTS = ("hi", "mid", "lo")


def exact_parts(c: Column) -> tuple[Column, Column, Column]:
    """The three longs of one term: ``floor(x)`` and the upper and lower 30 of the 60
    fraction bits of ``x - floor(x)``. The subtraction and the scaling by 2^60 are exact
    in double arithmetic; the cast truncates the bits below 2^-60."""
    from pyspark.sql import functions as F

    hi = F.floor(c)
    frac = ((c - hi) * F.lit(float(1 << FRACTION_BITS))).cast("long")
    return hi, F.shiftright(frac, HALF_BITS), frac.bitwiseAND(F.lit(HALF_MASK))


def exact_partial_sum(c: Column, over: WindowSpec | None = None) -> Column:
    """The exact sum of ``c`` as a struct of three long sums (``hi``, ``mid``, ``lo``): an
    aggregate, or a window function with ``over``. Summed again with :func:`exact_resum`,
    read as a double with :func:`exact_value`."""
    from pyspark.sql import functions as F

    sums = [F.sum(p) if over is None else F.sum(p).over(over) for p in exact_parts(c)]
    return F.struct(*(s.alias(name) for s, name in zip(sums, PARTS, strict=True)))


def exact_resum(partial: Column) -> Column:
    """An aggregate: the exact sum of partial sums (:func:`exact_partial_sum`), itself a
    partial sum. The sum of partial sums is the partial sum of all their terms."""
    from pyspark.sql import functions as F

    return F.struct(*(F.sum(partial[name]).alias(name) for name in PARTS))


def exact_value(partial: Column) -> Column:
    """The double of a partial sum: the carries of ``lo`` into ``mid`` and of ``mid`` into
    ``hi`` are made first, so equal exact sums give equal doubles. Null when no term was
    summed (as a plain ``sum``)."""
    from pyspark.sql import functions as F

    lo, mid, hi = partial["lo"], partial["mid"], partial["hi"]
    m = mid + F.shiftright(lo, HALF_BITS)
    whole = hi + F.shiftright(m, HALF_BITS)
    frac = F.shiftleft(m.bitwiseAND(F.lit(HALF_MASK)), HALF_BITS).bitwiseOR(
        lo.bitwiseAND(F.lit(HALF_MASK))
    )
    return whole.cast("double") + frac.cast("double") * F.lit(2.0**-FRACTION_BITS)


def exact_sum(c: Column, over: WindowSpec | None = None) -> Column:
    """The sum of ``c`` as a double that does not depend on the order of its terms (see the
    module): an aggregate, or a window function with ``over``."""
    return exact_value(exact_partial_sum(c, over))

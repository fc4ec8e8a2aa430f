"""A suite judged from one query of its check frame: every metric its expectations need
(the frame's row count, each expectation's null, unexpected and kept-row counts) computed
in one Spark aggregate, as Deequ computes a table's metrics in one pass, then each
expectation judged by Great Expectations itself from those values
(``Expectation.metrics_validate``: its own success rule, ``mostly`` included, and its own
result fields).

Great Expectations' Spark engine resolves a suite's metrics level by level of their
dependency graph: the row count, then the unexpected counts in one aggregate, then a query
per uniqueness window (on a scale-1 day, 101 Spark jobs for the day's 14 suites). Here a
uniqueness window is a column of the same query.

The counts are the ones Great Expectations' Spark engine computes (its metric providers in
``great_expectations.expectations.metrics``):

* a column map expectation counts, among rows whose column is not null, those that fail its
  condition; ``expect_column_values_to_not_be_null`` counts the nulls;
* a column pair expectation first drops the rows its ``ignore_row_if`` names, and counts
  the rows left (``filtered_row_count``) and those among them that fail;
* ``expect_compound_columns_to_be_unique`` drops the rows its ``ignore_row_if`` names and
  counts the rows whose combination of values occurs again.

An expectation of another kind, or with a ``row_condition``, is not counted here:
:func:`suite_results` returns None and the suite runs on Great Expectations' engine.
``tests/stages/test_suites_fail.py`` holds every count to the engine's on every suite's
passing and corrupted inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from great_expectations.core.expectation_validation_result import (
        ExpectationValidationResult,
    )
    from great_expectations.expectations.expectation import Expectation
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )
    from pyspark.sql import Column, DataFrame

UNEXPECTED, FILTERED, NULLS = "unexpected_count", "filtered_row_count", "nonnull.unexpected_count"


def configurations(
    specs: list[dict[str, Any]], parameters: dict[str, Any]
) -> list[ExpectationConfiguration]:
    """The suite's expectations with its parameters substituted (``$PARAMETER``), in the
    order Great Expectations' validator evaluates and reports them: grouped by column, in
    order of each column's first expectation, the others last."""
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    groups: dict[str, list[ExpectationConfiguration]] = {}
    for spec in specs:
        cfg = ExpectationConfiguration(
            type=spec["type"], kwargs=dict(spec["kwargs"]), meta=spec.get("meta")
        )
        cfg.process_suite_parameters(parameters, interactive_evaluation=True)
        column = cfg.kwargs.get("column")
        groups.setdefault(column if isinstance(column, str) else "\0", []).append(cfg)
    return [cfg for group in groups.values() for cfg in group]


def _fails(e: Any) -> tuple[Column | None, Column] | None:
    """The expectation's (rows kept, rows failing) as boolean columns (None: every row is
    kept), or None when it is not counted here."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if getattr(e, "row_condition", None):
        return None
    kind = e.expectation_type
    if kind == "expect_column_values_to_not_be_null":
        return None, F.col(e.column).isNull()
    if kind in MAP_CONDITIONS:
        column = F.col(e.column)
        return None, column.isNotNull() & ~MAP_CONDITIONS[kind](e, column)
    if kind in PAIR_CONDITIONS:
        a, b = F.col(e.column_A), F.col(e.column_B)
        ignore = {
            "both_values_are_missing": a.isNull() & b.isNull(),
            "either_value_is_missing": a.isNull() | b.isNull(),
            "neither": F.lit(False),
        }[e.ignore_row_if]
        return ~ignore, ~ignore & ~PAIR_CONDITIONS[kind](e, a, b)
    if kind == "expect_compound_columns_to_be_unique":
        nulls = [F.col(c).isNull() for c in e.column_list]
        ignore = {
            "all_values_are_missing": _all(nulls),
            "any_value_is_missing": _any(nulls),
            "never": F.lit(False),
        }[e.ignore_row_if]
        repeated = F.count(F.lit(1)).over(Window.partitionBy(F.struct(*e.column_list))) > 1
        # the ignored rows are a partition of their own (every value null) or are dropped
        return ~ignore, ~ignore & repeated
    return None


def _all(cs: list[Column]) -> Column:
    out = cs[0]
    for c in cs[1:]:
        out = out & c
    return out


def _any(cs: list[Column]) -> Column:
    out = cs[0]
    for c in cs[1:]:
        out = out | c
    return out


def _between(e: Any, column: Column) -> Column:
    from pyspark.sql import functions as F

    lo, hi = e.min_value, e.max_value
    above = None if lo is None else (column > F.lit(lo) if e.strict_min else column >= F.lit(lo))
    below = None if hi is None else (column < F.lit(hi) if e.strict_max else column <= F.lit(hi))
    if above is None or below is None:
        out = above if below is None else below
        assert out is not None, "expect_column_values_to_be_between needs a bound"
        return out
    return above & below


def _unique(e: Any, column: Column) -> Column:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    return F.count(F.lit(1)).over(Window.partitionBy(column)) <= 1


MAP_CONDITIONS: dict[str, Callable[[Any, Column], Column]] = {
    "expect_column_values_to_be_in_set": lambda e, c: (
        c.isin(list(e.value_set)) if e.value_set is not None else c.isNotNull() | c.isNull()
    ),
    "expect_column_values_to_be_between": _between,
    "expect_column_values_to_be_unique": _unique,
}
"""A column map expectation's condition on a non-null value (Great Expectations' Spark
conditions)."""

PAIR_CONDITIONS: dict[str, Callable[[Any, Column, Column], Column]] = {
    "expect_column_pair_values_to_be_equal": lambda e, a, b: a.eqNullSafe(b),
    "expect_column_pair_values_a_to_be_greater_than_b": lambda e, a, b: (
        (a >= b) | a.eqNullSafe(b) if e.or_equal else a > b
    ),
}


def suite_results(
    frame: DataFrame, configs: list[ExpectationConfiguration], result_format: dict[str, Any]
) -> list[ExpectationValidationResult] | None:
    """Every expectation of ``configs`` judged from one aggregate query of ``frame``; None
    when one of them is not counted here (the caller runs the suite on Great Expectations'
    engine)."""
    from pyspark.sql import functions as F

    expectations: list[Expectation] = [cfg.to_domain_obj() for cfg in configs]
    counted = [_fails(e) for e in expectations]
    if any(c is None for c in counted):
        return None
    # every row's verdicts as boolean columns (a uniqueness window among them), then their
    # counts: one query
    flags: dict[str, Column] = {}
    per_expectation: list[dict[str, str]] = []
    for i, (e, c) in enumerate(zip(expectations, counted, strict=True)):
        assert c is not None
        kept, failing = c
        metric = e.map_metric  # type: ignore[attr-defined]
        names = {"table.row_count": "rows", f"{metric}.{UNEXPECTED}": f"u{i}"}
        flags[f"u{i}"] = failing
        if kept is not None:
            names[f"{metric}.{FILTERED}"] = f"k{i}"
            flags[f"k{i}"] = kept
        column = getattr(e, "column", None)
        if column is not None:  # a column map expectation also reads the column's nulls
            names[f"column_values.{NULLS}"] = f"null {column}"
            flags[f"null {column}"] = F.col(column).isNull()
        per_expectation.append(names)
    one = F.lit(1)
    row = (
        frame.select(*(flag.alias(name) for name, flag in flags.items()))
        .agg(
            F.count(one).alias("rows"),
            *(F.sum(F.when(F.col(f"`{name}`"), one).otherwise(0)).alias(name) for name in flags),
        )
        .first()
    )
    assert row is not None
    # a sum over no rows is null, as Great Expectations' Spark engine reports it
    values = {name: None if row[name] is None else int(row[name]) for name in ("rows", *flags)}
    results = []
    for e, names in zip(expectations, per_expectation, strict=True):
        runtime = {"result_format": dict(result_format)}
        deps = e.get_validation_dependencies(execution_engine=None, runtime_configuration=runtime)
        metrics: dict[Any, Any] = {}
        for metric, mc in deps.metric_configurations.items():
            if metric in names:
                metrics[mc.id] = values[names[metric]]
            elif metric.endswith(".unexpected_values"):
                metrics[mc.id] = []  # no samples in a pass that only counts
            else:
                return None
        results.append(e.metrics_validate(metrics, runtime_configuration=runtime))
    return results

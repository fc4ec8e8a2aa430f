"""The benchmarks' DuckDB reference (``bench/duckdb_reference.py``, written in SQL from the
formulas of docs/rates.md and the Feeding Frenzy rules) against the Spark stages, on five
days with churn."""

from __future__ import annotations

import pandas as pd

from support.workloads import days


def test_the_duckdb_reference_gives_the_same_rates_plan_and_feeds_every_day(built, tmp_path):
    """bench/'s DuckDB reference (the baseline of the benchmarks, written in SQL from the
    formulas of docs/rates.md and the Feeding Frenzy rules) against the Spark stages, day by
    day: rates equal to 1e-9, the same FF-PerPair plan, consumer sources and cost row
    (costs, edge counts, mode changes, latency percentiles), and the same producer and
    consumer feeds (the reference recomputes feeds from all events; the stages build them
    incrementally)."""
    from bench import duckdb_reference as ref

    for ds in days():
        for stage in ("rates", "plan", "materialize"):
            ref.run(stage, built, tmp_path, ds)
        diff = ref.compare(built.warehouse, tmp_path, ds)
        assert not ref.agrees(diff), (ds, ref.agrees(diff))
        assert diff["consumer_feed"]["rows"][0] > 0
    modes = pd.read_parquet(tmp_path / "edge_plan" / f"ds={ds}")["mode"].value_counts()
    assert modes.get("push", 0) > 0 and modes.get("pull", 0) > 0, modes

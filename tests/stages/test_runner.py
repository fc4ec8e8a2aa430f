"""The stage runner: a rerun of a day gives the same rows; starting a stage withdraws what
depended on its old outputs."""

from __future__ import annotations

import dataclasses

import pytest

from jobs.common import ledger
from jobs.common.storage import Storage
from jobs.stages import runner
from jobs.stages.publish import PublishRefused
from support.workloads import LAST, build, table_rows

TABLES = [
    ("clean", "follows"),
    ("clean", "events"),
    ("rates", "producer_rates"),
    ("rates", "consumer_rates"),
    ("plan", "edge_plan"),
    ("plan", "plan_cost"),
    ("plan", "consumer_sources"),
    ("plan", "views"),
    ("plan", "view_members"),
    ("feeds", "producer_feed"),
    ("feeds", "consumer_feed"),
    ("feeds", "view_feed"),
]


def test_rerun_of_a_day_gives_the_same_rows(spark, built_copy):
    """Rates, plan and materialize run twice (ingest's rerun: tests/stages/test_ingest.py),
    served by auto among FF-PerPair and the shared views (the default served strategy)."""
    s = dataclasses.replace(
        built_copy, strategy="auto", strategies=("ff-per-pair", "cz-hierarchy2")
    )
    stages = ("rates", "plan", "materialize")
    build(spark, s, [LAST], stages)
    first = {t: table_rows(spark, s, *t, LAST) for t in TABLES}
    assert first[("plan", "view_members")], "the shared views were not served"
    build(spark, s, [LAST], stages)
    for t in TABLES:
        assert table_rows(spark, s, *t, LAST) == first[t], f"{t} changed on rerun"
    served = [r for r in first[("plan", "plan_cost")] if r[1]]
    assert len(served) == 1


def test_a_rerun_stage_withdraws_the_later_records_and_the_days_publication(spark, built_copy):
    s, wh = built_copy, Storage.at(built_copy.warehouse)
    for stage in ("validate", "publish"):
        runner.run_stage(stage, s, LAST, spark)
    assert ledger.is_published(wh, LAST) and ledger.latest(wh) == LAST
    runner.run_stage("plan", s, LAST, spark)
    assert not ledger.is_published(wh, LAST)
    assert set(ledger.read_records(wh, LAST)) == {"ingest", "rates", "plan"}
    assert not wh.exists(*ledger.results_parts(LAST))  # the validation results went too
    with pytest.raises(PublishRefused, match="has not been validated"):
        runner.run_stage("publish", s, LAST, spark)

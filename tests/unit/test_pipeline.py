"""The stage registry (``jobs.common.pipeline``): one declaration per stage that the runner,
the command line, the DAG and the docs read, and whose tables exist as contracts."""

from __future__ import annotations

import argparse

import pytest

from jobs import cli
from jobs.common import versions
from jobs.common.pipeline import (
    DAY_STAGES,
    REGISTRY,
    SPARK_STAGES,
    STAGES,
    TASK_IDS,
    lineage,
    stage,
    stages_from,
)
from jobs.common.tables import PUBLISHED_TABLES, contract_of


def test_each_stage_declared_once_with_tables_that_have_contracts():
    assert STAGES == ("ingest", "rates", "plan", "materialize", "validate", "publish", "store")
    assert DAY_STAGES == STAGES[:-1] and SPARK_STAGES == DAY_STAGES[:-1]
    assert [s.name for s in REGISTRY if s.needs] == ["store"]  # only with a store configured
    assert len(set(TASK_IDS.values())) == len(STAGES)
    for s in REGISTRY:
        for key in (*s.reads, *s.earlier, *s.writes):
            assert contract_of(key).layer == key.split("/")[0], (s.name, key)
        assert callable(s.entry()), s.name
    # one stage writes each layer: its record names the layer's working version
    writers: dict[str, set[str]] = {}
    for table, line in lineage().items():
        writers.setdefault(table.split("/")[0], set()).add(line.writer)
    assert writers == {
        "landing": {"landing"},
        "clean": {"ingest"},
        "quarantine": {"ingest"},
        "rates": {"rates"},
        "plan": {"plan"},
        "feeds": {"materialize"},
    }
    assert versions.OWNER == {"clean": "ingest", "quarantine": "ingest", "rates": "rates"} | {
        "plan": "plan",
        "feeds": "materialize",
    }
    # of its own day, a stage reads only what a stage before it wrote (or the landing)
    for table, line in lineage().items():
        for reader in line.readers:
            assert line.writer == "landing" or STAGES.index(line.writer) < STAGES.index(reader)
        assert line.writer != "landing" or not line.later, table
    # what publish reads is what a published day holds
    published = {f"{ly}/{t}" for ly, t in PUBLISHED_TABLES}
    quarantine = {f"quarantine/{t}" for t in ("follows", "events", "views", "topics")}
    assert sorted(stage("publish").reads) == sorted(published | quarantine)
    assert stage("ingest").landing == ("follows", "events", "views", "topics")


def test_unknown_stage_and_the_order_of_what_a_rerun_makes_stale():
    with pytest.raises(ValueError, match="unknown stage 'nope'; stages: ingest, rates"):
        stage("nope")
    assert stages_from("materialize") == ("materialize", "validate", "publish", "store")


def test_the_command_line_offers_each_stage_its_options():
    parser = cli.build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert verbs.choices["store"].description.startswith("Load published days")
    for s in REGISTRY:
        if s.command:  # feedpipe store load
            assert s.command[0] in verbs.choices
            continue
        sub = verbs.choices[s.name]
        flags = {o for a in sub._actions for o in a.option_strings}
        assert ("--full-refresh" in flags) == ("full_refresh" in s.options), s.name
        assert sub.description == s.description[0].upper() + s.description[1:]


def test_a_day_runs_the_store_stage_only_with_a_store_configured():
    from jobs.common.config import Settings
    from jobs.stages.runner import chosen_stages

    names = [s.name for s in chosen_stages(Settings())]
    assert names == ["ingest", "rates", "plan", "materialize", "validate", "publish"]
    served = Settings(store="redis://127.0.0.1:6379/0")
    assert [s.name for s in chosen_stages(served)] == [*names, "store"]
    # named, it runs either way (and refuses in one line without a store)
    assert [s.name for s in chosen_stages(Settings(), ("publish", "store"))] == ["publish", "store"]

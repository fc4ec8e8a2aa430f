"""Stage ``rates`` over several days of a generated workload: a flash producer is flagged the
same day (Feeding Frenzy 5.5) and its pushed edges move to pull in that day's plan."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from jobs.common.config import Settings
from jobs.common.ledger import read_record
from jobs.common.storage import Storage
from jobs.common.tables import contract, read_partition
from jobs.stages import runner
from jobs.workloads.generate import PROFILES, flash_producer_ids, generate, scaled

START = dt.date(2026, 2, 1)


@pytest.fixture(scope="module")
def flash_run(spark, tmp_path_factory):
    profile = dataclasses.replace(
        scaled(PROFILES["ff2010"], 0.004), flash_producers=2, flash_day=2, flash_factor=30.0
    )
    root = tmp_path_factory.mktemp("flash")
    generate(Storage.at(str(root / "landing")), START, 3, profile, seed=5)
    s = Settings(
        landing=str(root / "landing"),
        warehouse=str(root / "wh"),
        strategy="ff-per-pair",
        strategies=("ff-per-pair",),  # the plan only has to move the flash producers' edges
        shuffle_partitions=4,
    )
    for i in range(3):
        for stage in ("ingest", "rates", "plan"):
            runner.run_stage(stage, s, START + dt.timedelta(days=i), spark)
    return s, flash_producer_ids(profile, 5)


def test_flash_producers_are_flagged_on_the_day_and_only_then(spark, flash_run):
    s, flashing = flash_run
    wh = Storage.at(s.warehouse)
    pr = contract("rates", "producer_rates")
    for i in range(3):
        flagged = {
            r.producer_id
            for r in read_partition(spark, wh, pr, START + dt.timedelta(days=i))
            .where("flash")
            .collect()
        }
        assert flagged == (set(flashing) if i == 2 else set()), i
    record = read_record(wh, START + dt.timedelta(days=2), "rates")
    assert record["flash_producers"] == 2 and set(record["flash_listed"]) == set(flashing)


def test_pushed_edges_of_a_flash_producer_move_to_pull_the_same_day(spark, flash_run):
    s, flashing = flash_run
    wh = Storage.at(s.warehouse)
    ep = contract("plan", "edge_plan")

    def modes(day):
        rows = read_partition(spark, wh, ep, START + dt.timedelta(days=day)).collect()
        return [r.mode for r in rows if r.producer_id in flashing]

    before, during = modes(1), modes(2)
    assert "push" in before  # the flash producers had pushed edges the day before
    assert during and set(during) == {"pull"}
    cost = read_partition(spark, wh, contract("plan", "plan_cost"), START + dt.timedelta(days=2))
    served = cost.where("chosen").collect()[0]
    assert served.mode_changes >= before.count("push")

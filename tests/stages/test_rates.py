"""Stage ``rates`` over the five churn days: the two flash producers are flagged on the day of
their flash and on no other (Feeding Frenzy 5.5), and their pushed edges move to pull in that
day's plan."""

from __future__ import annotations

import datetime as dt

from jobs.common.ledger import read_record
from jobs.common.storage import Storage
from jobs.common.tables import contract, read_partition
from support.workloads import FLASH_DAY, days, edge_modes, flashing


def table(spark, settings, layer: str, name: str, ds: dt.date):
    return read_partition(spark, Storage.at(settings.warehouse), contract(layer, name), ds)


def test_flash_producers_are_flagged_on_the_day_and_only_then(spark, built):
    flash = flashing()
    assert len(flash) == 2
    for ds in days():
        rates = table(spark, built, "rates", "producer_rates", ds)
        flagged = {r.producer_id for r in rates.where("flash").collect()}
        assert flagged == (flash if ds == FLASH_DAY else set()), ds
    record = read_record(Storage.at(built.warehouse), FLASH_DAY, "rates")
    assert record.flash_producers == 2 and set(record.flash_listed) == flash


def test_pushed_edges_of_a_flash_producer_move_to_pull_the_same_day(spark, built):
    flash = flashing()

    def modes(ds: dt.date) -> list[str]:
        return [m for (_, p), m in edge_modes(spark, built, ds).items() if p in flash]

    before, during = modes(FLASH_DAY - dt.timedelta(days=1)), modes(FLASH_DAY)
    assert "push" in before  # the flash producers had pushed edges the day before
    assert during and set(during) == {"pull"}
    cost = table(spark, built, "plan", "plan_cost", FLASH_DAY)
    (served,) = cost.where("chosen").collect()
    assert served.mode_changes >= before.count("push")

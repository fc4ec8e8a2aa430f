"""kill -9 of ``feedpipe store load`` (the Python driver and its JVM, one process group) at
several moments while readers poll the store (docs/serving.md, "Loading a day"):

* Spark starting, before the new generation is begun;
* the new generation's first keys written;
* about half of them written;
* right after the switch (the catch-up, the live log and the removal of old generations
  still to do).

Day PREV is served; each killed process loads LAST. Every polled read returns one day whole,
PREV's feeds or LAST's (the Parquet reader's, read independently), never a mix: PREV's until
the switch, LAST's from then on, never back. After a kill before the switch the store still
serves PREV; the completed load at the end serves LAST and removes every killed generation.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jobs.common import store
from jobs.dev import store_server
from jobs.serving.reader import FeedReader
from jobs.serving.store_reader import StoreReader
from jobs.stages import runner
from support.polling import StorePoller, phases
from support.workloads import LAST, K, published_consumers

PREV = LAST - dt.timedelta(days=1)


def toml(settings, url: str) -> str:
    return (
        f'landing = "{settings.landing}"\nwarehouse = "{settings.warehouse}"\n'
        f'store = "{url}"\nstore_grace_seconds = 3600\n'
        f"shuffle_partitions = {settings.shuffle_partitions}\n"
    )


Reached = Callable[[store.ServedDay, int, str], bool]
"""When to kill: given the day served before, the store's key count then, and the log."""


def moments(client) -> dict[str, Reached]:
    def loading() -> list[store.ServedDay]:
        days = [store.ServedDay.from_json(v) for v in client.hvals(store.GENERATIONS)]
        return [d for d in days if not d.since]

    def written(share: float) -> Reached:
        def reached(before: store.ServedDay, keys: int, _: str) -> bool:
            return bool(loading()) and client.dbsize() - keys >= max(1, share * keys)

        return reached

    def switched(before: store.ServedDay, _: int, __: str) -> bool:
        now = store.served(client)
        return now is not None and now.generation != before.generation

    return {
        "spark starting": lambda _, __, log: "spark session" in log and not loading(),
        "first keys written": written(0.0),
        "half written": written(0.4),
        "switched": switched,
    }


def load_until(
    config: Path, client, moment: str, log: Path
) -> tuple[subprocess.Popen[bytes], Path, float]:
    """``feedpipe store load --ds LAST`` in a process group of its own, until ``moment`` is
    reached: the process, its log (stderr) and when it started."""
    reached = moments(client)[moment]
    before = store.served(client)
    assert before is not None
    keys = client.dbsize()
    attempt = log.with_name(f"load-{moment.replace(' ', '-')}.log")
    cmd = [sys.executable, "-m", "jobs", "store", "load", "--ds", str(LAST)]
    started = time.monotonic()
    proc = subprocess.Popen(
        [*cmd, "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=attempt.open("w"),
        start_new_session=True,
    )
    while not reached(before, keys, attempt.read_text(errors="replace")):
        if proc.poll() is not None:
            pytest.fail(f"the load ended ({proc.returncode}) before '{moment}': {attempt}")
        assert time.monotonic() - started < 300, f"'{moment}' not reached in 300 s"
        time.sleep(0.005)
    return proc, attempt, started


def kill_at(config: Path, client, moment: str, log: Path) -> float:
    """The load killed (SIGKILL to its group) once ``moment`` is reached; returns the
    seconds it ran."""
    proc, _, started = load_until(config, client, moment, log)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return time.monotonic() - started


def feed_ids(warehouse: str, ds: dt.date, consumers: list[str]) -> dict[str, list[str]]:
    got = FeedReader(warehouse, ds).feeds(consumers, K)
    return {c: [i.event_id for i in f] for c, f in got.items()}


@pytest.fixture()
def published(spark, built_copy):
    """The shared build with PREV and LAST validated and published; a sample of LAST's
    consumers and their feeds of each day, from the Parquet reader."""
    for ds in (PREV, LAST):
        for stage in ("validate", "publish"):
            runner.run_stage(stage, built_copy, ds, spark)
    sample = published_consumers(built_copy.warehouse, LAST)[::5]
    expected = {
        "prev": feed_ids(built_copy.warehouse, PREV, sample),
        "last": feed_ids(built_copy.warehouse, LAST, sample),
    }
    assert expected["prev"] != expected["last"]
    return built_copy, sample, expected


def test_kill_9_of_a_load_never_shows_a_half_loaded_or_mixed_day(
    spark, published, redis_server, tmp_path
):
    client = store.connect(redis_server.url)
    client.flushdb()
    built, sample, expected = published
    s = dataclasses.replace(built, store=redis_server.url, store_grace_seconds=3600)
    runner.run_stage("store", s, PREV, spark)
    config = tmp_path / "feedpipe.toml"
    config.write_text(toml(s, redis_server.url))
    poller = StorePoller(redis_server.url, expected, K, interval=0.05)
    poller.start()
    assert poller.sync().answer == "prev"

    took = {}
    for moment in ("spark starting", "first keys written", "half written"):
        took[moment] = kill_at(config, client, moment, tmp_path / "attempt.log")
        assert store.served(client).ds == str(PREV), moment  # nothing switched
        assert poller.sync().answer == "prev", moment
    states = [g["state"] for g in store.status(client)["generations"]]
    assert states.count("loading or killed") == 2  # the Spark-start kill began none

    took["switched"] = kill_at(config, client, "switched", tmp_path / "attempt.log")
    assert store.served(client).ds == str(LAST)
    assert poller.sync().answer == "last"
    reads = poller.finish()
    assert phases(r.answer for r in reads) == ["prev", "last"], [r.answer for r in reads]

    # a load run to the end, with no grace period: it serves LAST, every other generation gone
    done = runner.run_stage("store", dataclasses.replace(s, store_grace_seconds=0), LAST, spark)
    status = store.status(client)
    assert [g["generation"] for g in status["generations"]] == [done.generation]
    assert len(done.retired) == 4  # PREV's, two killed before the switch, one after it
    got = StoreReader(redis_server.url).feeds(sample, K)
    assert {c: [i.event_id for i in f] for c, f in got.items()} == expected["last"]
    print(f"seconds to each kill: {took}")


def test_a_store_lost_mid_load_fails_in_one_line_and_serves_the_day_before_when_back(
    spark, published, tmp_path
):
    """The store itself stops (a persistent server, its data saved) while the load writes:
    the load fails with one line naming the store, no traceback; started again, the store
    serves PREV whole, the half-written generation listed as killed; the next load serves
    LAST and removes it."""
    built, sample, expected = published
    folder = tmp_path / "store"
    server = store_server.start(folder, persist=True)
    try:
        s = dataclasses.replace(built, store=server.url, store_grace_seconds=0)
        runner.run_stage("store", s, PREV, spark)
        config = tmp_path / "feedpipe.toml"
        config.write_text(toml(s, server.url))
        client = store.connect(server.url)
        proc, log, _ = load_until(config, client, "first keys written", tmp_path / "lost.log")
        store_server.stop(server)
        assert proc.wait(120) == 1
        err = log.read_text()
        assert "Traceback" not in err, err[-3000:]
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"feedpipe: error: the load of {LAST} ") and "feed store" in last, (
            last
        )
        assert "127.0.0.1" in last and "still serves the day it served before" in last, last

        server = store_server.start(folder, port=server.port, persist=True)
        client = store.connect(server.url)
        assert store.served(client).ds == str(PREV)
        states = [g["state"] for g in store.status(client)["generations"]]
        assert sorted(states) == ["loading or killed", "served"]
        got = StoreReader(server.url).feeds(sample, K)
        assert {c: [i.event_id for i in f] for c, f in got.items()} == expected["prev"]
        done = runner.run_stage("store", s, LAST, spark)
        assert len(done.retired) == 2  # PREV's and the half-written one
        got = StoreReader(server.url).feeds(sample, K)
        assert {c: [i.event_id for i in f] for c, f in got.items()} == expected["last"]
    finally:
        store_server.stop(server)

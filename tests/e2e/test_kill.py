"""kill -9 of a feedpipe process (the Python driver and its JVM, one process group) at
several moments, first of a new day, then of a published day being reprocessed with corrected
inputs, while readers poll: no read ever returns a wrong, missing or mixed feed, no killed
attempt's outputs are ever published, and the day ends equal to an uninterrupted run's.

Each killed process is ``feedpipe run --stages S,...`` from the stage whose moment is under
test (what the killed attempt finished before it is what an attempt of the whole day would
have finished too); after each kill the day is rerun from there, in this process's Spark
session, up to the next moment.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from jobs.common import ledger, versions
from jobs.common.pipeline import STAGES
from jobs.common.storage import Storage
from jobs.common.tables import PUBLISHED_TABLES
from jobs.serving.reader import FeedError, FeedReader
from jobs.stages import runner
from jobs.stages.publish import PublishRefused
from support import naive
from support.paths import version
from support.polling import Poller
from support.same_day import rows
from support.workloads import LAST, START, K

PREV = LAST - dt.timedelta(days=1)


def toml(settings) -> str:
    """The settings the shared build was made with, as a feedpipe.toml."""
    out = []
    for name in (
        "landing",
        "warehouse",
        "feed_k",
        "feed_k_per_producer",
        "diversity_hours",
        "strategy",
        "shuffle_partitions",
    ):
        value = getattr(settings, name)
        out.append(f"{name} = {value!r}" if not isinstance(value, str) else f'{name} = "{value}"')
    out.append("strategies = [" + ", ".join(f'"{x}"' for x in settings.strategies) + "]")
    return "\n".join(out) + "\n"


def newer(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except FileNotFoundError:
        return False


Moment = Callable[[set[Path], float, Path], bool]


def moments(wh: Path, ds: dt.date) -> dict[str, tuple[str, Moment]]:
    """Each moment: the first stage the killed process runs, and when to kill it, given the
    day's run folders and the time before the process started and its log: ingest writing
    its clean tables, plan running (rates has recorded), materialize writing the feeds,
    plan and validate running (the process's Spark session has started), publish starting
    (the validation results are written)."""
    results = wh / "quality" / f"ds={ds}" / "results.json"

    def writing(layer: str) -> Moment:
        return lambda before, _, __: bool(set(wh.glob(f"{layer}/*/ds={ds}/run=*")) - before)

    def recorded(path: Path) -> Moment:
        return lambda _, since, __: newer(path, since)

    def started(_: set[Path], since: float, log: Path) -> bool:
        return "spark session" in log.read_text() and time.time() > since + 1

    return {
        "ingest writing": ("ingest", writing("clean")),
        "plan running": ("plan", started),
        "materialize writing": ("materialize", writing("feeds")),
        "validate running": ("validate", started),
        "publish starting": ("validate", recorded(results)),
    }


def kill_at(config: Path, wh: Path, ds: dt.date, moment: str, log: Path) -> float:
    """Run the day from the moment's stage in a process group of its own and kill the group
    once ``moment`` is reached; returns the seconds it ran."""
    first, reached = moments(wh, ds)[moment]
    stages = ",".join(STAGES[STAGES.index(first) :])
    before = set(wh.glob(f"*/*/ds={ds}/run=*"))
    attempt = log.with_name(f"{log.stem}-{ds}-{moment.replace(' ', '-')}.log")
    cmd = [sys.executable, "-m", "jobs", "run", "--ds", str(ds), "--stages", stages]
    since = time.time() - 0.01
    started = time.monotonic()
    proc = subprocess.Popen(
        [*cmd, "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=attempt.open("w"),
        start_new_session=True,
    )
    while not reached(before, since, attempt):
        if proc.poll() is not None:
            pytest.fail(f"the run of {ds} ended ({proc.returncode}) before '{moment}': {attempt}")
        assert time.monotonic() - started < 600, f"'{moment}' not reached in 600 s"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return time.monotonic() - started


def rerun(spark, settings, ds: dt.date, *stages: str) -> None:
    """The day's stages run again after a kill, in this process's Spark session."""
    for stage in stages:
        runner.run_stage(stage, settings, ds, spark)


def correct(landing: Path, ds: dt.date) -> None:
    """Upstream re-delivers day ``ds`` with 400 more events (late in the day, so they reach
    the feeds) and 100 more follows of existing producers."""
    events = naive.events(landing, ds, START)
    producers = sorted(events.producer_id.unique())[:100]
    consumers = sorted({c for c, _ in naive.graph(landing, ds, START)})
    at = pd.Timestamp(ds, tz="UTC") + pd.Timedelta(hours=23)
    pd.DataFrame(
        {
            "event_id": [f"late-{i:03d}" for i in range(400)],
            "producer_id": [producers[i % len(producers)] for i in range(400)],
            "created_at": [(at + pd.Timedelta(seconds=i)).isoformat() for i in range(400)],
        }
    ).to_csv(landing / "events" / f"ds={ds}" / "late.csv", index=False)
    pd.DataFrame(
        {
            "consumer_id": consumers[:100],
            "producer_id": [producers[(i * 7) % len(producers)] for i in range(100)],
            "ts": [(at + pd.Timedelta(minutes=30)).isoformat()] * 100,
            "op": ["follow"] * 100,
        }
    ).to_csv(landing / "follows" / f"ds={ds}" / "late.csv", index=False)


def test_kill_9_of_a_new_day_and_of_a_reprocess_never_shows_a_partial_or_mixed_day(
    spark, built_copy, churn_landing, tmp_path
):
    landing = tmp_path / "landing"
    shutil.copytree(churn_landing, landing)
    s = dataclasses.replace(built_copy, landing=str(landing))
    wh, store = Path(s.warehouse), Storage.at(s.warehouse)
    config = tmp_path / "feedpipe.toml"
    config.write_text(toml(s))
    log = tmp_path / "attempt.log"
    # the uninterrupted run of LAST: the shared build's, with the same settings
    reference = {
        f"{ly}/{t}": rows(s.warehouse, ly, t, LAST, published=False) for ly, t in PUBLISHED_TABLES
    }
    rerun(spark, s, PREV, "validate", "publish")
    consumers = sorted(naive.feeds(landing, LAST, START, K))
    sample = consumers[::4]
    prev_feeds = naive.feeds(landing, PREV, START, K, set(sample))

    # 1. a new day, killed at every moment, each followed by a rerun up to the next; the
    # previous day is polled meanwhile
    poll_prev = Poller(s.warehouse, PREV, {"published": prev_feeds}, K)
    poll_prev.start()
    took = {}
    # (killed in publish, a new day may be published: that moment is the reprocess's)
    for moment, then in (
        ("ingest writing", ("ingest", "rates", "plan")),
        ("materialize writing", ("materialize",)),
        ("validate running", ("validate", "publish")),
    ):
        took[moment] = kill_at(config, wh, LAST, moment, log)
        with pytest.raises(FeedError, match="has not been published"):
            FeedReader(s.warehouse, LAST)
        with pytest.raises(PublishRefused):  # no attempt's outputs are ever published
            runner.run_stage("publish", s, LAST)
        assert ledger.latest(store) == PREV
        rerun(spark, s, LAST, *then)
    seen = poll_prev.finish()
    assert set(seen) == {"published"} and len(seen) > 50, set(seen)
    got = {k: rows(s.warehouse, *k.split("/"), LAST) for k in reference}
    assert [k for k in reference if got[k] != reference[k]] == []
    old_feeds = naive.feeds(landing, LAST, START, K, set(sample))
    assert FeedReader(s.warehouse, LAST).feeds(sample, K) and ledger.latest(store) == LAST
    old_version = versions.published(store, LAST)

    # 2. upstream re-delivers LAST corrected; the published day is reprocessed, killed at
    # every moment, while both days are polled
    correct(landing, LAST)
    new_feeds = naive.feeds(landing, LAST, START, K, set(sample))
    differ = sum(new_feeds[c] != old_feeds[c] for c in sample)
    assert differ > len(sample) // 4, differ
    poll_prev = Poller(s.warehouse, PREV, {"published": prev_feeds}, K)
    poll_last = Poller(s.warehouse, LAST, {"old": old_feeds, "new": new_feeds}, K)
    poll_prev.start()
    poll_last.start()
    rerun(spark, s, LAST, "ingest", "rates")
    for moment, then in (
        ("plan running", ("plan",)),
        ("materialize writing", ("materialize",)),
        ("publish starting", ("validate", "publish")),
    ):
        took[f"reprocess, {moment}"] = kill_at(config, wh, LAST, moment, log)
        published = versions.published(store, LAST)
        assert published is not None and published.folders.keys() == old_version.folders.keys()
        assert ledger.latest(store) == LAST
        rerun(spark, s, LAST, *then)
    time.sleep(2)  # the pollers read the new version a few times
    seen_last = poll_last.finish()
    assert set(poll_prev.finish()) == {"published"}
    assert set(seen_last) <= {"old", "new"}, sorted(set(seen_last))
    first_new = seen_last.index("new") if "new" in seen_last else len(seen_last)
    assert "old" not in seen_last[first_new:], "a read went back to the old version"
    assert len(seen_last) > 50
    got = FeedReader(s.warehouse, LAST).feeds(consumers, K)
    assert {c: [i.event_id for i in f] for c, f in got.items()} == naive.feeds(
        landing, LAST, START, K
    )
    # only the published version and the one it replaced are left of the day
    left = {
        (p.parent.parent.parent.name, p.parent.parent.name, p.name)
        for p in wh.glob(f"*/*/ds={LAST}/run=*")
    }
    assert len(left) <= 2 * len(versions.published(store, LAST).folders)
    # a past day published again leaves `latest` where it is
    runner.run_stage("publish", s, PREV)
    assert ledger.latest(store) == LAST
    print("kill moments, seconds run before the kill:", {k: round(v, 1) for k, v in took.items()})
    print(
        "reads of the reprocessed day:", dict(Counter(seen_last)), "of the day before:", len(seen)
    )
    assert version(s.warehouse, "feeds", "consumer_feed", LAST, published=True).exists()

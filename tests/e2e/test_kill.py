"""kill -9 of a feedpipe process (the Python driver and its JVM, one process group) at
several moments, first of a new day, then of a published day being reprocessed with corrected
inputs, while readers poll (docs/storage.md, "Versions of a day"):

* a new day killed: nothing of it is visible (readers refuse it, no manifest, ``latest``
  unchanged) and no killed attempt's outputs can be published;
* a published day killed while reprocessed: its manifest names exactly the run folders it
  named before, and readers get exactly the feeds they got before the reprocess started,
  beside the rebuild's output; once the reprocess is published they get the new version,
  the naive feeds of the corrected landing;
* every polled read returned one version whole: the old one, then from some read on the new
  one, never back.

Each killed process is ``feedpipe run --stages S,...`` from the stage whose moment is under
test (what the killed attempt finished before it is what an attempt of the whole day would
have finished too); after each kill the day is rerun from there, in this process's Spark
session, up to the next moment.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from jobs.common import versions
from jobs.common.pipeline import STAGES
from jobs.common.storage import Storage
from jobs.common.tables import PUBLISHED_TABLES
from jobs.serving.reader import FeedError, FeedReader
from jobs.stages import runner
from jobs.stages.publish import PublishRefused
from support import naive
from support.polling import Poller, phases
from support.redelivery import redeliver
from support.same_day import rows
from support.workloads import LAST, START, K, assembled

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


def manifest_versions(wh: Path, ds: dt.date) -> dict[str, str]:
    """The run folder of each table the day's published manifest names (``versions``), read
    from the file itself."""
    return dict(
        json.loads((wh / "manifests" / f"ds={ds}" / "manifest.json").read_text())["versions"]
    )


def day_runs(wh: Path, ds: dt.date) -> set[tuple[str, str]]:
    """(``layer/table``, ``run=...``) of every run folder of the day on disk."""
    return {
        (f"{p.parent.parent.parent.name}/{p.parent.parent.name}", p.name)
        for p in wh.glob(f"*/*/ds={ds}/run=*")
    }


def frozen(folders: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """A version's folders as a :class:`support.polling.Read` records them."""
    return tuple(sorted(folders.items()))


def test_kill_9_of_a_new_day_and_of_a_reprocess_never_shows_a_partial_or_mixed_day(
    spark, built_copy, churn_landing, tmp_path
):
    landing = tmp_path / "landing"
    shutil.copytree(churn_landing, landing)
    s = dataclasses.replace(built_copy, landing=str(landing))
    wh, store = Path(s.warehouse), Storage.at(s.warehouse)
    latest = wh / "manifests" / "latest"
    config = tmp_path / "feedpipe.toml"
    config.write_text(toml(s))
    log = tmp_path / "attempt.log"
    # the uninterrupted run of LAST: the shared build's, with the same settings
    reference = {
        f"{ly}/{t}": rows(s.warehouse, ly, t, LAST, published=False) for ly, t in PUBLISHED_TABLES
    }
    rerun(spark, s, PREV, "validate", "publish")
    prev_version = frozen(manifest_versions(wh, PREV))
    old_all = naive.feeds(landing, LAST, START, K)
    consumers = sorted(old_all)
    sample = consumers[::4]
    prev_feeds = naive.feeds(landing, PREV, START, K, set(sample))

    # 1. a new day, killed at every moment, each followed by a rerun up to the next; the
    # previous day is polled meanwhile
    poll_prev = Poller(s.warehouse, PREV, {"published": prev_feeds}, K)
    poll_prev.start()
    assert poll_prev.sync().answer == "published"
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
        assert not (wh / "manifests" / f"ds={LAST}" / "manifest.json").exists()
        with pytest.raises(PublishRefused):  # no attempt's outputs are ever published
            runner.run_stage("publish", s, LAST)
        assert latest.read_text() == str(PREV)
        assert poll_prev.sync().answer == "published", moment
        rerun(spark, s, LAST, *then)
    got = {k: rows(s.warehouse, *k.split("/"), LAST) for k in reference}
    assert [k for k in reference if got[k] != reference[k]] == []
    assert latest.read_text() == str(LAST)
    old_version = manifest_versions(wh, LAST)
    before = assembled(s.warehouse, LAST, consumers, published=True)
    assert before == old_all

    # 2. upstream re-delivers LAST corrected; the published day is reprocessed, killed at
    # every moment, while both days are polled: at each kill the manifest still names the
    # old run folders, and readers get the feeds they got before the reprocess started
    redeliver(landing, LAST, START)
    new_all = naive.feeds(landing, LAST, START, K)
    assert new_all.keys() == old_all.keys()
    differ = sum(new_all[c] != old_all[c] for c in sample)
    assert differ > len(sample) // 4, differ
    expected = {n: {c: f[c] for c in sample} for n, f in (("old", old_all), ("new", new_all))}
    poll_last = Poller(s.warehouse, LAST, expected, K)
    poll_last.start()
    assert poll_last.sync().answer == "old"
    rerun(spark, s, LAST, "ingest", "rates")
    switched = False
    for moment, then in (
        ("plan running", ("plan",)),
        ("materialize writing", ("materialize",)),
        ("publish starting", ("validate", "publish")),
    ):
        took[f"reprocess, {moment}"] = kill_at(config, wh, LAST, moment, log)
        published = manifest_versions(wh, LAST)
        assert day_runs(wh, LAST) - set(published.items()), moment  # the rebuild's output
        assert FeedReader(s.warehouse, LAST).version.folders == published
        if moment == "publish starting" and published != old_version:
            # killed after publish replaced the manifest: the new version, whole
            assert published == versions.working(store, LAST).folders, moment
            switched = True
            assert assembled(s.warehouse, LAST, consumers, published=True) == new_all
        else:
            assert published == old_version, moment
            assert assembled(s.warehouse, LAST, consumers, published=True) == before, moment
        if moment != "publish starting":
            with pytest.raises(PublishRefused):
                runner.run_stage("publish", s, LAST)
        assert latest.read_text() == str(LAST)
        rerun(spark, s, LAST, *then)
    assert poll_last.sync().answer == "new"
    assert poll_prev.sync().answer == "published"
    reads_last, reads_prev = poll_last.finish(), poll_prev.finish()

    # the new version: every table of the day rebuilt, what the reader resolves, the naive
    # feeds of the corrected landing
    new_version = manifest_versions(wh, LAST)
    assert new_version.keys() == old_version.keys()
    assert not set(new_version.items()) & set(old_version.items())
    assert FeedReader(s.warehouse, LAST).version.folders == new_version
    after = assembled(s.warehouse, LAST, consumers, published=True)
    assert after == new_all != before
    # every read returned one version whole, the old one, then from some read on the new one
    assert phases((r.answer, r.folders) for r in reads_prev) == [("published", prev_version)]
    assert phases((r.answer, r.folders) for r in reads_last) == [
        ("old", frozen(old_version)),
        ("new", frozen(new_version)),
    ], Counter(r.answer for r in reads_last)
    # only the published version and the one it replaced are left of the day
    replaced = {} if switched else old_version
    assert day_runs(wh, LAST) == set(new_version.items()) | set(replaced.items())
    # a past day published again leaves `latest` where it is
    runner.run_stage("publish", s, PREV)
    assert latest.read_text() == str(LAST)
    print("kill moments, seconds run before the kill:", {k: round(v, 1) for k, v in took.items()})
    print(
        "reads of the reprocessed day:",
        dict(Counter(r.answer for r in reads_last)),
        "of the day before:",
        len(reads_prev),
    )

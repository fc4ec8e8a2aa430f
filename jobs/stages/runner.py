"""Running stages: one day, all stages of a day, or a range of days.

``ingest`` first checks that the day's landing has arrived (``jobs.common.readiness``) and
refuses the day, changing nothing, when it has not. Each stage's result is recorded in the
day's ledger (``jobs.common.ledger``: ``manifests/ds=D/stages/<stage>.json``), with the run
folders it wrote (``jobs.common.versions``). Starting a stage first withdraws what depended on
the old version of its outputs (the records of the later stages and the validation results),
so a rerun of, say, ``plan`` cannot be published with feeds made from the previous plan; the
day's published version stays as it is until ``publish`` switches it. The warehouse is opened
once per run and handed to every stage.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import TYPE_CHECKING, Any

from jobs.common import ledger, readiness, versions
from jobs.common.config import Settings
from jobs.common.dates import days
from jobs.common.pipeline import STAGES, Stage, stage
from jobs.common.records import StageRecord
from jobs.common.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class UndeclaredTable(RuntimeError):
    """A stage read or wrote a table its declaration (:data:`REGISTRY`) does not name."""


def run_stage(
    name: str,
    settings: Settings,
    ds: dt.date,
    spark: SparkSession | None = None,
    full_refresh: bool = False,
    wh: Storage | None = None,
) -> StageRecord:
    """Run one stage for one day (building a Spark session if it needs one and none is given;
    opening the warehouse unless ``wh`` is it)."""
    from jobs.stages.validate import ValidationFailed

    step = stage(name)
    wh = wh or Storage.at(settings.warehouse)
    if step.landing:  # a day whose landing has not arrived changes nothing
        readiness.check(settings, ds, wh)
    ledger.withdraw(wh, ds, step.name)
    started = time.monotonic()
    options = {"full_refresh": full_refresh}
    args: tuple[Any, ...] = (settings, ds, wh)
    if step.spark:
        if spark is None:
            from jobs.common.spark import build_session

            spark = build_session(settings, f"feedpipe-{step.name}-{ds}")
        args = (spark, *args)
    with versions.stage_run(ds) as run:
        try:
            result = step.entry()(*args, **{o: options[o] for o in step.options})
        except ValidationFailed:
            _report(wh, ds)  # the failed day's report shows what failed
            raise
    undeclared(step, run)
    seconds = round(time.monotonic() - started, 2)
    done: dict[str, Any] = {
        "inputs": sorted(run.inputs),
        "earlier_inputs": sorted(run.earlier),
        "seconds": seconds,
    }
    if step.recorded:
        done.update(run=run.id, outputs=dict(sorted(run.outputs.items())))
    result = result.model_copy(update=done)
    if step.recorded:
        ledger.write_record(wh, ds, result)
    log.info("%s %s done in %.1fs", step.name, ds, seconds)
    if step.reports:
        _report(wh, ds)
    if step.name == "publish":
        from jobs.serving.catalog import write_duckdb

        written = write_duckdb(wh)
        if written:
            log.info("tables by name: %s", written)
    return result


def undeclared(step: Stage, run: versions.Run) -> None:
    """Refuse a run that read or wrote a table the stage does not declare: the registry is
    the lineage the docs show, and it stays true."""
    read = sorted(run.inputs - set(step.reads))
    earlier = sorted(run.earlier - set(step.earlier))
    wrote = sorted(set(run.outputs) - set(step.writes))
    if read or earlier or wrote:
        raise UndeclaredTable(
            f"stage {step.name} used tables it does not declare in jobs/common/pipeline.py: "
            f"read {read or 'none'}, of earlier days {earlier or 'none'}, wrote {wrote or 'none'}"
        )


def _report(wh: Storage, ds: dt.date) -> None:
    from jobs.serving.report import write_report

    written = write_report(wh, ds)
    if written:
        log.info("report %s: %s", ds, written)


def chosen_stages(settings: Settings, only: tuple[str, ...] | None = None) -> list[Stage]:
    """``only`` these stages, else every stage whose setting is set: a stage that needs one
    (``store``) runs only when it is set or ``only`` names it."""
    if only:
        return [stage(s) for s in only]
    return [s for s in map(stage, STAGES) if not s.needs or getattr(settings, s.needs)]


def run_day(
    settings: Settings,
    ds: dt.date,
    spark: SparkSession | None = None,
    full_refresh: bool = False,
    only: tuple[str, ...] | None = None,
    wh: Storage | None = None,
) -> dict[str, StageRecord]:
    """All stages (or ``only`` these) of one day in one Spark application."""
    chosen = chosen_stages(settings, only)
    wh = wh or Storage.at(settings.warehouse)
    if any(s.landing for s in chosen):  # refused before a Spark session is started for it
        readiness.check(settings, ds, wh)
    if spark is None and any(s.spark for s in chosen):
        from jobs.common.spark import build_session

        spark = build_session(settings, f"feedpipe-run-{ds}")
    return {s.name: run_stage(s.name, settings, ds, spark, full_refresh, wh) for s in chosen}


def backfill(
    settings: Settings,
    start: dt.date,
    end: dt.date,
    full_refresh: bool = False,
    only: tuple[str, ...] | None = None,
) -> dict[str, dict[str, StageRecord]]:
    """Days ``start``..``end`` in order (each day's feeds build on the previous day's)."""
    from jobs.common.spark import build_session

    spark = build_session(settings, f"feedpipe-backfill-{start}-{end}")
    wh = Storage.at(settings.warehouse)
    return {
        d.isoformat(): run_day(settings, d, spark, full_refresh, only, wh) for d in days(start, end)
    }

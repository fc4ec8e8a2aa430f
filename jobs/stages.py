"""Running stages: one day, all stages of a day, or a range of days.

Each stage's result is recorded in ``manifests/ds=D/stages/<stage>.json``. Starting a stage
first withdraws what depended on the old version of its outputs (the records of the later
stages, the validation results and the day's ``_SUCCESS``), so a rerun of, say, ``plan``
cannot be published with feeds made from the previous plan.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from jobs.common.config import Settings
from jobs.common.storage import Storage, ds_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

STAGES = ("ingest", "rates", "plan", "materialize", "validate", "publish")
SPARK_STAGES = STAGES[:-1]


def days(start: dt.date, end: dt.date) -> Iterator[dt.date]:
    if end < start:
        raise ValueError(f"end {end} is before start {start}")
    for i in range((end - start).days + 1):
        yield start + dt.timedelta(days=i)


def _withdraw(wh: Storage, ds: dt.date, stage: str) -> None:
    later = STAGES[STAGES.index(stage) :]
    for s in later:
        wh.delete("manifests", ds_dir(ds), "stages", f"{s}.json")
    if "validate" in later:
        wh.delete("quality", ds_dir(ds), "results.json")
    wh.delete("manifests", ds_dir(ds), "_SUCCESS")


def run_stage(
    stage: str,
    settings: Settings,
    ds: dt.date,
    spark: SparkSession | None = None,
    full_refresh: bool = False,
) -> dict[str, Any]:
    """Run one stage for one day (building a Spark session if it needs one and none is given)."""
    from jobs import ingest, materialize, plan, publish, rates, validate

    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    wh = Storage.at(settings.warehouse)
    _withdraw(wh, ds, stage)
    started = time.monotonic()
    if stage == "publish":
        result = publish.run(settings, ds)
    else:
        if spark is None:
            from jobs.common.spark import build_session

            spark = build_session(settings, f"feedpipe-{stage}-{ds}")
        if stage == "ingest":
            result = ingest.run(spark, settings, ds)
        elif stage == "rates":
            result = rates.run(spark, settings, ds)
        elif stage == "plan":
            result = plan.run(spark, settings, ds)
        elif stage == "materialize":
            result = materialize.run(spark, settings, ds, full_refresh=full_refresh)
        else:
            try:
                result = validate.run(spark, settings, ds)
            except validate.ValidationFailed:
                _report(wh, ds)  # the failed day's report shows what failed
                raise
    result = {**result, "seconds": round(time.monotonic() - started, 2)}
    if stage != "publish":
        wh.write_text(
            json.dumps(result, indent=2, default=str),
            "manifests",
            ds_dir(ds),
            "stages",
            f"{stage}.json",
        )
    log.info("%s %s done in %.1fs", stage, ds, result["seconds"])
    if stage in REPORTED:
        _report(wh, ds)
    return result


REPORTED = ("plan", "materialize", "validate", "publish")
"""Stages after which the day's report (``reports/ds=D/index.html``) is written again."""


def _report(wh: Storage, ds: dt.date) -> None:
    from jobs.report import write_report

    written = write_report(wh, ds)
    if written:
        log.info("report %s: %s", ds, written)


def run_day(
    settings: Settings,
    ds: dt.date,
    spark: SparkSession | None = None,
    full_refresh: bool = False,
    only: tuple[str, ...] | None = None,
) -> dict[str, dict[str, Any]]:
    """All stages (or ``only`` these) of one day in one Spark application."""
    chosen = only or STAGES
    if spark is None and any(s in SPARK_STAGES for s in chosen):
        from jobs.common.spark import build_session

        spark = build_session(settings, f"feedpipe-run-{ds}")
    return {s: run_stage(s, settings, ds, spark, full_refresh) for s in chosen}


def backfill(
    settings: Settings,
    start: dt.date,
    end: dt.date,
    full_refresh: bool = False,
    only: tuple[str, ...] | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Days ``start``..``end`` in order (each day's feeds build on the previous day's)."""
    from jobs.common.spark import build_session

    spark = build_session(settings, f"feedpipe-backfill-{start}-{end}")
    return {
        d.isoformat(): run_day(settings, d, spark, full_refresh, only) for d in days(start, end)
    }

"""Stage ``publish``: mark day D complete once it has passed validation.

Reads the stage records under ``manifests/ds=D/stages/`` (each names the run folders it
wrote) and ``quality/ds=D/results.json``; refuses a day any stage of which has not run since
an earlier one ran again. Writes ``manifests/ds=D/manifest.json`` (settings, row counts in and
out per table, quarantined counts, plan cost summary, data quality outcome, and ``versions``:
the run folder of every table), then ``manifests/ds=D/_SUCCESS``, then moves
``manifests/latest`` forward to D (never backward, so backfills of past days keep it on the
newest complete day). Replacing the manifest is the one step that switches a day to its new
version (``jobs.common.versions``); afterwards the day's other run folders are removed, except
the version just replaced. Counts come from Parquet footers; no Spark job is needed.

With ``publish_to`` set, the day is first copied to that S3 target with boto3 (or marked there
when the warehouse is on S3) and the target's pointers are moved (:mod:`jobs.stages.publish_s3`);
only then is the warehouse marked, so a failed copy leaves the day unpublished everywhere and
the task's retry starts over.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from jobs.common import ledger, versions
from jobs.common.config import Settings
from jobs.common.errors import FeedpipeError
from jobs.common.pipeline import LANDING_TABLES
from jobs.common.records import (
    MANIFEST_FORMAT,
    IngestRecord,
    Manifest,
    PlanSummary,
    PublishedTable,
    PublishRecord,
    Quality,
)
from jobs.common.storage import Storage
from jobs.common.tables import PUBLISHED_TABLES, contract

log = logging.getLogger(__name__)


class PublishRefused(FeedpipeError, RuntimeError):
    """The day is not complete or did not pass validation."""


def refuse_unready(day: versions.DayVersion, wh: Storage) -> None:
    """Refuse a day that failed validation, was not validated, has a stage to run again since
    it was rebuilt, or misses a published table."""
    ds = day.ds
    quality = ledger.results_parts(ds)
    if day.results is not None and not day.results.success:
        raise PublishRefused(f"{ds} failed validation ({wh.uri(*quality)}); not publishing")
    not_run = versions.missing_records(wh, ds)
    if not_run:
        raise PublishRefused(
            f"{ds} is incomplete: {', '.join(not_run)} has not run since the day was last "
            "rebuilt; run the day from the first of them"
        )
    if day.results is None:
        raise PublishRefused(
            f"{ds} has not been validated (no {wh.uri(*quality)}): run validate first"
        )
    missing = [
        contract(ly, t).ref() for ly, t in PUBLISHED_TABLES if not day.has(contract(ly, t).ref())
    ]
    if missing:
        raise PublishRefused(f"{ds} is incomplete, missing partitions: {', '.join(missing)}")


def manifest_of(settings: Settings, day: versions.DayVersion, wh: Storage) -> Manifest:
    """The day's manifest (docs/storage.md): its tables with their rows and run folders, the
    input accounting, the plan served and every strategy's cost, the stage records and the
    validation outcome (:func:`refuse_unready` has passed the day: it has results)."""
    ds = day.ds
    results = day.results
    assert results is not None
    tables = {}
    for layer, table in PUBLISHED_TABLES:
        parts = day.parts(contract(layer, table).ref())
        assert parts is not None
        versions.note_read(f"{layer}/{table}", ds)  # counted, named, copied to publish_to
        tables[f"{layer}/{table}"] = PublishedTable(
            rows=wh.dataset(*parts).count_rows(), location=wh.uri(*parts), path="/".join(parts)
        )
    quarantine = {}
    for t in (*LANDING_TABLES, "topics"):
        parts = day.parts(contract("quarantine", "rows").ref(t))
        if parts is not None:
            versions.note_read(f"quarantine/{t}", ds)
            quarantine[t] = wh.dataset(*parts).count_rows()
    cost_parts = day.parts(contract("plan", "plan_cost").ref())
    assert cost_parts is not None
    plan_cost = wh.dataset(*cost_parts).to_table().to_pylist()
    ingest = day.records.get("ingest")
    ingest = ingest if isinstance(ingest, IngestRecord) else IngestRecord()
    return Manifest(
        format=MANIFEST_FORMAT,
        ds=ds,
        settings=settings.as_dict(),
        input=ingest.tables,
        topics=ingest.topics,
        allowed_empty=ingest.allowed_empty,
        quarantine_rows=quarantine,
        tables=tables,
        versions=dict(sorted(day.folders.items())),
        plan=PlanSummary(
            served=next((r["strategy"] for r in plan_cost if r["chosen"]), None),
            strategies=sorted(plan_cost, key=lambda r: r["total_cost"]),
        ),
        stages=day.records,
        quality=Quality(
            success=True,
            suites=len(results.suites),
            gates=results.gates,
            accepted_gates=sorted(
                {g.gate for g in results.gates if g.accepted and g.passed is False}
            ),
            results=results,
        ),
    )


def run(settings: Settings, ds: dt.date, wh: Storage, s3: Any = None) -> PublishRecord:
    """Publish ``ds``: switch the day to the version its stages just built (and copy it to
    ``settings.publish_to``; ``s3``: a boto3 client to do that with instead of the one the
    environment configures)."""
    day = versions.working(wh, ds)
    refuse_unready(day, wh)
    manifest = manifest_of(settings, day, wh)
    before = versions.published(wh, ds)
    if settings.publish_to:
        from jobs.stages.publish_s3 import publish_day

        tables_parts = [versions.version_parts(k, ds, f) for k, f in day.folders.items()]
        copied = publish_day(
            wh, ds, manifest, tables_parts, settings.publish_to, settings.publish_part_mb, s3=s3
        )
        manifest = manifest.model_copy(update={"published": copied})
    newest = ledger.mark_published(wh, ds, manifest)
    # the version replaced stays: a reader that resolved the day just before may still read it
    removed = versions.prune(wh, ds, [day, before])
    log.info("published %s (%d superseded run folders removed)", ds, removed)
    return PublishRecord(
        manifest=wh.uri(*ledger.manifest_parts(ds)), latest=newest, published=manifest.published
    )

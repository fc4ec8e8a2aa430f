"""Stage ``publish``: mark day D complete once it has passed validation.

Reads the stage records under ``manifests/ds=D/stages/`` and ``quality/ds=D/results.json``;
writes ``manifests/ds=D/manifest.json`` (settings, row counts in and out per table,
quarantined counts, plan cost summary, data quality outcome), then ``manifests/ds=D/_SUCCESS``,
then moves ``manifests/latest`` forward to D (never backward, so backfills of past days keep it
on the newest complete day). Counts come from Parquet footers; no Spark job is needed.

With ``publish_to`` set, the day is first copied to that S3 target with boto3 (or marked there
when the warehouse is on S3) and the target's pointers are moved (:mod:`jobs.stages.publish_s3`);
only then is the warehouse marked, so a failed copy leaves the day unpublished everywhere and
the task's retry starts over.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

from jobs.common import ledger
from jobs.common.config import Settings
from jobs.common.pipeline import LANDING_TABLES
from jobs.common.storage import Storage
from jobs.common.tables import PUBLISHED_TABLES, contract

log = logging.getLogger(__name__)


class PublishRefused(RuntimeError):
    """The day is not complete or did not pass validation."""


def run(settings: Settings, ds: dt.date, wh: Storage, s3: Any = None) -> dict[str, Any]:
    """Mark ``ds`` complete (and publish it to ``settings.publish_to``; ``s3``: a boto3 client
    to do that with instead of the one the environment configures)."""
    quality = ledger.results_parts(ds)
    if not wh.exists(*quality):
        raise PublishRefused(
            f"{ds} has not been validated (no {wh.uri(*quality)}): run validate first"
        )
    results = json.loads(wh.read_text(*quality))
    if not results.get("success"):
        raise PublishRefused(f"{ds} failed validation ({wh.uri(*quality)}); not publishing")
    missing = [
        f"{ly}/{t}" for ly, t in PUBLISHED_TABLES if not wh.is_dir(*contract(ly, t).parts(ds))
    ]
    if missing:
        raise PublishRefused(f"{ds} is incomplete, missing partitions: {', '.join(missing)}")

    tables = {}
    for layer, table in PUBLISHED_TABLES:
        parts = contract(layer, table).parts(ds)
        tables[f"{layer}/{table}"] = {
            "rows": wh.dataset(*parts).count_rows(),
            "location": wh.uri(*parts),
            "path": "/".join(parts),
        }
    q = contract("quarantine", "rows")
    quarantine = {
        t: wh.dataset(*q.parts(ds, t)).count_rows()
        for t in LANDING_TABLES
        if wh.is_dir(*q.parts(ds, t))
    }
    plan_cost = wh.dataset(*contract("plan", "plan_cost").parts(ds)).to_table().to_pylist()
    records = ledger.read_records(wh, ds)
    manifest = {
        "ds": ds.isoformat(),
        "settings": settings.as_dict(),
        "input": records.get("ingest", {}).get("tables", {}),
        "allowed_empty": records.get("ingest", {}).get("allowed_empty", []),
        "quarantine_rows": quarantine,
        "tables": tables,
        "plan": {
            "served": next((r["strategy"] for r in plan_cost if r["chosen"]), None),
            "strategies": sorted(plan_cost, key=lambda r: r["total_cost"]),
        },
        "stages": records,
        "quality": {
            "success": True,
            "suites": len(results.get("suites", {})),
            "gates": results.get("gates", []),
        },
    }
    if settings.publish_to:
        from jobs.stages.publish_s3 import publish_day

        tables_parts = [contract(layer, table).parts(ds) for layer, table in PUBLISHED_TABLES]
        manifest["published"] = publish_day(
            wh, ds, manifest, tables_parts, settings.publish_to, settings.publish_part_mb, s3=s3
        )
    newest = ledger.mark_published(wh, ds, manifest)
    log.info("published %s", ds)
    out = {"manifest": wh.uri(*ledger.manifest_parts(ds)), "latest": newest.isoformat()}
    if "published" in manifest:
        out["published"] = manifest["published"]
    return out

"""Stage ``publish``: mark day D complete once it has passed validation.

Reads the stage records under ``manifests/ds=D/stages/`` and ``quality/ds=D/results.json``;
writes ``manifests/ds=D/manifest.json`` (settings, row counts in and out per table,
quarantined counts, plan cost summary, data quality outcome), then ``manifests/ds=D/_SUCCESS``,
then moves ``manifests/latest`` forward to D (never backward, so backfills of past days keep it
on the newest complete day). Counts come from Parquet footers; no Spark job is needed.

With ``publish_to`` set, the day is first copied to that S3 target with boto3 (or marked there
when the warehouse is on S3) and the target's pointers are moved (:mod:`jobs.publish_s3`);
only then is the warehouse marked, so a failed copy leaves the day unpublished everywhere and
the task's retry starts over.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

import pyarrow.dataset as pads

from jobs.common.config import Settings
from jobs.common.storage import Storage, ds_dir
from jobs.common.tables import contract

log = logging.getLogger(__name__)

OUTPUTS = (
    ("clean", "follows"),
    ("clean", "events"),
    ("clean", "views"),
    ("rates", "producer_rates"),
    ("rates", "consumer_rates"),
    ("plan", "edge_plan"),
    ("plan", "views"),
    ("plan", "view_members"),
    ("plan", "consumer_sources"),
    ("plan", "plan_cost"),
    ("feeds", "producer_feed"),
    ("feeds", "view_feed"),
    ("feeds", "consumer_feed"),
)
STAGES = ("ingest", "rates", "plan", "materialize", "validate")


class PublishRefused(RuntimeError):
    """The day is not complete or did not pass validation."""


def manifest_path(ds: dt.date, name: str) -> tuple[str, ...]:
    return ("manifests", ds_dir(ds), name)


def dataset(wh: Storage, *parts: str) -> pads.Dataset:
    return pads.dataset(
        wh.path(*parts), filesystem=wh.fs, format="parquet", ignore_prefixes=["_", "."]
    )


def read_stage_records(wh: Storage, ds: dt.date) -> dict[str, Any]:
    out = {}
    for stage in STAGES:
        parts = ("manifests", ds_dir(ds), "stages", f"{stage}.json")
        if wh.exists(*parts):
            out[stage] = json.loads(wh.read_text(*parts))
    return out


def latest(wh: Storage) -> dt.date | None:
    if not wh.exists("manifests", "latest"):
        return None
    return dt.date.fromisoformat(wh.read_text("manifests", "latest").strip())


def is_published(wh: Storage, ds: dt.date) -> bool:
    return wh.exists(*manifest_path(ds, "_SUCCESS"))


def run(settings: Settings, ds: dt.date, s3: Any = None) -> dict[str, Any]:
    """Mark ``ds`` complete (and publish it to ``settings.publish_to``; ``s3``: a boto3 client
    to do that with instead of the one the environment configures)."""
    wh = Storage.at(settings.warehouse)
    quality = ("quality", ds_dir(ds), "results.json")
    if not wh.exists(*quality):
        raise PublishRefused(
            f"{ds} has not been validated (no {wh.uri(*quality)}): run validate first"
        )
    results = json.loads(wh.read_text(*quality))
    if not results.get("success"):
        raise PublishRefused(f"{ds} failed validation ({wh.uri(*quality)}); not publishing")
    missing = [f"{ly}/{t}" for ly, t in OUTPUTS if not wh.is_dir(*contract(ly, t).parts(ds))]
    if missing:
        raise PublishRefused(f"{ds} is incomplete, missing partitions: {', '.join(missing)}")

    tables = {}
    for layer, table in OUTPUTS:
        parts = contract(layer, table).parts(ds)
        tables[f"{layer}/{table}"] = {
            "rows": dataset(wh, *parts).count_rows(),
            "location": wh.uri(*parts),
            "path": "/".join(parts),
        }
    q_parts = ("quarantine",)
    quarantine = {
        t: dataset(wh, *q_parts, t, ds_dir(ds)).count_rows()
        for t in ("follows", "events", "views")
        if wh.is_dir(*q_parts, t, ds_dir(ds))
    }
    plan_cost = dataset(wh, *contract("plan", "plan_cost").parts(ds)).to_table().to_pylist()
    records = read_stage_records(wh, ds)
    manifest = {
        "ds": ds.isoformat(),
        "settings": settings.as_dict(),
        "input": records.get("ingest", {}).get("tables", {}),
        "quarantine_rows": quarantine,
        "tables": tables,
        "plan": {
            "served": next((r["strategy"] for r in plan_cost if r["chosen"]), None),
            "strategies": sorted(plan_cost, key=lambda r: r["total_cost"]),
        },
        "stages": records,
        "quality": {"success": True, "suites": len(results.get("suites", {}))},
    }
    if settings.publish_to:
        from jobs.publish_s3 import publish_day

        tables_parts = [contract(layer, table).parts(ds) for layer, table in OUTPUTS]
        manifest["published"] = publish_day(
            wh, ds, manifest, tables_parts, settings.publish_to, settings.publish_part_mb, s3=s3
        )
    wh.write_text(json.dumps(manifest, indent=2, default=str), *manifest_path(ds, "manifest.json"))
    wh.write_text(ds.isoformat(), *manifest_path(ds, "_SUCCESS"))
    current = latest(wh)
    if current is None or ds >= current:
        wh.write_text(ds.isoformat(), "manifests", "latest")
    log.info("published %s", ds)
    out = {
        "manifest": wh.uri(*manifest_path(ds, "manifest.json")),
        "latest": max(ds, current or ds).isoformat(),
    }
    if "published" in manifest:
        out["published"] = manifest["published"]
    return out

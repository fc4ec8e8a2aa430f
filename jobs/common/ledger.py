"""The day's ledger: what has run for a day, and whether the day is published.

Everything a day's runs record lives under ``manifests/`` of the warehouse:

* ``manifests/ds=D/stages/<stage>.json``: each stage's result (row accounting, the served
  strategy, how the feeds were built, its duration), written by the runner;
* ``manifests/ds=D/manifest.json``, then ``manifests/ds=D/_SUCCESS``: written by ``publish``;
  only a day with ``_SUCCESS`` is published, and its manifest names the run folder of each of
  its tables (``jobs.common.versions``): replacing that one file switches the day to a new
  version;
* ``manifests/latest``: the newest published day (it only moves forward).

Starting a stage withdraws what depended on the old version of its outputs
(:func:`withdraw`). The paths of the day's validation results and report are here too, so
that every module names them the same way.
"""

from __future__ import annotations

import datetime as dt

from jobs.common.pipeline import STAGES, stages_from
from jobs.common.records import RECORD_TYPES, Manifest, StageRecord, ValidationResults
from jobs.common.storage import Storage, ds_dir

MANIFESTS = "manifests"
LATEST: tuple[str, ...] = (MANIFESTS, "latest")


def day_parts(ds: dt.date) -> tuple[str, ...]:
    return (MANIFESTS, ds_dir(ds))


def record_parts(ds: dt.date, stage: str) -> tuple[str, ...]:
    return (*day_parts(ds), "stages", f"{stage}.json")


def records_parts(ds: dt.date) -> tuple[str, ...]:
    """The folder of the day's stage records."""
    return (*day_parts(ds), "stages")


def manifest_parts(ds: dt.date) -> tuple[str, ...]:
    return (*day_parts(ds), "manifest.json")


def success_parts(ds: dt.date) -> tuple[str, ...]:
    return (*day_parts(ds), "_SUCCESS")


def quality_parts(ds: dt.date) -> tuple[str, ...]:
    """The day's validation folder: ``results.json`` and Data Docs under ``docs/``."""
    return ("quality", ds_dir(ds))


def results_parts(ds: dt.date) -> tuple[str, ...]:
    return (*quality_parts(ds), "results.json")


def report_parts(ds: dt.date) -> tuple[str, ...]:
    return ("reports", ds_dir(ds), "index.html")


def read_record(wh: Storage, ds: dt.date, stage: str) -> StageRecord | None:
    """A stage's record of day ``ds`` (its type: ``records.RECORD_TYPES``), or None when it
    has not run (or was withdrawn)."""
    parts = record_parts(ds, stage)
    if not wh.exists(*parts):
        return None
    return RECORD_TYPES[stage].from_json(wh.read_text(*parts))


def read_records(wh: Storage, ds: dt.date) -> dict[str, StageRecord]:
    """Every stage record of day ``ds`` there is, by stage."""
    out = {}
    for stage in STAGES:
        record = read_record(wh, ds, stage)
        if record is not None:
            out[stage] = record
    return out


def write_record(wh: Storage, ds: dt.date, record: StageRecord) -> None:
    wh.write_text(record.to_json(), *record_parts(ds, record.stage))


def read_results(wh: Storage, ds: dt.date) -> ValidationResults | None:
    """The day's validation results, or None when it has not been validated (or was
    withdrawn)."""
    parts = results_parts(ds)
    return ValidationResults.from_json(wh.read_text(*parts)) if wh.exists(*parts) else None


def read_manifest(wh: Storage, ds: dt.date) -> Manifest | None:
    """The day's manifest, or None when there is none."""
    parts = manifest_parts(ds)
    return Manifest.from_json(wh.read_text(*parts)) if wh.exists(*parts) else None


def withdraw(wh: Storage, ds: dt.date, stage: str) -> None:
    """Before ``stage`` runs for ``ds``: remove the records of it and the later stages and the
    day's validation results (when ``validate`` is among them), so a rerun of, say, ``plan``
    cannot be published with feeds made from the previous plan. The published version (the
    manifest, ``_SUCCESS``) is left alone: readers keep it until ``publish`` replaces it."""
    later = stages_from(stage)
    for s in later:
        wh.delete(*record_parts(ds, s))
    if "validate" in later:
        wh.delete(*results_parts(ds))


def latest(wh: Storage) -> dt.date | None:
    """The newest published day, or None."""
    if not wh.exists(*LATEST):
        return None
    return dt.date.fromisoformat(wh.read_text(*LATEST).strip())


def is_published(wh: Storage, ds: dt.date) -> bool:
    return wh.exists(*success_parts(ds))


def mark_published(wh: Storage, ds: dt.date, manifest: Manifest) -> dt.date:
    """Write the day's manifest (replacing it in one step: the switch to the new version),
    then its ``_SUCCESS``, then move ``latest`` forward to ``ds`` (never backward: a backfill
    of past days keeps it on the newest complete day). Returns the latest day."""
    wh.write_text(manifest.to_json(), *manifest_parts(ds))
    wh.write_text(ds.isoformat(), *success_parts(ds))
    current = latest(wh)
    if current is None or ds >= current:
        wh.write_text(ds.isoformat(), *LATEST)
        return ds
    return current

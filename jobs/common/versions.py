"""Versions of a day's tables: every run writes new files, and a day switches to them at once.

A stage writes each table partition into a folder of its own run,
``<layer>/<table>/ds=D/run=<RUN>/part-*.parquet`` (``RUN``: UTC time then a random suffix,
so names sort by start time), and never touches another run's folder. Which folder is a
day's table is said in one place at a time:

* the **working version** of day D: the folders the stages' records name
  (``manifests/ds=D/stages/<stage>.json``, key ``outputs``). A stage's record is written only
  when the stage has finished, and withdrawn when it, or a stage before it, starts again, so
  the working version is always the complete output of finished stages;
* the **published version** of day D: the folders ``manifests/ds=D/manifest.json`` names
  (key ``versions``), present once the day has its ``_SUCCESS``. ``publish`` replaces that
  one file (one rename on a local disk, one PUT on S3): readers see the previous complete
  version or the new one, never a mixture, whatever is killed when.

Readers (the feed reader, the reports, the Airflow UI page, ``feedpipe tables``) resolve a day
through :func:`published` (or, asked explicitly, :func:`working`). Stages read the working
version of their own day and, for earlier days, the working version or else the published
one. After a switch, ``publish`` removes every other run folder of the day except the version
it replaced (a reader may still be reading that one): :func:`prune`.

Tables outside the stages' layers (``eval/*``, written by the research commands) resolve to
their newest complete run (the folder holding Spark's ``_SUCCESS``).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from pyarrow import fs as pafs

from jobs.common import ledger
from jobs.common.errors import FeedpipeError
from jobs.common.pipeline import DAY_STAGES, REGISTRY
from jobs.common.records import Manifest, StageRecord, ValidationResults
from jobs.common.storage import Storage, ds_dir

RUN_PREFIX = "run="

OWNER: dict[str, str] = {t.split("/")[0]: s.name for s in REGISTRY for t in s.writes}
"""The stage whose record names the working version of each layer's tables (the stage that
writes them: one per layer)."""


class LegacyLayout(FeedpipeError, RuntimeError):
    """A day written by a feedpipe that did not version its tables."""


def new_run_id() -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{now}-{uuid.uuid4().hex[:8]}"


@dataclass
class Run:
    """The run of one stage for one day: the folder name its writes go to, what it wrote
    (``layer/table`` -> ``run=<id>``), which the runner puts in the stage's record, and the
    tables whose rows it read (:func:`note_read`), of its own day (``inputs``; its own outputs
    read back are not counted) and of earlier days (``earlier``)."""

    ds: dt.date
    id: str = field(default_factory=new_run_id)
    outputs: dict[str, str] = field(default_factory=dict)
    inputs: set[str] = field(default_factory=set)
    earlier: set[str] = field(default_factory=set)

    @property
    def folder(self) -> str:
        return f"{RUN_PREFIX}{self.id}"


_CURRENT: contextvars.ContextVar[Run | None] = contextvars.ContextVar("feedpipe_run", default=None)


@contextlib.contextmanager
def stage_run(ds: dt.date) -> Iterator[Run]:
    """Writes inside this block belong to one new run of a stage for day ``ds``."""
    run = Run(ds)
    token = _CURRENT.set(run)
    try:
        yield run
    finally:
        _CURRENT.reset(token)


def current() -> Run | None:
    return _CURRENT.get()


def note_read(key: str, ds: dt.date) -> None:
    """The running stage reads table ``key`` of day ``ds`` (its rows, not whether it is there
    or its files' footers): kept in its run's ``inputs`` or ``earlier``."""
    run = current()
    if run is None or (ds == run.ds and key in run.outputs):
        return
    (run.inputs if ds == run.ds else run.earlier).add(key)


def table_key(layer: str, table: str) -> str:
    return f"{layer}/{table}"


def version_parts(key: str, ds: dt.date, folder: str) -> tuple[str, ...]:
    """Path parts of one version of a table partition: ``layer/table/ds=D/run=R``."""
    return (*key.split("/"), ds_dir(ds), folder)


@dataclass(frozen=True)
class DayVersion:
    """One version of a day: the folder of each of its tables, and what its runs recorded."""

    ds: dt.date
    published: bool
    folders: dict[str, str]
    """``layer/table`` -> ``run=<id>``."""
    records: dict[str, StageRecord]
    results: ValidationResults | None
    manifest: Manifest | None = None

    def parts(self, key: str) -> tuple[str, ...] | None:
        folder = self.folders.get(key)
        return version_parts(key, self.ds, folder) if folder else None

    def has(self, key: str) -> bool:
        return key in self.folders


def _outputs(record: StageRecord, where: str) -> dict[str, str]:
    if "outputs" not in record.model_fields_set:
        raise LegacyLayout(
            f"{where} was written by a feedpipe that did not version its tables; rebuild the "
            "warehouse with `feedpipe backfill --start FIRST --end LAST --full-refresh`"
        )
    return dict(record.outputs)


def working(wh: Storage, ds: dt.date) -> DayVersion:
    """The output of the day's finished stages (what the next stage, or ``publish``, uses)."""
    records = ledger.read_records(wh, ds)
    folders: dict[str, str] = {}
    for stage, record in records.items():
        if stage in OWNER.values():
            folders.update(_outputs(record, wh.uri(*ledger.record_parts(ds, stage))))
    return DayVersion(ds, False, folders, records, ledger.read_results(wh, ds))


def published(wh: Storage, ds: dt.date) -> DayVersion | None:
    """The day as last published, or None when it never was."""
    manifest = ledger.read_manifest(wh, ds) if ledger.is_published(wh, ds) else None
    if manifest is None:
        return None
    if "versions" not in manifest.model_fields_set:
        raise LegacyLayout(
            f"{wh.uri(*ledger.manifest_parts(ds))} was written by a feedpipe that did not "
            "version its tables; rebuild the warehouse with "
            "`feedpipe backfill --start FIRST --end LAST --full-refresh`"
        )
    return DayVersion(
        ds,
        True,
        dict(manifest.versions),
        dict(manifest.stages),
        manifest.quality.results,
        manifest,
    )


def for_readers(wh: Storage, ds: dt.date) -> DayVersion:
    """The published version, else (a day never published) the working one."""
    return published(wh, ds) or working(wh, ds)


def newest_complete(wh: Storage, key: str, ds: dt.date) -> str | None:
    """The newest run folder of a partition holding Spark's ``_SUCCESS`` (tables no stage owns)."""
    for folder in sorted(run_folders(wh, key, ds), reverse=True):
        if wh.exists(*version_parts(key, ds, folder), "_SUCCESS"):
            return folder
    return None


def locate(wh: Storage, key: str, ds: dt.date) -> tuple[str, ...] | None:
    """Where a pipeline stage reads table ``key`` of day ``ds``, or None when it has none.

    What the running stage itself wrote; else the owner stage's record; else, for a day other
    than the running stage's (a stage never mixes its own day's versions), the published
    version."""
    run = current()
    if run is not None and run.ds == ds and key in run.outputs:
        return version_parts(key, ds, run.outputs[key])
    owner = OWNER.get(key.split("/", 1)[0])
    if owner is None:
        folder = newest_complete(wh, key, ds)
        return version_parts(key, ds, folder) if folder else None
    record = ledger.read_record(wh, ds, owner)
    if record is not None:
        folder = _outputs(record, wh.uri(*ledger.record_parts(ds, owner))).get(key)
        return version_parts(key, ds, folder) if folder else None
    if run is not None and run.ds == ds:
        return None
    day = published(wh, ds)
    return day.parts(key) if day else None


def run_folders(wh: Storage, key: str, ds: dt.date) -> list[str]:
    base = wh.path(*key.split("/"), ds_dir(ds))
    if not wh.is_dir(*key.split("/"), ds_dir(ds)):
        return []
    return sorted(
        info.base_name
        for info in wh.fs.get_file_info(pafs.FileSelector(base))
        if info.type == pafs.FileType.Directory and info.base_name.startswith(RUN_PREFIX)
    )


def day_tables(wh: Storage, ds: dt.date) -> list[str]:
    """``layer/table`` of every table of the stages' layers with a ``ds=D`` folder."""
    out = []
    for layer in OWNER:
        if not wh.is_dir(layer):
            continue
        for info in wh.fs.get_file_info(pafs.FileSelector(wh.path(layer))):
            if info.type == pafs.FileType.Directory and wh.is_dir(
                layer, info.base_name, ds_dir(ds)
            ):
                out.append(table_key(layer, info.base_name))
    return sorted(out)


def prune(wh: Storage, ds: dt.date, keep: list[DayVersion | None]) -> int:
    """Remove every run folder of day ``ds`` that none of ``keep`` names (superseded versions,
    killed runs); returns how many were removed."""
    kept = {(k, f) for v in keep if v is not None for k, f in v.folders.items()}
    removed = 0
    for key in day_tables(wh, ds):
        for folder in run_folders(wh, key, ds):
            if (key, folder) not in kept:
                wh.delete(*version_parts(key, ds, folder))
                removed += 1
    return removed


def drop_older(wh: Storage, key: str, ds: dt.date, folder: str) -> None:
    """After a write outside the stages (``eval/*``): remove the partition's older runs."""
    for other in run_folders(wh, key, ds):
        if other < folder:
            wh.delete(*version_parts(key, ds, other))


def missing_records(wh: Storage, ds: dt.date) -> list[str]:
    """The stages before ``publish`` that have no record for the day (not run, or withdrawn
    because an earlier stage ran again since)."""
    before = [s for s in REGISTRY if s.name in DAY_STAGES and s.recorded]
    return [s.name for s in before if ledger.read_record(wh, ds, s.name) is None]

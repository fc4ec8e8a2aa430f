"""Publishing a complete day to an S3 bucket with boto3 (setting ``publish_to``).

``publish`` calls :func:`publish_day` after the day has passed validation and before it marks
the warehouse. Under ``publish_to = "s3://BUCKET/PREFIX"``:

* ``snapshots/ds=D/<snapshot>/`` holds a copy of the day: every partition of
  ``jobs.common.tables.PUBLISHED_TABLES`` at its warehouse path
  (``feeds/consumer_feed/ds=D/run=R/part-*.parquet``, ...), the stage records and the validation
  results. A snapshot is a warehouse-shaped root, so ``FeedReader``, DuckDB or Spark read it
  as they read the warehouse. Files of ``publish_part_mb`` and more go up as multipart
  uploads through boto3's transfer manager (aborted on failure, so no parts are left
  behind); a listing of the snapshot must
  then match every key and size before anything points at it.
* ``snapshots/ds=D/<snapshot>/manifests/ds=D/manifest.json``, then ``_SUCCESS``, are written
  after the data; the manifest's table locations point into the snapshot.
* ``days/ds=D.json`` (the day's pointer), then ``latest`` (the newest day's pointer, moved
  forward only, so a backfill of past days leaves it alone) are written last. Each pointer is
  one PUT, which S3 applies atomically: a reader sees the old or the new pointer, never a
  mixture. A publish that fails half-way leaves both pointers on the previous complete
  snapshot; the retry writes a new snapshot and removes the failed one.

When the warehouse is itself on S3, nothing is copied: the pointers *mark* the warehouse
root as the day's location: readers resolve the day through its manifest there, which names
the published run folders (docs/storage.md, "Versions of a day").

Superseded snapshots of a day are removed when the day is published again, except the one
the day's pointer named until then (a reader may still be reading it).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from jobs.common import ledger
from jobs.common.pointers import (
    LATEST_POINTER,
    POINTER_VERSION,
    PublishFailed,
    Target,
    client,
    day_pointer_name,
    read_pointer,
)
from jobs.common.records import Manifest
from jobs.common.storage import Storage, ds_dir


def _put_json(s3: Any, target: Target, key_parts: Iterable[str], doc: Any) -> None:
    body = json.dumps(doc, indent=2, default=str).encode()
    s3.put_object(
        Bucket=target.bucket, Key=target.key(*key_parts), Body=body, ContentType="application/json"
    )


def upload(s3: Any, fs: Any, path: str, bucket: str, key: str, part_bytes: int) -> int:
    """Upload one file with boto3's managed transfer: multipart at ``part_bytes`` and above
    (in parts of ``part_bytes``, at least the 5 MiB S3 requires), a failed multipart upload
    aborted by the transfer manager. One thread per file: :func:`upload_snapshot` runs the
    files in parallel."""
    from boto3.s3.transfer import TransferConfig

    config = TransferConfig(
        multipart_threshold=part_bytes, multipart_chunksize=part_bytes, use_threads=False
    )
    s3.upload_file(path, bucket, key, Config=config)  # a snapshot copies a local warehouse
    return int(fs.get_file_info(path).size)


def listing(s3: Any, bucket: str, prefix: str) -> dict[str, int]:
    """Every key below ``prefix`` with its size."""
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = int(obj["Size"])
    return out


def _delete(s3: Any, bucket: str, keys: list[str]) -> None:
    for i in range(0, len(keys), 1000):
        batch = [{"Key": k} for k in keys[i : i + 1000]]
        s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})


def snapshot_files(wh: Storage, ds: dt.date, tables: Iterable[tuple[str, ...]]) -> list[str]:
    """Warehouse-relative paths of what a snapshot of day ``ds`` holds."""
    rel: list[str] = []
    for parts in tables:
        rel += [p[len(wh.path()) :].strip("/") for p in wh.list_files(*parts)]
    for extra in (ledger.records_parts(ds), ledger.quality_parts(ds)):
        if wh.is_dir(*extra):
            rel += [
                p[len(wh.path()) :].strip("/") for p in wh.list_files(*extra) if p.endswith(".json")
            ]
    return rel


def upload_snapshot(
    wh: Storage,
    ds: dt.date,
    tables: Iterable[tuple[str, ...]],
    target: Target,
    root_key: str,
    part_mb: float,
    s3: Any,
    workers: int,
) -> dict[str, int]:
    """Upload the day's files under ``root_key`` in parallel and check the listing of what
    arrived against them; returns each key with its size. Any failure is a
    :class:`PublishFailed` (the pointers have not moved)."""
    files = snapshot_files(wh, ds, tables)
    part_bytes = max(1, int(part_mb * 1024 * 1024))
    expected: dict[str, int] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {
            pool.submit(
                upload, s3, wh.fs, wh.path(rel), target.bucket, f"{root_key}/{rel}", part_bytes
            ): rel
            for rel in files
        }
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for f in pending:
            f.cancel()
        failed = [f for f in done if f.exception() is not None]
        if failed:
            ok = sum(1 for f in done if f.exception() is None)
            raise PublishFailed(
                f"publishing {ds} to {target.uri()} failed after {ok} of {len(files)} "
                f"files ({futures[failed[0]]}: {failed[0].exception()}); "
                "the published pointers still name the previous snapshot"
            ) from failed[0].exception()
        for f, rel in futures.items():
            expected[f"{root_key}/{rel}"] = f.result()
    found = listing(s3, target.bucket, root_key + "/")
    if found != expected:
        bad = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
        raise PublishFailed(
            f"the listing of {target.uri(root_key[len(target.prefix) :])} does not match "
            f"what was uploaded ({len(bad)} keys differ, e.g. {bad[:3]})"
        )
    return expected


def publish_day(
    wh: Storage,
    ds: dt.date,
    manifest: Manifest,
    tables: Iterable[tuple[str, ...]],
    target_uri: str,
    part_mb: float,
    s3: Any = None,
    workers: int = 8,
) -> dict[str, Any]:
    """Copy (or mark) day ``ds`` under ``target_uri`` and move its pointers; see the module."""
    target = Target.parse(target_uri)
    s3 = s3 or client()
    previous = read_pointer(s3, target, day_pointer_name(ds))
    snapshot = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]
    day_prefix = target.key("snapshots", ds_dir(ds))
    stats: dict[str, Any] = {"target": target.uri(), "files": 0, "bytes": 0}
    if wh.is_local:
        root_key = f"{day_prefix}/{snapshot}"
        expected = upload_snapshot(wh, ds, tables, target, root_key, part_mb, s3, workers)
        root = f"s3://{target.bucket}/{root_key}"
        stats.update(files=len(expected), bytes=sum(expected.values()))
        published = manifest.model_copy(
            update={
                "tables": {
                    name: entry.model_copy(update={"location": f"{root}/{entry.path}"})
                    for name, entry in manifest.tables.items()
                }
            }
        )
        manifest_key = "/".join((root_key, *ledger.manifest_parts(ds)))
        s3.put_object(
            Bucket=target.bucket,
            Key=manifest_key,
            Body=published.to_json().encode(),
            ContentType="application/json",
        )
        s3.put_object(
            Bucket=target.bucket,
            Key="/".join((root_key, *ledger.success_parts(ds))),
            Body=ds.isoformat().encode(),
        )
    else:  # the warehouse is on S3: mark it, copy nothing
        root = wh.uri()
        manifest_key = None
    pointer = {
        "version": POINTER_VERSION,
        "ds": ds.isoformat(),
        "root": root,
        "manifest": f"s3://{target.bucket}/{manifest_key}" if manifest_key else None,
        "snapshot": snapshot if manifest_key else None,
        "published_at": dt.datetime.now(dt.UTC).isoformat(),
    }
    _put_json(s3, target, [day_pointer_name(ds)], pointer)
    current = read_pointer(s3, target, LATEST_POINTER)
    if current is None or ds >= dt.date.fromisoformat(str(current["ds"])):
        _put_json(s3, target, [LATEST_POINTER], pointer)
    # superseded and failed snapshots of the day, but not the one readers were sent to before
    keep = {snapshot, (previous or {}).get("snapshot")}
    stale = [
        k
        for k in listing(s3, target.bucket, day_prefix + "/")
        if k[len(day_prefix) + 1 :].split("/", 1)[0] not in keep
    ]
    _delete(s3, target.bucket, stale)
    stats.update(root=root, removed=len(stale), snapshot=pointer["snapshot"])
    return stats

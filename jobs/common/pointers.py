"""Where a published day lives: the pointers of a ``publish_to`` target on S3.

Under ``publish_to = "s3://BUCKET/PREFIX"``, ``days/ds=D.json`` names the root (a snapshot
of the warehouse, or the warehouse itself when it is on S3) that holds day D as published,
and ``latest`` the newest such day. Each pointer is one PUT, which S3 applies atomically, so
a reader sees the old or the new pointer. ``jobs.stages.publish_s3`` writes them; readers
(``jobs.serving.reader``) resolve them here.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from jobs.common.errors import FeedpipeError
from jobs.common.storage import S3Access, ds_dir

LATEST_POINTER = "latest"

POINTER_VERSION = 1


class PublishFailed(FeedpipeError, RuntimeError):
    """Copying the day to the publish target did not complete; the pointers did not move."""


@dataclass(frozen=True)
class Target:
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, uri: str) -> Target:
        parsed = urlparse(uri)
        if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
            raise PublishFailed(f"publish_to must be an s3://bucket/prefix URI, got {uri!r}")
        return cls(parsed.netloc, parsed.path.strip("/"))

    def key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))

    def uri(self, *parts: str) -> str:
        return f"s3://{self.bucket}/{self.key(*parts)}"


def client() -> Any:
    """A boto3 S3 client for ``FEEDPIPE_S3_ENDPOINT`` (or ``AWS_ENDPOINT_URL``; AWS if unset)."""
    import boto3

    access = S3Access.from_env()  # keys: boto3's own chain reads the same variables
    return boto3.client("s3", endpoint_url=access.endpoint, region_name=access.region)


def _missing(exc: Exception) -> bool:
    code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
    return code in ("NoSuchKey", "404", "NotFound")


def read_pointer(s3: Any, target: Target, name: str) -> dict[str, Any] | None:
    """``latest`` or ``days/ds=D.json`` under the target, or None when it does not exist."""
    try:
        body = s3.get_object(Bucket=target.bucket, Key=target.key(name))["Body"].read()
    except Exception as exc:
        if _missing(exc):
            return None
        raise
    return dict(json.loads(body))


def day_pointer_name(ds: dt.date) -> str:
    return f"days/{ds_dir(ds)}.json"


def resolve(target_uri: str, ds: dt.date | None = None, s3: Any = None) -> tuple[str, dt.date]:
    """The root a reader should read day ``ds`` (default: the latest day) from, and the day."""
    target = Target.parse(target_uri)
    s3 = s3 or client()
    name = LATEST_POINTER if ds is None else day_pointer_name(ds)
    pointer = read_pointer(s3, target, name)
    if pointer is None:
        what = "no day" if ds is None else str(ds)
        raise PublishFailed(f"{what} has been published to {target.uri()}")
    return str(pointer["root"]), dt.date.fromisoformat(str(pointer["ds"]))

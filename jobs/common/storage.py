"""Storage roots (landing, warehouse) on a local disk or an object store.

Tables live at ``ROOT/<layer>/<table>/ds=YYYY-MM-DD/run=<RUN>/part-*.parquet`` (Hive-style
partitions, one folder per run that wrote the day: ``jobs.common.versions`` says which of them
is the day's table). Nothing is ever rewritten in place, so a local disk and an object store
behave alike.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from pyarrow import fs as pafs

from jobs.common.errors import FeedpipeError

if TYPE_CHECKING:
    import pyarrow.dataset as pads


class StorageError(FeedpipeError, RuntimeError):
    """A storage location cannot be used (missing, wrong scheme, unreadable)."""


@dataclass(frozen=True)
class S3Access:
    """Where S3 is and who we are there, from the environment, for every client: pyarrow's
    (:class:`Storage`), boto3's (``publish_to``) and Spark's S3A (``jobs.common.s3a``).

    ``FEEDPIPE_S3_ENDPOINT``, else ``AWS_ENDPOINT_URL`` (None: AWS itself); ``AWS_REGION``,
    else ``AWS_DEFAULT_REGION``; ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (None:
    each client's own credential chain)."""

    endpoint: str | None
    region: str | None
    access_key: str | None
    secret_key: str

    @classmethod
    def from_env(cls) -> S3Access:
        env = os.environ
        return cls(
            endpoint=env.get("FEEDPIPE_S3_ENDPOINT") or env.get("AWS_ENDPOINT_URL") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY", ""),
        )

    def pyarrow_options(self) -> dict[str, str]:
        """Keyword arguments of ``pyarrow.fs.S3FileSystem``."""
        kwargs: dict[str, str] = {}
        if self.endpoint:
            parsed = urlparse(
                self.endpoint if "://" in self.endpoint else f"http://{self.endpoint}"
            )
            kwargs["endpoint_override"] = parsed.netloc
            kwargs["scheme"] = parsed.scheme or "http"
        if self.region:
            kwargs["region"] = self.region
        if self.access_key:
            kwargs["access_key"] = self.access_key
            kwargs["secret_key"] = self.secret_key
        return kwargs

    def hadoop_options(self) -> dict[str, str]:
        """Spark settings of S3A's endpoint, region and keys."""
        conf: dict[str, str] = {}
        prefix = "spark.hadoop.fs.s3a."
        if self.endpoint:
            conf[prefix + "endpoint"] = self.endpoint
            conf[prefix + "path.style.access"] = "true"
            conf[prefix + "connection.ssl.enabled"] = str(self.endpoint.startswith("https")).lower()
        if self.region:
            conf[prefix + "endpoint.region"] = self.region
        if self.access_key:
            conf[prefix + "access.key"] = self.access_key
            conf[prefix + "secret.key"] = self.secret_key
            conf[prefix + "aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
            )
        return conf


def _s3_filesystem() -> pafs.FileSystem:
    return pafs.S3FileSystem(**S3Access.from_env().pyarrow_options())  # type: ignore[arg-type]


@dataclass(frozen=True)
class Storage:
    """A root folder: local (absolute path) or ``s3://bucket/prefix``."""

    root: str
    fs: pafs.FileSystem
    base: str

    @classmethod
    def at(cls, root: str) -> Storage:
        parsed = urlparse(root)
        if parsed.scheme in ("s3", "s3a"):
            base = f"{parsed.netloc}{parsed.path}".rstrip("/")
            return cls(f"s3://{base}", _s3_filesystem(), base)
        if parsed.scheme not in ("", "file"):
            raise StorageError(f"unsupported storage scheme {parsed.scheme!r} in {root!r}")
        path = os.path.abspath(parsed.path if parsed.scheme == "file" else root)
        return cls(path, pafs.LocalFileSystem(), path)

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, *parts: str) -> str:
        """Path inside ``self.fs`` (what pyarrow wants)."""
        return "/".join([self.base, *[p.strip("/") for p in parts if p]])

    def spark_path(self, *parts: str) -> str:
        """The same location as Spark's Hadoop file systems spell it."""
        p = self.path(*parts)
        return p if self.is_local else f"s3a://{p}"

    def spark_path_of(self, fs_path: str) -> str:
        """Spark's spelling of a path already inside ``self.fs`` (from a listing)."""
        return fs_path if self.is_local else f"s3a://{fs_path}"

    def uri(self, *parts: str) -> str:
        """A human-readable location (for messages and reports)."""
        p = self.path(*parts)
        return p if self.is_local else f"s3://{p}"

    # -- queries ------------------------------------------------------------------
    def exists(self, *parts: str) -> bool:
        return self.fs.get_file_info(self.path(*parts)).type != pafs.FileType.NotFound

    def is_dir(self, *parts: str) -> bool:
        return self.fs.get_file_info(self.path(*parts)).type == pafs.FileType.Directory

    def list_files(self, *parts: str) -> list[str]:
        """Data files below a folder (recursive), skipping ``_``/``.``-prefixed names."""
        if not self.is_dir(*parts):
            return []
        selector = pafs.FileSelector(self.path(*parts), recursive=True)
        out = []
        for info in self.fs.get_file_info(selector):
            if info.type != pafs.FileType.File:
                continue
            rel = info.path[len(self.path(*parts)) :].strip("/")
            if any(seg.startswith(("_", ".")) for seg in rel.split("/")):
                continue
            out.append(info.path)
        return sorted(out)

    def list_partitions(self, *parts: str) -> list[dt.date]:
        """The ``ds=`` partitions present under a table folder, oldest first."""
        if not self.is_dir(*parts):
            return []
        out = []
        for info in self.fs.get_file_info(pafs.FileSelector(self.path(*parts))):
            name = info.base_name
            if info.type == pafs.FileType.Directory and name.startswith("ds="):
                try:
                    out.append(dt.date.fromisoformat(name[3:]))
                except ValueError:
                    continue
        return sorted(out)

    def dataset(self, *parts: str) -> pads.Dataset:
        """The Parquet files below a folder as one pyarrow dataset (``_``/``.`` names skipped,
        as Spark skips them): for readers that do not start Spark."""
        import pyarrow.dataset as pads

        return pads.dataset(
            self.path(*parts), filesystem=self.fs, format="parquet", ignore_prefixes=["_", "."]
        )

    # -- text files ---------------------------------------------------------------
    def read_text(self, *parts: str) -> str:
        with self.fs.open_input_stream(self.path(*parts)) as f:
            return bytes(f.read()).decode("utf-8")

    def write_text(self, text: str, *parts: str) -> None:
        """Write a small file so that readers see the old or the new content, never a mix."""
        final = self.path(*parts)
        self.fs.create_dir(final.rsplit("/", 1)[0], recursive=True)
        if not self.is_local:
            with self.fs.open_output_stream(final) as f:  # single PUT: atomic on S3
                f.write(text.encode("utf-8"))
            return
        tmp = f"{final}.{uuid.uuid4().hex}.tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(text.encode("utf-8"))
        os.replace(tmp, final)

    def delete(self, *parts: str) -> None:
        info = self.fs.get_file_info(self.path(*parts))
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(info.path)
        elif info.type == pafs.FileType.File:
            self.fs.delete_file(info.path)


def ds_dir(ds: dt.date) -> str:
    return f"ds={ds.isoformat()}"

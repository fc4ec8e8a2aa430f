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

if TYPE_CHECKING:
    import pyarrow.dataset as pads


class StorageError(RuntimeError):
    """A storage location cannot be used (missing, wrong scheme, unreadable)."""


def s3_endpoint() -> str | None:
    """The S3 endpoint every client uses: ``FEEDPIPE_S3_ENDPOINT``, else ``AWS_ENDPOINT_URL``;
    None for AWS itself."""
    return os.environ.get("FEEDPIPE_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL") or None


def s3_region() -> str | None:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None


def _s3_filesystem() -> pafs.FileSystem:
    endpoint = s3_endpoint()
    kwargs: dict[str, object] = {}
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
        kwargs["endpoint_override"] = parsed.netloc
        kwargs["scheme"] = parsed.scheme or "http"
    region = s3_region()
    if region:
        kwargs["region"] = region
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        kwargs["access_key"] = os.environ["AWS_ACCESS_KEY_ID"]
        kwargs["secret_key"] = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    return pafs.S3FileSystem(**kwargs)  # type: ignore[arg-type]


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

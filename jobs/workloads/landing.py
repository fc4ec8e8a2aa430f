"""Landing files written by feedpipe's own tools: the workload generator
(``jobs.workloads.generate``) and the importers of real data sets (``jobs.workloads.importers``).

One file per :class:`LandingWriter`, at ``<landing>/<table>/ds=D/part-NNNNN.<ext>``, in CSV
(with a header; timestamps ISO 8601 in UTC), JSON Lines or Parquet, text formats optionally
gzip-compressed: the layouts ``ingest`` reads (docs/data-contracts.md).
"""

from __future__ import annotations

import datetime as dt
import gzip
import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from jobs.common.storage import Storage, ds_dir

FORMATS = ("csv", "jsonl", "parquet")


class LandingWriter:
    """Writes one file of one table-day of the landing layout in a chosen file format; a
    context manager: the file is closed when the block ends, and removed when the block
    fails, so an interrupted writer leaves no half-written file for ``ingest`` to read."""

    def __init__(
        self, storage: Storage, table: str, day: dt.date, fmt: str, gzip_text: bool, part: int = 0
    ):
        """``part`` 0 replaces the table-day's folder; a later part adds a file beside it."""
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
        self.storage, self.fmt, self.gzip = storage, fmt, gzip_text and fmt != "parquet"
        folder = (table, ds_dir(day))
        if part == 0:
            storage.delete(*folder)
        storage.fs.create_dir(storage.path(*folder), recursive=True)
        ext = {"csv": "csv", "jsonl": "jsonl", "parquet": "parquet"}[fmt] + (
            ".gz" if self.gzip else ""
        )
        self.path = storage.path(*folder, f"part-{part:05d}.{ext}")
        self.rows = 0
        self._pq: pq.ParquetWriter | None = None
        self._text: io.BufferedIOBase | None = None
        self._raw = None

    def write(self, batch: pa.Table) -> None:
        self.rows += batch.num_rows
        if self.fmt == "parquet":
            if self._pq is None:
                self._pq = pq.ParquetWriter(self.path, batch.schema, filesystem=self.storage.fs)
            self._pq.write_table(batch)
            return
        if self._text is None:
            self._raw = self.storage.fs.open_output_stream(self.path, compression=None)
            self._text = gzip.GzipFile(fileobj=self._raw, mode="wb") if self.gzip else self._raw  # type: ignore[assignment]
            if self.fmt == "csv":
                self._write_csv(batch, header=True)
                return
        if self.fmt == "csv":
            self._write_csv(batch, header=False)
        else:
            plain = batch.cast(pa.schema([pa.field(f.name, _plain(f.type)) for f in batch.schema]))
            buf = io.StringIO()
            plain.to_pandas().to_json(
                buf, orient="records", lines=True, date_format="iso", date_unit="s"
            )
            text = buf.getvalue()
            if text and not text.endswith("\n"):
                text += "\n"
            assert self._text is not None
            self._text.write(text.encode("utf-8"))

    def _write_csv(self, batch: pa.Table, header: bool) -> None:
        plain = batch.cast(pa.schema([pa.field(f.name, _plain(f.type)) for f in batch.schema]))
        cols = []
        for name in plain.column_names:
            col = plain[name]
            if pa.types.is_timestamp(col.type):
                col = pc.strftime(col, format="%Y-%m-%dT%H:%M:%SZ")
            cols.append(col)
        out = pa.table(cols, names=plain.column_names)
        buf = io.BytesIO()
        pacsv.write_csv(out, buf, pacsv.WriteOptions(include_header=header, quoting_style="needed"))
        assert self._text is not None
        self._text.write(buf.getvalue())

    def close(self) -> None:
        if self._pq is not None:
            self._pq.close()
        if self._text is not None:
            self._text.close()
            if self._raw is not None and self._raw is not self._text:
                self._raw.close()

    def __enter__(self) -> LandingWriter:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        try:
            self.close()
        finally:
            found = self.storage.fs.get_file_info(self.path).type != pafs.FileType.NotFound
            if error is not None and found:
                self.storage.fs.delete_file(self.path)


def _plain(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t

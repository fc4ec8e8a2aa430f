"""The day's records as the tests read and corrupt them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from jobs.common.ledger import read_record
from jobs.common.records import IngestRecord
from jobs.common.storage import Storage


def ingested(wh: Storage, ds: dt.date) -> IngestRecord:
    """The day's ingest record (the test has run ingest for it)."""
    record = read_record(wh, ds, "ingest")
    assert isinstance(record, IngestRecord), f"no ingest record of {ds}"
    return record


def recounted(ingest: IngestRecord, table: str, **counts: Any) -> IngestRecord:
    """The ingest record with ``counts`` in place of ``table``'s (a corrupted accounting)."""
    changed = ingest.tables[table].model_copy(update=counts)
    return ingest.model_copy(update={"tables": {**ingest.tables, table: changed}})

"""Where a day's table is on a local warehouse, resolved as the product resolves it."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from pathlib import Path

from jobs.common import ledger, versions
from jobs.common.records import RECORD_TYPES
from jobs.common.storage import Storage


def version(
    warehouse: str | Path, layer: str, table: str, ds: dt.date, published: bool = False
) -> Path:
    """The folder of the day's working version of ``layer/table`` (what the stages built
    last), or of its published version; a test fails when there is none."""
    wh = Storage.at(str(warehouse))
    key = f"{layer}/{table}"
    if published:
        day = versions.published(wh, ds)
        parts = day.parts(key) if day else None
    else:
        parts = versions.locate(wh, key, ds)
    assert parts is not None, f"{key} has no {'published ' if published else ''}version on {ds}"
    return Path(wh.path(*parts))


@contextlib.contextmanager
def recorded(warehouse: str | Path, ds: dt.date, stage: str) -> Iterator[None]:
    """Tables written inside the block become day ``ds``'s working version, as if ``stage``
    had written them (its record names them): for tests that write tables by hand."""
    wh = Storage.at(str(warehouse))
    with versions.stage_run(ds) as run:
        yield
    record = ledger.read_record(wh, ds, stage) or RECORD_TYPES[stage]()
    outputs = {**record.outputs, **run.outputs}
    ledger.write_record(wh, ds, record.model_copy(update={"outputs": outputs}))

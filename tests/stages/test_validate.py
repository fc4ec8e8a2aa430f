"""Stage ``validate``: a corrupted table fails the day, which is then not published, and the
row accounting it checks counts what ingest wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from jobs.common.ledger import read_record
from jobs.common.storage import Storage
from jobs.stages import runner
from jobs.stages.publish import PublishRefused
from jobs.stages.validate import ValidationFailed, accounting_check
from support import browser
from support.workloads import LAST


def test_a_corrupted_feed_fails_validation_and_is_not_published(spark, built_copy):
    ds = LAST
    folder = Path(built_copy.warehouse) / "feeds" / "consumer_feed" / f"ds={ds}"
    files = sorted(folder.glob("*.parquet"))
    table = pq.read_table(files[0])
    rank = table.column("rank").to_pylist()
    swapped = [rank[1], rank[0], *rank[2:]]  # two rows of one feed swap places: order broken
    i = table.schema.get_field_index("rank")
    swapped_column = pa.array(swapped, type=table.schema.field(i).type)  # the file's int32
    pq.write_table(table.set_column(i, "rank", swapped_column), files[0])
    (folder / f".{files[0].name}.crc").unlink()  # else Hadoop refuses the file's new bytes
    with pytest.raises(ValidationFailed, match=r"feeds\.consumer_feed.*order_ok"):
        runner.run_stage("validate", built_copy, ds, spark)
    results = json.loads(
        (Path(built_copy.warehouse) / "quality" / f"ds={ds}" / "results.json").read_text()
    )
    assert not results["success"]
    (failed,) = results["suites"]["feeds.consumer_feed"]["failed"]
    # the failed suite ran again with samples: rank 2 is now newer than rank 1
    assert (failed["unexpected_count"], failed["sample"]) == (1, [False]), failed
    with pytest.raises(PublishRefused, match="failed validation"):
        runner.run_stage("publish", built_copy, ds, spark)
    assert not (Path(built_copy.warehouse) / "manifests" / f"ds={ds}" / "_SUCCESS").exists()
    # the day's report says what failed
    report = Path(built_copy.warehouse) / "reports" / f"ds={ds}" / "index.html"
    page = browser.Page(report.read_text())
    assert (page.text["status"], page.text["quality"]) == ("not published", "validation FAILED")
    suites = {r[0]: r[2] for r in page.rows("quality-suites")[1:]}
    assert suites["feeds.consumer_feed"] == failed["expectation"]
    assert suites["clean.events"] == "0"


def test_row_accounting_counts_what_was_written(spark, built_copy):
    """The accounting frame validate checks: rows accounted per landing table equal the rows
    in the written clean and quarantine files (counted here with pyarrow), so a row that ingest
    read and did not write shows up as a mismatch."""
    ds = LAST
    wh = Path(built_copy.warehouse)
    ingest = read_record(Storage.at(str(wh)), ds, "ingest")

    def rows(*parts: str) -> int:
        folder = wh.joinpath(*parts)
        return pads.dataset(str(folder)).count_rows() if folder.exists() else 0

    expected = {}
    for table, c in ingest["tables"].items():
        quarantined = rows("quarantine", table, f"ds={ds}")
        clean = c["clean"] if table == "follows" else rows("clean", table, f"ds={ds}")
        expected[table] = clean + quarantined
    assert set(expected) == {"events", "follows", "views"}
    assert expected["events"] > 0 and expected["views"] > 0

    ingest["tables"]["events"]["rows_in"] += 1  # one row read and never written
    got = accounting_check(spark, Storage.at(str(wh)), ds, ingest).toPandas()
    got = got.set_index("table")
    assert got["rows_accounted"].to_dict() == expected
    mismatched = sorted(got.index[got["rows_in"] != got["rows_accounted"]])
    assert mismatched == ["events"]

    # ingest's per-day counts (what rates reads) sum to the clean rows; a lost count shows
    for table, name in (("events", "event_counts"), ("views", "view_counts")):
        counted = pc.sum(pads.dataset(str(wh / "clean" / name / f"ds={ds}")).to_table()["n"])
        assert counted.as_py() == rows("clean", table, f"ds={ds}") == got["clean_rows"][table]
        assert got["clean_counted"][table] == counted.as_py()
    assert got["clean_rows"].isna()["follows"] and got["clean_counted"].isna()["follows"]
    folder = wh / "clean" / "view_counts" / f"ds={ds}"
    whole = pads.dataset(str(folder)).to_table()
    for f in folder.glob("*.parquet"):
        f.unlink()
    pq.write_table(whole.slice(1), folder / "part-0.parquet")  # one consumer's count lost
    got = accounting_check(spark, Storage.at(str(wh)), ds, ingest).toPandas().set_index("table")
    got = got.drop(index="follows")  # no counts for the graph (NaN != NaN)
    assert sorted(got.index[got["clean_rows"] != got["clean_counted"]]) == ["views"]

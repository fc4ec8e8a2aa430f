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

from jobs.common.records import Manifest
from jobs.common.storage import Storage
from jobs.common.versions import locate
from jobs.stages import gates as policy
from jobs.stages import runner, validate
from jobs.stages.checks import accounting_check
from jobs.stages.publish import PublishRefused
from jobs.stages.validate import ValidationFailed
from support import browser
from support.paths import version
from support.records import ingested, recounted
from support.workloads import LAST


@pytest.mark.parametrize("engine", ["driver", "spark"])
def test_a_corrupted_feed_fails_validation_and_is_not_published(
    spark, built_copy, engine, monkeypatch
):
    """On the churn day, small enough for the driver, and on Spark (a day above
    ``DRIVER_ROWS``, here the bound lowered to 0: every suite judged from one query of its
    frame, the failed one run again on Great Expectations' engine)."""
    if engine == "spark":
        monkeypatch.setattr(validate, "DRIVER_ROWS", 0)
    ds = LAST
    folder = version(built_copy.warehouse, "feeds", "consumer_feed", ds)
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
    engines = dict(results["engines"])
    if engine == "spark":  # judged from one query per frame; the failed suite again with samples
        assert engines.pop("feeds.consumer_feed") == "spark"
        engine = "one-pass"
    assert set(engines.values()) == {engine}
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
    # the offline summary: every expectation of every suite with its outcome, the failed one
    # with its sample; Data Docs name the run after the day and carry no static/ copy
    quality = Path(built_copy.warehouse) / "quality" / f"ds={ds}"
    html = (quality / "summary.html").read_text()
    summary = browser.Page(html)
    assert summary.text["outcome"].startswith("validation FAILED")
    expected = sum(r["expectations"] for r in results["suites"].values())
    assert f"{expected} expectations, 1 failed" in summary.text["outcome"]
    rows = [r for n in results["suites"] for r in summary.rows(f"checks-{n}")[1:]]
    assert len(rows) == expected
    assert [r[0] for r in rows if r[2] == "FAILED"] == [failed["expectation"]]
    assert "http" not in html and "<script" not in html  # nothing to fetch
    pages = list((quality / "docs" / "validations").rglob("*.html"))
    assert pages and all(ds.isoformat() in p.parts for p in pages)
    assert not (quality / "docs" / "static").exists()
    assert "summary.html" in report.read_text()


def test_row_accounting_counts_what_was_written(spark, built_copy):
    """The accounting frame validate checks: rows accounted per landing table equal the rows
    in the written clean and quarantine files (counted here with pyarrow), so a row that ingest
    read and did not write shows up as a mismatch."""
    ds = LAST
    wh = Path(built_copy.warehouse)
    ingest = ingested(Storage.at(str(wh)), ds)

    def rows(layer: str, table: str) -> int:
        where = locate(Storage.at(str(wh)), f"{layer}/{table}", ds)
        return pads.dataset(str(wh.joinpath(*where))).count_rows() if where else 0

    expected = {}
    for table, c in ingest.tables.items():
        quarantined = rows("quarantine", table)
        clean = c.clean if table == "follows" else rows("clean", table)
        expected[table] = clean + quarantined
    assert set(expected) == {"events", "follows", "views"}
    assert expected["events"] > 0 and expected["views"] > 0

    # one row read and never written
    ingest = recounted(ingest, "events", rows_in=ingest.tables["events"].rows_in + 1)
    got = accounting_check(spark, Storage.at(str(wh)), ds, ingest).toPandas()
    got = got.set_index("table")
    assert got["rows_accounted"].to_dict() == expected
    mismatched = sorted(got.index[got["rows_in"] != got["rows_accounted"]])
    assert mismatched == ["events"]

    # ingest's per-day counts (what rates reads) sum to the clean rows; a lost count shows
    for table, name in (("events", "event_counts"), ("views", "view_counts")):
        counted = pc.sum(pads.dataset(str(version(wh, "clean", name, ds))).to_table()["n"])
        assert counted.as_py() == rows("clean", table) == got["clean_rows"][table]
        assert got["clean_counted"][table] == counted.as_py()
    assert got["clean_rows"].isna()["follows"] and got["clean_counted"].isna()["follows"]
    folder = version(wh, "clean", "view_counts", ds)
    whole = pads.dataset(str(folder)).to_table()
    for f in folder.glob("*.parquet"):
        f.unlink()
    pq.write_table(whole.slice(1), folder / "part-0.parquet")  # one consumer's count lost
    got = accounting_check(spark, Storage.at(str(wh)), ds, ingest).toPandas().set_index("table")
    got = got.drop(index="follows")  # no counts for the graph (NaN != NaN)
    assert sorted(got.index[got["clean_rows"] != got["clean_counted"]]) == ["views"]


def test_volume_and_follow_gates_fail_an_empty_delivery_unless_it_is_allowed(
    spark, built_copy, tmp_path
):
    """The churn days 1-4 published (their manifests hold their real ingest counts), then the
    last day re-delivered as header-only files: events and views at 0 rows against the median
    of four published days, and an empty follows snapshot that removes every edge. validate
    fails the day with each gate's figures on one line, publish refuses it and ``latest``
    stays. Run again with the real follows and ``accept_gates = volume``, the day is published
    with its volume gates accepted; with ``allow_empty = events,views`` they are off."""
    import dataclasses
    import shutil

    from jobs.common import ledger, versions
    from support.workloads import days

    wh = Storage.at(built_copy.warehouse)
    for d in days()[:-1]:
        ledger.mark_published(
            wh,
            d,
            Manifest(ds=d, input=ingested(wh, d).tables, versions=versions.working(wh, d).folders),
        )
    history = [ingested(wh, d).tables for d in days()[:-1]]
    landing = tmp_path / "landing"
    for table, header in (
        ("follows", "consumer_id,producer_id"),
        ("events", "event_id,producer_id,created_at"),
        ("views", "consumer_id,viewed_at"),
    ):
        folder = landing / table / f"ds={LAST}"
        folder.mkdir(parents=True)
        (folder / "part-0.csv").write_text(header + "\n")
    s = dataclasses.replace(built_copy, landing=str(landing))
    runner.run_stage("ingest", s, LAST, spark)
    with pytest.raises(ValidationFailed) as failed:
        runner.run_stage("validate", s, LAST, spark)
    message = str(failed.value)
    assert "\n" not in message
    for table in ("events", "views"):
        median = sorted(h[table].rows_in for h in history)
        expected = (median[1] + median[2]) / 2
        assert (
            f"volume gate: {table} has 0 rows on {LAST}, 0.00x the median {expected:,.0f} of "
            "the 4 previous published days (allowed 0.2x to 5x: volume_low, volume_high)"
        ) in message
    edges = ingested(wh, LAST).tables["follows"].edges_before
    graph = version(built_copy.warehouse, "clean", "follows", days()[-2])
    assert edges == pads.dataset(str(graph)).count_rows() > 0
    assert f"follow gate: 100.0% of the {edges:,.0f} follow edges were removed on {LAST}" in message
    results = json.loads(wh.read_text("quality", f"ds={LAST}", "results.json"))
    # nothing added: the additions gate, on after three days of changes, passes
    assert [g["passed"] for g in results["gates"]] == [False, False, False, True]
    assert not results["suites"]["ingest.gates"]["success"]
    report = Path(built_copy.warehouse) / "reports" / f"ds={LAST}" / "index.html"
    shown = browser.Page(report.read_text()).rows("quality-gates")[1:]
    assert [(r[0], r[1], r[-2]) for r in shown] == [
        ("volume", "events", "FAILED"),
        ("volume", "views", "FAILED"),
        ("follow_removed", "follows", "FAILED"),
        ("follow_added", "follows", "passed"),
    ]
    with pytest.raises(PublishRefused, match="failed validation"):
        runner.run_stage("publish", s, LAST, spark)
    assert ledger.latest(wh) == days()[-2]

    shutil.rmtree(landing / "follows")
    shutil.copytree(Path(built_copy.landing) / "follows", landing / "follows")
    # the same delivery (with the real follows) as a known anomaly: the volume gates accepted
    # for the day, the day validated in full and published, the acceptance in the manifest
    # and the report
    anomaly = dataclasses.replace(s, accept_gates=("volume",))
    for stage in ("ingest", "rates", "plan", "materialize", "validate", "publish"):
        runner.run_stage(stage, anomaly, LAST, spark)
    manifest = json.loads(wh.read_text(*ledger.manifest_parts(LAST)))
    volume = [g for g in manifest["quality"]["gates"] if g["gate"] == "volume"]
    assert [(g["table"], g["passed"], g["accepted"]) for g in volume] == [
        ("events", False, True),
        ("views", False, True),
    ]
    assert manifest["quality"]["accepted_gates"] == ["volume"]
    (follow,) = [g for g in manifest["quality"]["gates"] if g["gate"] == "follow_removed"]
    assert follow["passed"] is True and 0 < follow["observed"] < 0.2
    assert ledger.latest(wh) == LAST
    shown = browser.Page(report.read_text()).rows("quality-gates")[1:]
    assert [(r[0], r[1], r[-2]) for r in shown[:2]] == [
        ("volume", "events", "accepted"),
        ("volume", "views", "accepted"),
    ]
    assert f"accepted for {LAST}" in shown[0][-1]

    # run as a known outage instead, the volume gates are off (the gates are what validate
    # would check: the ingest record against the days before)
    outage = dataclasses.replace(s, allow_empty=("events", "views"))
    runner.run_stage("ingest", outage, LAST, spark)
    day_gates = policy.gates(outage, LAST, wh, ingested(wh, LAST))
    assert [(g.table, g.days, g.passed) for g in day_gates[:2]] == [
        ("events", 4, None),
        ("views", 4, None),
    ]
    assert "allow_empty" in day_gates[0].note

"""The day's records: one JSON round trip each, the keys the files hold, and manifests and
stage records written before a field existed still read (docs/storage.md, "The day's
records")."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from jobs.common import ledger
from jobs.common.records import (
    MANIFEST_FORMAT,
    RECORD_TYPES,
    CertificateRecord,
    GateResult,
    IngestRecord,
    LatencyTarget,
    Manifest,
    MaterializeRecord,
    PlanRecord,
    PublishedTable,
    Quality,
    RatesRecord,
    SuiteOutcome,
    TableAccount,
    TopicAccount,
    ValidateRecord,
    ValidationResults,
)
from jobs.common.storage import Storage

D = dt.date(2026, 3, 4)

INGEST = IngestRecord(
    inputs=["clean/events"],
    run="run=20260304T000000Z-abc",
    outputs={"clean/events": "run=20260304T000000Z-abc"},
    seconds=12.5,
    tables={
        "events": TableAccount(
            rows_in=10, clean=7, duplicates=1, quarantined=2, quarantine_reasons={"late": 2}
        ),
        "follows": TableAccount(
            rows_in=5,
            clean=5,
            snapshot=False,
            edges_before=100,
            edges=103,
            edges_added=4,
            edges_removed=1,
        ),
    },
    topics=TopicAccount(rows_in=3, clean=2, quarantined=1, snapshot=True, matches=9),
    allowed_empty=["views"],
)
GATE = GateResult(
    gate="volume",
    table="events",
    observed=10.0,
    reference=100.0,
    days=3,
    ratio=0.1,
    lower=0.2,
    upper=5.0,
    passed=False,
    accepted=True,
    note="accepted for 2026-03-04",
)
RECORDS = [
    INGEST,
    RatesRecord(
        window_start=D, window_days=7, method="ewma", flash_producers=1, flash_listed=["p1"]
    ),
    PlanRecord(
        strategy="ff-per-pair",
        forced=True,
        cheapest="cz-greedy",
        costs={"ff-per-pair": 10.5, "cz-greedy": 9.0},
        latency_target=LatencyTarget(metric="sources", bound=3, quantile=0.95),
        certificate=CertificateRecord(lower_bound=8.0, bound="overlap", gap=0.3125),
    ),
    MaterializeRecord(
        mode="incremental", reason="previous day's state present", feed_k=20, coherency="global"
    ),
    ValidateRecord(success=True, suites=23, docs="file:///wh/quality/ds=2026-03-04/docs"),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.stage)
def test_every_stage_record_round_trips_through_its_file(tmp_path, record):
    wh = Storage.at(str(tmp_path))
    ledger.write_record(wh, D, record)
    text = (tmp_path / "manifests" / f"ds={D}" / "stages" / f"{record.stage}.json").read_text()
    assert ledger.read_record(wh, D, record.stage) == record
    assert json.loads(text) == record.as_dict()
    assert RECORD_TYPES[record.stage] is type(record)


def test_the_files_keep_the_keys_readers_outside_feedpipe_use():
    """The ingest record's keys as docs/storage.md lists them (hand-written here)."""
    data = json.loads(INGEST.to_json())
    assert data["tables"]["events"] == {
        "rows_in": 10,
        "clean": 7,
        "duplicates": 1,
        "quarantined": 2,
        "quarantine_reasons": {"late": 2},
        "snapshot": None,
        "edges_before": None,
        "edges": None,
        "edges_added": None,
        "edges_removed": None,
    }
    assert data["topics"]["matches"] == 9 and data["allowed_empty"] == ["views"]
    assert data["outputs"] == {"clean/events": "run=20260304T000000Z-abc"}
    assert INGEST.tables["follows"].added_share == 0.04
    assert TableAccount(edges_added=3).added_share is None  # no graph the day before


def test_a_gates_holds_is_false_only_for_a_failed_gate_not_accepted():
    assert GATE.holds
    assert not GATE.model_copy(update={"accepted": False}).holds
    assert GATE.model_copy(update={"accepted": False, "passed": None}).holds  # off
    assert GATE.model_copy(update={"accepted": False, "passed": True}).holds


def test_the_gate_frame_columns_are_the_gate_fields():
    from jobs.stages.checks import GATE_FIELDS

    assert GATE_FIELDS == (*GateResult.model_fields, "holds")


def test_a_manifest_round_trips_with_typed_stage_records():
    results = ValidationResults(
        ds=D,
        success=True,
        suites={"clean.events": SuiteOutcome(success=True, expectations=4)},
        gates=[GATE],
    )
    manifest = Manifest(
        format=MANIFEST_FORMAT,
        ds=D,
        input=INGEST.tables,
        topics=INGEST.topics,
        tables={"clean/events": PublishedTable(rows=7, location="file:///x", path="x")},
        versions={"clean/events": "run=1"},
        stages={r.stage: r for r in RECORDS},
        quality=Quality(
            success=True, suites=1, gates=[GATE], accepted_gates=["volume"], results=results
        ),
    )
    back = Manifest.from_json(manifest.to_json())
    assert back == manifest
    assert isinstance(back.stages["plan"], PlanRecord)
    assert back.stages["plan"].certificate.lower_bound == 8.0  # type: ignore[union-attr]
    assert json.loads(manifest.to_json())["format"] == MANIFEST_FORMAT == 2


def test_a_manifest_written_before_the_format_was_recorded_still_reads(tmp_path):
    """A format-1 manifest as an earlier release wrote it: no ``format``, a plan record without
    ``latency_target`` or ``sources_hist``, a materialize record without the coherency
    fields, gates as plain objects, and a key no longer written."""
    old = {
        "ds": str(D),
        "settings": {"feed_k": 20},
        "input": {
            "events": {
                "rows_in": 10,
                "clean": 9,
                "duplicates": 0,
                "quarantined": 1,
                "quarantine_reasons": {"late": 1},
            }
        },
        "quarantine_rows": {"events": 1},
        "tables": {"clean/events": {"rows": 9, "location": "file:///x", "path": "x"}},
        "versions": {"clean/events": "run=1"},
        "plan": {"served": "push-all", "strategies": [{"strategy": "push-all", "chosen": True}]},
        "stages": {
            "ingest": {"tables": {"events": {"rows_in": 10}}, "outputs": {}, "seconds": 1.0},
            "plan": {
                "strategy": "push-all",
                "forced": False,
                "costs": {"push-all": 1.0},
                "outputs": {"plan/edge_plan": "run=1"},
            },
            "materialize": {"mode": "full", "reason": "first day", "feed_k": 20},
        },
        "quality": {
            "success": True,
            "suites": 1,
            "gates": [
                {
                    "gate": "volume",
                    "table": "events",
                    "observed": 10.0,
                    "reference": None,
                    "days": 0,
                    "ratio": None,
                    "lower": 0.2,
                    "upper": 5.0,
                    "passed": None,
                    "note": "off",
                }
            ],
        },
        "row_counts": {"events": 10},
    }
    wh = Storage.at(str(tmp_path))
    wh.write_text(json.dumps(old), *ledger.manifest_parts(D))
    manifest = ledger.read_manifest(wh, D)
    assert manifest is not None and manifest.format == 1 and manifest.ds == D
    assert manifest.input["events"].quarantine_reasons == {"late": 1}
    assert manifest.topics == TopicAccount() and manifest.allowed_empty == []
    plan = manifest.stages["plan"]
    assert isinstance(plan, PlanRecord) and plan.latency_target is None
    assert plan.outputs == {"plan/edge_plan": "run=1"}
    materialize = manifest.stages["materialize"]
    assert isinstance(materialize, MaterializeRecord)
    assert (materialize.k_per_producer, materialize.window_hours) == (3, 24.0)
    (gate,) = manifest.quality.gates
    assert gate.passed is None and gate.accepted is False and gate.holds
    assert manifest.quality.accepted_gates == [] and manifest.quality.results is None
    assert manifest.published is None


def test_records_are_frozen():
    with pytest.raises(Exception, match="frozen"):
        INGEST.tables["events"].rows_in = 11  # type: ignore[misc]

"""Ingest on hand-written landing files: every format, messy ids, bad rows, accounting."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.common import ledger, versions
from jobs.common.config import Settings
from jobs.common.records import IngestRecord
from jobs.common.storage import Storage
from jobs.common.tables import ContractError, contract, has_partition, read_partition
from jobs.stages import ingest
from jobs.stages.landing_files import landing_errors
from jobs.stages.rules import IngestRejected
from support.once import private_copy

D1, D2 = dt.date(2026, 3, 1), dt.date(2026, 3, 2)
ODD = 'o"neil, jr.'  # a quote and a comma inside an id
UNI = "zoë-🦉"


def ingest_day(spark, settings, ds: dt.date) -> dict:
    """Ingest one day as the runner does (its record names the run's folders), without the
    readiness check: these days land only the tables a test is about."""
    wh = Storage.at(settings.warehouse)
    ledger.withdraw(wh, ds, "ingest")
    with versions.stage_run(ds) as run:
        result = ingest.run(spark, settings, ds, wh)
    ledger.write_record(wh, ds, result.model_copy(update={"outputs": dict(run.outputs)}))
    return result.as_dict()  # as the record's file holds it


def ingest_one(spark, settings, ds: dt.date, table: str) -> dict:
    """One landing table's ingest (``ingest.ingest_table``, as the stage runs it for each),
    recorded as the day's ingest; returns the table's row accounting."""
    wh = Storage.at(settings.warehouse)
    ledger.withdraw(wh, ds, "ingest")
    with versions.stage_run(ds) as run, landing_errors():
        counts, _ = ingest.ingest_table(
            spark, settings, ds, wh, Storage.at(settings.landing), table
        )
    ledger.write_record(wh, ds, IngestRecord(tables={table: counts}, outputs=dict(run.outputs)))
    return counts.as_dict()


def put(root: Path, table: str, ds: dt.date, name: str, content: str | bytes) -> Path:
    folder = root / table / f"ds={ds}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(gzip.compress(content) if name.endswith(".gz") else content)
    return path


def csv_line(*values: str) -> str:
    return ",".join('"' + v.replace('"', '""') + '"' for v in values) + "\n"


def day1_settings(root: Path) -> Settings:
    return Settings(
        landing=str(root / "landing"),
        warehouse=str(root / "warehouse"),
        shuffle_partitions=4,
        max_quarantine_share=1.0,  # these files are mostly bad on purpose
    )


@pytest.fixture(scope="module")
def ingested_day1(spark, tmp_path_factory) -> tuple[Settings, dict]:
    """Day one's landing files (:func:`land_day1`) ingested once for the module: the settings
    and the ingest's result. Read them only; a test that writes works on :func:`day1`."""
    s = day1_settings(tmp_path_factory.mktemp("day1"))
    land_day1(Path(s.landing))
    return s, ingest_day(spark, s, D1)


@pytest.fixture
def day1(ingested_day1, tmp_path) -> Settings:
    """A private copy of the landing and the warehouse after day one's ingest."""
    s, _ = ingested_day1
    private_copy(s.landing, tmp_path / "landing")
    private_copy(s.warehouse, tmp_path / "warehouse")
    return day1_settings(tmp_path)


def land_day1(root: Path) -> None:
    put(
        root,
        "follows",
        D1,
        "snapshot.csv",
        "consumer_id,producer_id,ts\n"
        + csv_line("alice", ODD, "2026-02-01T00:00:00Z")
        + csv_line("alice", UNI, "1767225600")
        + csv_line(UNI, "alice", "2026-02-03 10:00:00")
        + csv_line("bob", "bob", "2026-02-01T00:00:00Z")  # self-follow
        + csv_line("", "alice", "2026-02-01T00:00:00Z")  # null key
        + csv_line("alice", ODD, "2026-02-05T00:00:00Z"),  # repeated edge in a snapshot
    )
    events = [
        {
            "event_id": "e1",
            "producer_id": ODD,
            "created_at": "2026-03-01T08:00:00Z",
            "payload": "hi",
        },
        {"event_id": "e2", "producer_id": UNI, "created_at": 1772352000},  # epoch, 2026-03-01 08:00
        {
            "event_id": "e3",
            "producer_id": "alice",
            "created_at": "2026-02-27T23:00:00+01:00",
        },  # late
        {"event_id": "e1", "producer_id": ODD, "created_at": "2026-03-01T08:00:00Z"},  # duplicate
        {"event_id": "e4", "producer_id": "alice", "created_at": "2026-03-02T00:00:00Z"},  # future
        {"event_id": "e5", "producer_id": "alice", "created_at": "yesterday"},  # bad timestamp
        {"event_id": "e6", "producer_id": None, "created_at": "2026-03-01T09:00:00Z"},  # null key
        {
            "event_id": "e7",
            "producer_id": "alice",
            "created_at": "2025-01-01T00:00:00Z",
        },  # too late
    ]
    put(
        root,
        "events",
        D1,
        "part-1.jsonl.gz",
        "".join(json.dumps(e) + "\n" for e in events) + "{not json\n",
    )
    pq.write_table(
        pa.table(
            {
                "producer_id": ["alice"],
                "event_id": ["e8"],
                "created_at": pa.array(
                    [dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")
                ),
                "attributes": pa.array(
                    [[("topic", "x"), ("lang", "fr")]], pa.map_(pa.string(), pa.string())
                ),
            }
        ),
        put(root, "events", D1, "more.parquet", b""),
    )
    put(
        root,
        "views",
        D1,
        "v.csv",
        "consumer_id,viewed_at\n" + csv_line("alice", "2026-03-01T10:00:00Z") * 2,
    )
    put(root, "views", D1, "empty.csv", "consumer_id,viewed_at\n")  # header only


def counts(stats, table):
    c = stats["tables"][table]
    return c["rows_in"], c["clean"], c["duplicates"], c["quarantined"]


def test_day_one_every_row_accounted_for(spark, ingested_day1):
    s, stats = ingested_day1
    wh = Storage.at(s.warehouse)
    # follows: 6 rows = 3 clean + 1 repeated edge + self-follow + null key
    assert counts(stats, "follows") == (6, 3, 1, 2)
    assert stats["tables"]["follows"]["quarantine_reasons"] == {"null_key": 1, "self_follow": 1}
    # events: 9 JSON lines + 1 Parquet row = 4 clean (e1, e2, e3 late but within bounds, e8)
    # + 1 duplicate + 5 quarantined (future, bad ts, null key, too late, unparseable line)
    assert counts(stats, "events") == (10, 4, 1, 5)
    assert stats["tables"]["events"]["quarantine_reasons"] == {
        "bad_timestamp": 1,
        "future_timestamp": 1,
        "null_key": 1,
        "too_late": 1,
        "unparseable_row": 1,
    }
    assert counts(stats, "views") == (2, 2, 0, 0)  # views have no key: both retrievals count

    graph = {
        (r.consumer_id, r.producer_id): r.followed_at
        for r in read_partition(spark, wh, contract("clean", "follows"), D1).collect()
    }
    assert set(graph) == {("alice", ODD), ("alice", UNI), (UNI, "alice")}
    assert graph[("alice", ODD)] == dt.datetime(2026, 2, 1)  # the earliest row of a repeated edge
    assert graph[("alice", UNI)] == dt.datetime(2026, 1, 1)  # epoch seconds 1767225600

    events = {
        r.event_id: r for r in read_partition(spark, wh, contract("clean", "events"), D1).collect()
    }
    assert set(events) == {"e1", "e2", "e3", "e8"}
    assert events["e2"].created_at == dt.datetime(2026, 3, 1, 8)
    assert events["e3"].created_at == dt.datetime(2026, 2, 27, 22)  # +01:00 converted to UTC
    assert events["e1"].producer_id == ODD and events["e1"].payload == "hi"
    # a Parquet map is kept as a map; an event without attributes has none
    assert dict(events["e8"].attributes) == {"topic": "x", "lang": "fr"}
    assert events["e1"].attributes is None
    # the per-day counts the rates stage reads (the duplicate e1 and quarantined rows excluded)
    per_producer = read_partition(spark, wh, contract("clean", "event_counts"), D1).collect()
    assert {(r.producer_id, r.n) for r in per_producer} == {(ODD, 1), (UNI, 1), ("alice", 2)}
    per_consumer = read_partition(spark, wh, contract("clean", "view_counts"), D1).collect()
    assert [(r.consumer_id, r.n) for r in per_consumer] == [("alice", 2)]

    q = read_partition(spark, wh, contract("quarantine", "rows"), D1, table="events").collect()
    by_reason = {r.reason: r for r in q}
    assert by_reason["unparseable_row"].raw == "{not json"
    assert by_reason["future_timestamp"].source_file.endswith("part-1.jsonl.gz")
    assert '"e4"' in by_reason["future_timestamp"].raw


def test_change_log_applies_to_the_previous_graph(spark, day1):
    put(
        Path(day1.landing),
        "follows",
        D2,
        "changes.jsonl",
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {
                    "consumer_id": "alice",
                    "producer_id": ODD,
                    "ts": "2026-03-02T01:00:00Z",
                    "op": "unfollow",
                },
                {
                    "consumer_id": "carol",
                    "producer_id": "alice",
                    "ts": "2026-03-02T02:00:00Z",
                    "op": "follow",
                },
                {
                    "consumer_id": "carol",
                    "producer_id": "alice",
                    "ts": "2026-03-02T03:00:00Z",
                    "op": "follow",
                },
                {
                    "consumer_id": "carol",
                    "producer_id": UNI,
                    "ts": "2026-03-02T04:00:00Z",
                    "op": "follow",
                },
                {
                    "consumer_id": "carol",
                    "producer_id": UNI,
                    "ts": "2026-03-02T05:00:00Z",
                    "op": "unfollow",
                },
                {
                    "consumer_id": "dave",
                    "producer_id": UNI,
                    "ts": "2026-03-02T06:00:00Z",
                    "op": "FOLLOW",
                },
                {
                    "consumer_id": "dave",
                    "producer_id": "x",
                    "ts": "2026-03-02T06:00:00Z",
                    "op": "like",
                },
                {"consumer_id": "dave", "producer_id": "y", "op": "follow"},
            ]
        ),
    )
    stats = ingest_day(spark, day1, D2)
    # 8 rows: 4 winning changes, 2 superseded (repeated follow; follow then unfollow),
    # 2 quarantined (unknown op, change without timestamp)
    assert counts(stats, "follows") == (8, 4, 2, 2)
    assert stats["tables"]["follows"]["quarantine_reasons"] == {"bad_op": 1, "missing_timestamp": 1}
    wh = Storage.at(day1.warehouse)
    graph = {
        (r.consumer_id, r.producer_id): r.followed_at
        for r in read_partition(spark, wh, contract("clean", "follows"), D2).collect()
    }
    assert set(graph) == {("alice", UNI), (UNI, "alice"), ("carol", "alice"), ("dave", UNI)}
    assert graph[("carol", "alice")] == dt.datetime(2026, 3, 2, 3)  # the last change wins
    assert graph[("alice", UNI)] == dt.datetime(2026, 1, 1)  # untouched edges keep their time
    # no events or views landed on D2: empty, but present, partitions
    assert read_partition(spark, wh, contract("clean", "events"), D2).count() == 0


def test_rerun_gives_the_same_rows(spark, ingested_day1, day1):
    first = sorted(
        read_partition(
            spark, Storage.at(ingested_day1[0].warehouse), contract("clean", "events"), D1
        ).collect()
    )
    ingest_day(spark, day1, D1)
    wh = Storage.at(day1.warehouse)
    assert sorted(read_partition(spark, wh, contract("clean", "events"), D1).collect()) == first
    assert len(list((Path(day1.warehouse) / "clean" / "events").iterdir())) == 1  # one partition


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.xml", "<x/>", "unknown file format"),
        ("a.csv", "consumer_id,when\nu,2026-03-01\n", "missing required column"),
        ("a.csv.gz", None, "cannot be decompressed"),
        ("a.csv.bz2", "x", "unsupported compression"),
        ("a.parquet", "not parquet", "not a readable Parquet file"),
    ],
)
def test_bad_files_fail_with_the_file_and_the_problem(spark, make_settings, name, content, message):
    s = make_settings()
    folder = Path(s.landing) / "views" / f"ds={D1}"
    folder.mkdir(parents=True)
    (folder / name).write_bytes(b"\x1f\x8b\x08garbage" if content is None else content.encode())
    with pytest.raises(ContractError, match=message) as err:
        ingest_one(spark, s, D1, "views")
    assert name in str(err.value)


def test_a_resent_late_event_is_a_duplicate_across_days(spark, day1):
    resent = [
        {"event_id": "e1", "producer_id": ODD, "created_at": "2026-03-01T08:00:00Z"},  # seen on D1
        {"event_id": "e9", "producer_id": ODD, "created_at": "2026-03-01T09:00:00Z"},  # new, late
        {"event_id": "e10", "producer_id": ODD, "created_at": "2026-03-02T09:00:00Z"},
    ]
    put(Path(day1.landing), "events", D2, "e.jsonl", "".join(json.dumps(e) + "\n" for e in resent))
    stats = ingest_day(spark, day1, D2)
    assert counts(stats, "events") == (3, 2, 1, 0)
    wh = Storage.at(day1.warehouse)
    q = read_partition(spark, wh, contract("quarantine", "rows"), D2, table="events").collect()
    assert [(r.reason, r.detail) for r in q] == [("duplicate", f"ingested on {D1}")]
    clean = {
        r.event_id for r in read_partition(spark, wh, contract("clean", "events"), D2).collect()
    }
    assert clean == {"e9", "e10"}


def test_too_many_bad_rows_hold_the_table_back(spark, make_settings):
    s = make_settings(max_quarantine_share=0.25)
    rows = csv_line("a", "2026-03-01T10:00:00Z") + csv_line("b", "not a time") * 2
    put(Path(s.landing), "views", D1, "v.csv", "consumer_id,viewed_at\n" + rows)
    wh = Storage.at(s.warehouse)
    with (
        versions.stage_run(D1),
        pytest.raises(
            IngestRejected, match=r"views: 2 of 3 rows \(66.7%\).*bad_timestamp 2"
        ) as rejected,
    ):
        ingest.run(spark, s, D1, wh)
    # the message names the rejected run's quarantine folder, which holds the two rows
    where = re.search(r"the rows are in (\S+) and no clean data", str(rejected.value)).group(1)
    assert where.startswith(f"{s.warehouse}/quarantine/views/ds={D1}/run=")
    assert pq.read_table(where).num_rows == 2
    # and the day has no version of its tables: ingest did not finish
    assert not has_partition(wh, contract("clean", "views"), D1)
    assert not has_partition(wh, contract("quarantine", "rows"), D1, "views")


LONG_ID = "x" * 10_000
ATTRS_TEXT = '{"region": "eu", "lang": "en", "region": "us", "\u00e9": "\u00fc"}'
ATTRS = {"region": "us", "lang": "en", "\u00e9": "\u00fc"}  # the last value of a repeated key
HOSTILE = [
    # (name, table, file name, content, expected (clean, quarantine reasons) or error text)
    (
        "embedded newline and quotes",
        "events",
        "a.csv",
        'event_id,producer_id,created_at,payload\ne1,p,2026-03-01T01:00:00Z,"one\ntwo ""2"""\n',
        (1, {}),
    ),
    (
        "very long id",
        "events",
        "a.jsonl",
        json.dumps({"event_id": "e1", "producer_id": LONG_ID, "created_at": "2026-03-01T01:00:00Z"})
        + "\n",
        (1, {}),
    ),
    ("0-byte csv", "views", "a.csv", "", (0, {})),
    ("0-byte jsonl", "views", "a.jsonl", "", (0, {})),
    (
        "negative epoch",
        "events",
        "a.jsonl",
        json.dumps({"event_id": "e1", "producer_id": "p", "created_at": -86400}) + "\n",
        (0, {"too_late": 1}),
    ),
    (
        "numbers as ids",
        "events",
        "a.jsonl",
        json.dumps({"event_id": 17, "producer_id": 42, "created_at": "2026-03-01T01:00:00Z"})
        + "\n",
        (1, {}),
    ),
    (
        "boolean timestamp",
        "events",
        "a.jsonl",
        json.dumps({"event_id": "e1", "producer_id": "p", "created_at": True}) + "\n",
        (0, {"bad_timestamp": 1}),
    ),
    (
        "extra csv values",
        "views",
        "a.csv",
        "consumer_id,viewed_at\nc1,2026-03-01T01:00:00Z,x\n",
        (0, {"unparseable_row": 1}),
    ),
    ("short csv row", "views", "a.csv", "consumer_id,viewed_at\nc1\n", (0, {"unparseable_row": 1})),
    (
        "byte order mark",
        "views",
        "a.csv",
        "\ufeffconsumer_id,viewed_at\nc1,2026-03-01T01:00:00Z\n",
        (1, {}),
    ),
    (
        "blank id",
        "views",
        "a.csv",
        "consumer_id,viewed_at\n   ,2026-03-01T01:00:00Z\n",
        (0, {"null_key": 1}),
    ),
    (
        "year 1",
        "views",
        "a.csv",
        "consumer_id,viewed_at\nc1,0001-01-01T00:00:00Z\n",
        (0, {"too_late": 1}),
    ),
    (
        "wrong delimiter",
        "events",
        "a.csv",
        "event_id;producer_id;created_at\ne1;p;2026-03-01\n",
        "missing required column",
    ),
    ("truncated gzip", "events", "a.jsonl.gz", None, "cannot be read"),
    (
        "attributes in csv, a key repeated",
        "events",
        "a.csv",
        "event_id,producer_id,created_at,attributes\n"
        + csv_line("e1", "p", "2026-03-01T01:00:00Z", ATTRS_TEXT),
        (1, {}),
    ),
    (
        "attributes as a json object",
        "events",
        "a.jsonl",
        json.dumps(
            {
                "event_id": "e1",
                "producer_id": "p",
                "created_at": "2026-03-01T01:00:00Z",
                "attributes": {"region": "us", "é": 'ü\n"q"'},
            }
        )
        + "\n",
        (1, {}),
    ),
    (
        "attributes not an object",
        "events",
        "a.jsonl",
        "".join(
            json.dumps(
                {"event_id": f"e{i}", "producer_id": "p", "created_at": 1772326800, "attributes": a}
            )
            + "\n"
            for i, a in enumerate([[1, 2], "text", 7])
        ),
        (0, {"attributes_not_object": 3}),
    ),
    (
        "attributes not json",
        "events",
        "a.csv",
        "event_id,producer_id,created_at,attributes\n"
        + csv_line("e1", "p", "2026-03-01T01:00:00Z", "{region: eu}"),
        (0, {"attributes_not_object": 1}),
    ),
    (
        "attribute values not strings",
        "events",
        "a.jsonl",
        "".join(
            json.dumps(
                {
                    "event_id": f"e{i}",
                    "producer_id": "p",
                    "created_at": 1772326800,
                    "attributes": {"region": "eu", "x": v},
                }
            )
            + "\n"
            for i, v in enumerate([3, 2.5, True, None, {"a": "b"}, ["a"]])
        ),
        (0, {"attributes_not_strings": 6}),
    ),
    (
        "attributes too large",
        "events",
        "a.jsonl",
        json.dumps(
            {
                "event_id": "e1",
                "producer_id": "p",
                "created_at": 1772326800,
                "attributes": {"a": "x" * 5000},
            }
        )
        + "\n",
        (0, {"attributes_too_large": 1}),
    ),
]


@pytest.mark.parametrize(
    ("name", "table", "fname", "content", "expected"), HOSTILE, ids=[h[0] for h in HOSTILE]
)
def test_hostile_inputs(spark, make_settings, name, table, fname, content, expected):
    s = make_settings(max_quarantine_share=1.0)
    if content is None:  # a gzip stream cut in half
        whole = gzip.compress(
            b'{"event_id": "e1", "producer_id": "p", "created_at": "2026-03-01T01:00:00Z"}\n' * 2000
        )
        put(Path(s.landing), table, D1, fname, b"")
        (Path(s.landing) / table / f"ds={D1}" / fname).write_bytes(whole[: len(whole) // 2])
    else:
        put(Path(s.landing), table, D1, fname, content)
    if isinstance(expected, str):
        with pytest.raises(ContractError, match=expected) as err:
            ingest_one(spark, s, D1, table)
        assert fname in str(err.value)
        return
    stats = ingest_one(spark, s, D1, table)
    clean, reasons = expected
    assert (stats["clean"], stats["quarantine_reasons"]) == (clean, reasons)
    assert stats["rows_in"] == stats["clean"] + stats["duplicates"] + stats["quarantined"]
    if name == "embedded newline and quotes":
        wh = Storage.at(s.warehouse)
        row = read_partition(spark, wh, contract("clean", "events"), D1).first()
        assert row.payload == 'one\ntwo "2"'
    if name.startswith("attributes in csv") or name == "attributes as a json object":
        wh = Storage.at(s.warehouse)
        row = read_partition(spark, wh, contract("clean", "events"), D1).first()
        expected_attrs = ATTRS if "csv" in name else {"region": "us", "\u00e9": '\u00fc\n"q"'}
        assert dict(row.attributes) == expected_attrs
    if name == "very long id":
        wh = Storage.at(s.warehouse)
        assert (
            read_partition(spark, wh, contract("clean", "events"), D1).first().producer_id
            == LONG_ID
        )

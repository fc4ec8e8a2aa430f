"""The serving side: ``feedpipe feed``'s JSON shapes on a built warehouse (the reader itself is
checked against the naive answer by the stage tests), and payloads with ``--with-payload``,
from the built days and from hand-made edge cases that must survive byte for byte."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.serving.reader import FeedReader
from jobs.stages import runner
from support import naive
from support.workloads import LAST, START, K


def test_feed_command_line_json_shapes(churn_landing, built, tmp_path):
    ds = LAST
    expected = naive.feeds(churn_landing, ds, START, K)
    some = sorted(expected)[:5]
    base = [
        sys.executable,
        "-m",
        "jobs",
        "feed",
        "--ds",
        str(ds),
        "--warehouse",
        built.warehouse,
    ]
    # the built days are not published: refused in one line, read with --unpublished
    refused = subprocess.run([*base, "--consumer", some[0]], capture_output=True, text=True)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.strip().splitlines()[-1] == (
        f"feedpipe: error: {ds} has not been published in {built.warehouse} "
        "(feedpipe feed --unpublished reads its latest complete run)"
    )
    base.append("--unpublished")
    one = subprocess.run(
        [*base, "--consumer", some[0], "--format", "json"], capture_output=True, text=True
    )
    assert one.returncode == 0, one.stderr
    items = json.loads(one.stdout)
    assert [i["event_id"] for i in items] == expected[some[0]]
    assert all(set(i) == {"event_id", "producer_id", "created_at"} for i in items)
    assert all(i["created_at"].endswith("Z") for i in items)
    # ids as files hold them: surrounding spaces, CRLF, blank lines; one is no consumer
    ids = tmp_path / "ids.txt"
    ids.write_text(f"  {some[0]}\t\n\n{some[1]}\r\n u-nobody \n" + "\n".join(some[2:]) + "\n")
    asked = [*some[:2], "u-nobody", *some[2:]]
    many = subprocess.run(
        [*base, "--consumers", str(ids), "--k", "3"], capture_output=True, text=True
    )
    assert many.returncode == 0, many.stderr
    lines = [json.loads(line) for line in many.stdout.splitlines()]
    assert [line["consumer_id"] for line in lines] == asked
    assert all(
        [i["event_id"] for i in line["feed"]] == expected.get(line["consumer_id"], [])[:3]
        for line in lines
    )
    assert many.stderr.splitlines() == [
        f"feedpipe: warning: reading the latest complete run of {ds}, not its published version",
        f"feedpipe: 1 of 6 ids are not consumers on {ds}: u-nobody",
    ]
    # --format table: one table per consumer, under a heading naming it
    tables = subprocess.run(
        [*base, "--consumers", str(ids), "--k", "3", "--format", "table"],
        capture_output=True,
        text=True,
    )
    assert tables.returncode == 0, tables.stderr
    blocks = [b.splitlines() for b in tables.stdout.strip().split("\n\n")]
    assert [b[0] for b in blocks] == [
        f"feed of {c} ({len(expected.get(c, [])[:3])} events)" for c in asked
    ]
    assert [[ln.split()[-1] for ln in b[2:]] for b in blocks] == [
        expected.get(c, [])[:3] for c in asked
    ]


def test_reports_and_feeds_refuse_in_one_line_what_cannot_be_answered(built, tmp_path):
    """A day that is not published (the built days are not) is refused by `report`, text or
    HTML, unless --unpublished; a k below 1, a folder of ids and a warehouse that does not
    exist are refused by `feed`."""
    wh = built.warehouse
    report = [sys.executable, "-m", "jobs", "report", "--warehouse", wh, "--ds", str(LAST)]
    for form in ([], ["--html"]):
        refused = subprocess.run([*report, *form], capture_output=True, text=True)
        assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr
        assert refused.stderr == (
            f"feedpipe: error: {LAST} is not published in {wh}; published days: none "
            "(--unpublished reports its latest complete run)\n"
        )
    debug = subprocess.run([*report, "--unpublished"], capture_output=True, text=True)
    assert debug.returncode == 0, debug.stderr
    assert (
        debug.stdout.startswith(f"feedpipe plan cost for {LAST}")
        and "NOT published" in debug.stdout
    )

    feed = [sys.executable, "-m", "jobs", "feed", "--warehouse", wh, "--ds", str(LAST)]
    usage = "see 'feedpipe feed --help'"
    cases = {
        ("--consumer", "u1", "--k", "0"): (2, ["argument --k: k must be >= 1, not 0", usage]),
        ("--consumer", "u1", "--k", "-3"): (2, ["argument --k: k must be >= 1, not -3", usage]),
        ("--consumers", str(tmp_path)): (
            1,
            [f"cannot read the consumer ids in {tmp_path}: Is a directory"],
        ),
    }
    for args, (code, lines) in cases.items():
        got = subprocess.run([*feed, "--unpublished", *args], capture_output=True, text=True)
        prefix = "feedpipe feed: error: " if code == 2 else "feedpipe: error: "
        assert (got.returncode, got.stdout) == (code, "")
        assert got.stderr.splitlines() == [prefix + lines[0], *lines[1:]]
    nowhere = tmp_path / "nowhere"
    missing = subprocess.run(
        [sys.executable, "-m", "jobs", "feed", "--warehouse", str(nowhere), "--consumer", "u1"],
        capture_output=True,
        text=True,
    )
    assert (missing.returncode, missing.stderr) == (
        1,
        f"feedpipe: error: no warehouse at {nowhere}: the folder does not exist\n",
    )


def test_with_payload_adds_each_events_stored_payload(churn_landing, built):
    """The built days' payloads, looked up in the event store, equal the landed ones."""
    expected = naive.feeds(churn_landing, LAST, START, K)
    store = naive.store(churn_landing, LAST, START, K)
    some = sorted(expected)[:20]
    got = FeedReader(built.warehouse, LAST, unpublished=True).feeds(some, K, with_payload=True)
    items = [it for c in some for it in got[c]]
    assert items and [[it.event_id for it in got[c]] for c in some] == [expected[c] for c in some]
    assert [it.content.payload for it in items] == [store[it.event_id][1] for it in items]
    assert all(it.content.attributes == {} for it in items)  # the generator sets none


# Hand-made edge cases: they must come back from `feed --with-payload` byte for byte.
D = dt.date(2026, 5, 1)
ODD = 'o"neil, jr.'
EDGE_EVENTS = [
    # (event_id, producer_id, hour, payload, attributes JSON text or None)
    ("e-newline", ODD, 1, 'line one\nline "two",\r\nthree\ttabbed \\ back', None),
    ('id, with "quotes"', ODD, 2, "zoë 🦉 ünïcödé — ✓", '{"lang": "fr", "lang": "de"}'),
    ("e-empty", "plain", 3, "", '{"region": "eu", "é": "ü\\nx"}'),
    ("e-none", "plain", 4, None, "{}"),
    ("e-spaces", "plain", 5, "  padded  ", None),
]


def edge_landing(root: Path) -> None:
    """The events above in CSV (the quoted fields RFC 4180 allows), one event with a payload
    in JSON Lines and one in Parquet with a map of attributes; everyone follows both
    producers."""

    def csv_field(v: str | None) -> str:
        return "" if v is None else '"' + v.replace('"', '""') + '"'

    events = root / "events" / f"ds={D}"
    events.mkdir(parents=True)
    lines = ["event_id,producer_id,created_at,payload,attributes"]
    for eid, producer, hour, payload, attrs in EDGE_EVENTS:
        at = f"{D}T{hour:02d}:00:00Z"
        lines.append(
            ",".join(
                [csv_field(eid), csv_field(producer), at, csv_field(payload), csv_field(attrs)]
            )
        )
    (events / "a.csv").write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    json_event = {
        "event_id": "e-json",
        "producer_id": "plain",
        "created_at": f"{D}T06:00:00Z",
        "payload": '{"nested": "json \\" text"}\n',
        "attributes": {"tag": "x,y", "quote": '"'},
    }
    (events / "b.jsonl").write_text(json.dumps(json_event) + "\n", encoding="utf-8")
    pq.write_table(
        pa.table(
            {
                "event_id": ["e-parquet"],
                "producer_id": [ODD],
                "created_at": pa.array(
                    [dt.datetime(2026, 5, 1, 7, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")
                ),
                "payload": ["\x00 nul and \u2028 separator"],
                "attributes": pa.array([[("k", "v")]], pa.map_(pa.string(), pa.string())),
            }
        ),
        events / "c.parquet",
    )
    follows = root / "follows" / f"ds={D}"
    follows.mkdir(parents=True)
    rows = [
        f"{csv_field(c)},{csv_field(p)},{D}T00:00:00Z" for c in ("u1", "u2") for p in (ODD, "plain")
    ]
    (follows / "f.csv").write_text("consumer_id,producer_id,ts\n" + "\n".join(rows) + "\n")
    views = root / "views" / f"ds={D}"
    views.mkdir(parents=True)
    (views / "v.csv").write_text(f"consumer_id,viewed_at\nu1,{D}T08:00:00Z\n")


def test_payloads_and_ids_survive_from_landing_to_with_payload_byte_for_byte(
    spark, make_settings, tmp_path
):
    # payloads do not depend on the plan: FF-PerPair alone is computed
    s = make_settings(strategy="ff-per-pair", strategies=("ff-per-pair",))
    edge_landing(Path(s.landing))
    runner.run_day(s, D, spark)
    expected = {
        eid: (producer, payload or None, json.loads(attrs, object_pairs_hook=dict) if attrs else {})
        for eid, producer, _, payload, attrs in EDGE_EVENTS
    }
    expected["e-json"] = ("plain", '{"nested": "json \\" text"}\n', {"tag": "x,y", "quote": '"'})
    expected["e-parquet"] = (ODD, "\x00 nul and \u2028 separator", {"k": "v"})
    cmd = [sys.executable, "-m", "jobs", "feed", "--warehouse", s.warehouse, "--ds", str(D)]
    out = subprocess.run(
        [*cmd, "--consumer", "u1", "--format", "json", "--with-payload"],
        capture_output=True,
        text=True,
        encoding="utf-8",
    )
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)
    got = {i["event_id"]: (i["producer_id"], i["payload"], i["attributes"]) for i in items}
    assert got == expected
    # newest first, as without payloads
    assert [i["event_id"] for i in items] == [
        "e-parquet",
        "e-json",
        "e-spaces",
        "e-none",
        "e-empty",
        'id, with "quotes"',
        "e-newline",
    ]
    # the table format: one line per event, newlines escaped, a missing payload as "-"
    table = subprocess.run(
        [*cmd, "--consumer", "u1", "--with-payload"], capture_output=True, encoding="utf-8"
    )
    assert table.returncode == 0, table.stderr
    body = table.stdout.splitlines()[2:]
    assert len(body) == len(EDGE_EVENTS) + 2
    assert body[-1].endswith('line one\\nline "two",\\r\\nthree\\ttabbed \\\\ back')
    assert body[3].endswith("{}  -")  # e-none
    assert body[0].endswith("\\u0000 nul and \\u2028 separator")  # e-parquet

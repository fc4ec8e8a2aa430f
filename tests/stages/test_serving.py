"""The serving side on a built warehouse: ``feedpipe feed``'s JSON shapes (the reader itself
is checked against the naive answer by the stage tests)."""

from __future__ import annotations

import json
import subprocess
import sys

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
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(some) + "\n")
    many = subprocess.run(
        [*base, "--consumers", str(ids), "--k", "3"], capture_output=True, text=True
    )
    lines = [json.loads(line) for line in many.stdout.splitlines()]
    assert [line["consumer_id"] for line in lines] == some
    assert all(
        [i["event_id"] for i in line["feed"]] == expected[line["consumer_id"]][:3] for line in lines
    )

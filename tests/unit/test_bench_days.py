"""The Connect bench's new days (``bench/connect.py --new-days``) continue the workload that
``bench/day.py`` generated: the days appended later are the days a single generation of all
days writes, file for file, and the days present are left as they are."""

from __future__ import annotations

import datetime as dt
import filecmp
from pathlib import Path

from jobs.common.storage import Storage
from jobs.workloads.generate import PROFILES, generate, scaled

ROOT = Path(__file__).resolve().parents[2]


def test_new_days_continue_the_generated_workload(tmp_path):
    from bench import connect
    from bench.day import D1, SEED

    profile = scaled(PROFILES["ff2010"], 0.01)
    appended, whole = tmp_path / "a" / "landing", tmp_path / "b" / "landing"
    generate(Storage.at(str(appended)), D1, 2, profile, seed=SEED)  # as bench/day.py does
    day2 = appended / "events" / f"ds={D1 + dt.timedelta(days=1)}"
    before = {p: p.stat().st_mtime_ns for p in day2.iterdir()}

    last = D1 + dt.timedelta(days=3)
    added = connect.ensure_days(appended, 0.01, last)
    assert added == [D1 + dt.timedelta(days=2), last]
    assert connect.ensure_days(appended, 0.01, last) == []  # nothing missing the second time
    assert {p: p.stat().st_mtime_ns for p in day2.iterdir()} == before
    assert sorted(p.name for p in appended.parent.iterdir()) == ["landing"]  # no side directory

    generate(Storage.at(str(whole)), D1, 4, profile, seed=SEED)
    files = sorted(p.relative_to(whole) for p in whole.rglob("*") if p.is_file())
    assert sorted(p.relative_to(appended) for p in appended.rglob("*") if p.is_file()) == files
    assert {f.parts[1] for f in files} == {f"ds={D1 + dt.timedelta(days=i)}" for i in range(4)}
    different = [f for f in files if not filecmp.cmp(appended / f, whole / f, shallow=False)]
    assert different == []

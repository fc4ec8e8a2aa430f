"""When a day's landing counts as arrived (``jobs.common.readiness``), from folder listings
alone: the required folders, the previous graph that makes ``follows`` optional, the upstream
marker, and the tables a known outage allows to be empty."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from jobs.common import readiness
from jobs.common.config import ConfigError, Settings
from jobs.common.storage import Storage

D = dt.date(2026, 3, 2)


def folder(root: Path, *parts: str) -> Path:
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def settings(tmp_path: Path, **kw) -> Settings:
    return Settings(landing=str(tmp_path / "landing"), warehouse=str(tmp_path / "wh"), **kw)


def missing(s: Settings) -> dict[str, str]:
    return readiness.missing(s, D, Storage.at(s.warehouse))


def test_a_first_day_needs_all_three_folders(tmp_path):
    s = settings(tmp_path)
    land = tmp_path / "landing"
    assert missing(s) == {t: str(land / t / f"ds={D}") for t in ("follows", "events", "views")}
    for t in ("follows", "events"):
        folder(land, t, f"ds={D}")
    folder(land, "views", f"ds={D - dt.timedelta(days=1)}")  # another day's folder is not D's
    assert missing(s) == {"views": str(land / "views" / f"ds={D}")}
    folder(land, "views", f"ds={D}")
    assert missing(s) == {}


def test_follows_is_optional_once_there_is_a_previous_graph(tmp_path):
    s = settings(tmp_path)
    land = tmp_path / "landing"
    folder(land, "events", f"ds={D}")
    folder(land, "views", f"ds={D}")
    assert set(missing(s)) == {"follows"}
    folder(tmp_path / "wh", "clean", "follows", f"ds={D - dt.timedelta(days=1)}")
    assert missing(s) == {}


def test_marker_mode_waits_for_each_folders_marker(tmp_path):
    s = settings(tmp_path, landing_ready="marker")
    land = tmp_path / "landing"
    for t in ("follows", "events", "views"):
        (folder(land, t, f"ds={D}") / "part-0.csv").write_text("x\n")
    assert missing(s) == {
        t: str(land / t / f"ds={D}" / "_SUCCESS") for t in ("follows", "events", "views")
    }
    for t in ("follows", "events"):
        (land / t / f"ds={D}" / "_SUCCESS").write_text("")
    assert set(missing(s)) == {"views"}
    (land / "views" / f"ds={D}" / "_SUCCESS").write_text("")
    assert missing(s) == {}
    custom = settings(tmp_path, landing_ready="marker", landing_marker="DONE")
    assert set(missing(custom)) == {"follows", "events", "views"}


def test_allowed_tables_are_not_waited_for_and_the_error_says_how(tmp_path):
    s = settings(tmp_path)
    folder(tmp_path / "landing", "follows", f"ds={D}")
    with pytest.raises(readiness.LandingNotReady) as err:
        readiness.check(s, D, Storage.at(s.warehouse))
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{D}: landing not ready")
    assert str(tmp_path / "landing" / "events" / f"ds={D}") in message
    assert message.endswith("--allow-empty events,views)")
    allowed = settings(tmp_path, allow_empty=("events", "views"))
    readiness.check(allowed, D, Storage.at(allowed.warehouse))  # ready: nothing raised


def test_readiness_settings_are_checked():
    from jobs.common.config import load_settings

    env = {"FEEDPIPE_ALLOW_EMPTY": "events, views", "FEEDPIPE_LANDING_READY": "marker"}
    got = load_settings(environ=env)
    assert got.allow_empty == ("events", "views") and got.landing_ready == "marker"
    with pytest.raises(ConfigError, match="allow_empty names unknown tables"):
        Settings(allow_empty=("events", "topics"))
    with pytest.raises(ConfigError, match="landing_ready must be one of"):
        Settings(landing_ready="eventually")
    with pytest.raises(ConfigError, match="landing_marker"):
        Settings(landing_marker="a/b")

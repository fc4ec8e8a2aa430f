"""The command line contract other tools rely on (verbs, JSON shapes, errors)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jobs.cli import build_parser, main


def feedpipe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobs", *args], capture_output=True, text=True, env=env
    )


VERBS = [
    *("generate", "import", "run", "backfill"),
    *("ingest", "rates", "plan", "materialize", "validate", "publish"),
    *(
        "feed",
        "tables",
        "catalog",
        "report",
        "evaluate",
        "evaluate-rates",
        "connect-server",
        "config",
    ),
]
"""The verbs of ../shared/DESIGN.md and the README."""


def parser_verbs() -> list[str]:
    import argparse

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def test_the_command_line_has_the_documented_verbs():
    assert sorted(parser_verbs()) == sorted(VERBS)


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help(verb, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([verb, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: feedpipe {verb}") and "--config" in out


def test_config_prints_the_effective_settings(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "f.toml"
    cfg.write_text("feed_k = 9\n")
    monkeypatch.setenv("FEEDPIPE_CONFIG", str(cfg))
    monkeypatch.setenv("FEEDPIPE_PUSH_COST", "2.5")
    assert main(["config", "--pull-cost", "0.5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["feed_k"], out["push_cost"], out["pull_cost"]) == (9, 2.5, 0.5)


def test_errors_are_one_line_not_a_traceback(tmp_path):
    result = feedpipe("feed", "--consumer", "x", "--ds", "2026-01-01", "--warehouse", str(tmp_path))
    assert result.returncode == 1
    assert result.stderr == (
        f"feedpipe: error: 2026-01-01 has not been published in {tmp_path} "
        "(feedpipe feed --unpublished reads its latest complete run)\n"
    )
    assert "Traceback" not in result.stderr
    remote = feedpipe("config", "--spark-remote", "http://127.0.0.1:15002")
    assert remote.returncode == 1 and "sc://host:port" in remote.stderr
    assert "Traceback" not in remote.stderr
    bad = feedpipe("config", "--strategy", "fastest")
    assert (
        bad.returncode == 1 and "strategy must be" in bad.stderr and "Traceback" not in bad.stderr
    )
    bad_date = feedpipe("rates", "--ds", "yesterday")
    assert bad_date.returncode == 2 and "not a date" in bad_date.stderr
    no_range = feedpipe("evaluate", "--warehouse", str(tmp_path))
    assert no_range.returncode == 2 and "--start and --end are required" in no_range.stderr
    unknown = feedpipe("evaluate", "--experiment", "ff-fig99")
    assert unknown.returncode == 2 and "unknown experiment 'ff-fig99'" in unknown.stderr
    assert "ff-fig10" in unknown.stderr and "Traceback" not in unknown.stderr
    no_plan = feedpipe("report", "--html", "--ds", "2026-01-01", "--warehouse", str(tmp_path))
    assert no_plan.returncode == 1 and "no plan for 2026-01-01" in no_plan.stderr

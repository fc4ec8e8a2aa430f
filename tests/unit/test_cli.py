"""The command line contract other tools rely on (verbs, JSON shapes, errors)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import pytest

from jobs.cli import SETTING_FLAGS, VERB_SETTINGS, build_parser, main


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
        "store",
        "calibrate",
        "connect-server",
        "config",
    ),
]
"""The verbs of ../shared/DESIGN.md and the README."""


def verb_parsers() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def parser_verbs() -> list[str]:
    return list(verb_parsers())


def test_the_command_line_has_the_documented_verbs():
    assert sorted(parser_verbs()) == sorted(VERBS)


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help(verb, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([verb, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: feedpipe {verb}")
    assert ("--config" in out) == (VERB_SETTINGS.get(verb) != ())  # only where settings are read


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
    assert (bad_date.returncode, bad_date.stderr) == (
        2,
        "feedpipe rates: error: argument --ds: not a date (YYYY-MM-DD): 'yesterday'\n"
        "see 'feedpipe rates --help'\n",
    )
    no_range = feedpipe("evaluate", "--warehouse", str(tmp_path))
    assert no_range.returncode == 2 and "--start and --end are required" in no_range.stderr
    unknown = feedpipe("evaluate", "--experiment", "ff-fig99")
    assert unknown.returncode == 2 and "unknown experiment 'ff-fig99'" in unknown.stderr
    assert "ff-fig10" in unknown.stderr and "Traceback" not in unknown.stderr
    for form in ([], ["--html"]):  # a day of which nothing has run: refused either way
        no_day = feedpipe("report", *form, "--ds", "2026-01-01", "--warehouse", str(tmp_path))
        assert (no_day.returncode, no_day.stdout, no_day.stderr) == (
            1,
            "",
            f"feedpipe: error: 2026-01-01 is not published in {tmp_path}; published days: "
            "none (--unpublished reports its latest complete run)\n",
        )
        debug = feedpipe(
            "report", *form, "--ds", "2026-01-01", "--unpublished", "--warehouse", str(tmp_path)
        )
        assert (debug.returncode, debug.stdout, debug.stderr) == (
            1,
            "",
            f"feedpipe: error: no stage has run for 2026-01-01 in {tmp_path}\n",
        )
    latest = feedpipe("feed", "--consumer", "x", "--warehouse", str(tmp_path))
    assert (latest.returncode, latest.stderr) == (
        1,
        f"feedpipe: error: no published day in the warehouse {tmp_path}\n",
    )


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def shown_metavar(action: argparse.Action) -> str | None:
    """The name the help shows for an option's value (None: a flag, or a list of choices)."""
    if action.nargs == 0 or (action.metavar is None and action.choices is not None):
        return None
    metavar = action.metavar if action.metavar is not None else action.dest.upper()
    return metavar if isinstance(metavar, str) else " ".join(metavar)


def test_every_verb_and_option_is_described_without_internal_names():
    internal = re.compile(r"[A-Z0-9]+(_[A-Z0-9]+)+")  # SET_WAREHOUSE, FEED_K, ...
    for verb, parser in verb_parsers().items():
        assert parser.description, verb
        for action in options(parser):
            name = f"{verb} {'/'.join(action.option_strings) or action.dest}"
            assert action.help and action.help != argparse.SUPPRESS, name
            shown = shown_metavar(action)
            assert shown is None or not internal.fullmatch(shown), (name, shown)
    # what the check finds
    bad = argparse.ArgumentParser()
    bad.add_argument("--warehouse", dest="set_warehouse", help="root")
    bad.add_argument("--flash-day")
    assert [shown_metavar(a) for a in options(bad)] == ["SET_WAREHOUSE", "FLASH_DAY"]
    assert [a.help for a in options(bad)] == ["root", None]


def test_read_verbs_offer_only_the_settings_they_read(capsys):
    """`feed`, `tables`, `catalog` and `report` read the warehouse, not the pipeline's
    settings: any other setting's flag is refused, in two lines naming the verb."""
    for verb in ("feed", "tables", "catalog", "report"):
        flags = {o for a in options(verb_parsers()[verb]) for o in a.option_strings}
        settings = {f for f, *_ in SETTING_FLAGS.values()}
        assert flags & settings == {SETTING_FLAGS[n][0] for n in VERB_SETTINGS[verb]}
        assert "--warehouse" in flags and "--config" in flags
    with pytest.raises(SystemExit) as exit_:
        main(["feed", "--consumer", "u1", "--feed-k", "5"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "feedpipe feed: error: unrecognized arguments: --feed-k 5\nsee 'feedpipe feed --help'\n"
    )


def test_full_refresh_is_a_flag_on_every_verb_that_takes_it():
    day = ["--ds", "2026-01-03"]
    for args in (
        ["materialize", *day],
        ["run", *day],
        ["backfill", "--start", "2026-01-03", "--end", "2026-01-04"],
    ):
        assert build_parser().parse_args(args).full_refresh is False
        assert build_parser().parse_args([*args, "--full-refresh"]).full_refresh is True
        assert build_parser().parse_args([*args, "--no-full-refresh"]).full_refresh is False


def test_a_warehouse_without_published_days_has_no_catalog(tmp_path, capsys):
    """No statements for a warehouse that does not exist or has no published day: they would
    register the tables empty (and, with --replace, drop the registered ones first)."""
    (tmp_path / "empty" / "manifests").mkdir(parents=True)
    for root, why in (
        (tmp_path / "nowhere", "no warehouse at {}: the folder does not exist"),
        (tmp_path / "empty", "no published day in the warehouse {}"),
    ):
        for args in (["--dialect", "hive"], ["--dialect", "spark", "--replace"], ["--duckdb"]):
            assert main(["catalog", "--warehouse", str(root), *args]) == 1
            assert capsys.readouterr() == ("", f"feedpipe: error: {why.format(root)}\n")
        assert not (root / "catalog").exists()
        assert main(["tables", "--warehouse", str(root)]) == 1
        assert capsys.readouterr() == ("", f"feedpipe: error: {why.format(root)}\n")


def test_gates_are_accepted_and_graphs_grown_from_the_command_line(tmp_path, monkeypatch, capsys):
    import pandas as pd

    monkeypatch.delenv("FEEDPIPE_CONFIG", raising=False)
    assert main(["config", "--accept-gate", "volume,follows"]) == 0
    assert json.loads(capsys.readouterr().out)["accept_gates"] == ["volume", "follows"]
    assert main(["validate", "--ds", "2026-01-05", "--accept-gate", "volumes"]) == 1
    assert "accept_gates names unknown gates ['volumes']" in capsys.readouterr().err
    src = tmp_path / "e.txt"
    src.write_text("a b\na c\nb c\nc a\n")
    out = tmp_path / "landing"
    args = ["import", "snap-edges", "--src", str(src), "--out", str(out), "--growth-days", "2"]
    assert main([*args, "--ds", "2026-01-01"]) == 0
    capsys.readouterr()
    day1 = pd.read_parquet(out / "follows" / "ds=2026-01-01")
    day2 = pd.read_parquet(out / "follows" / "ds=2026-01-02")
    assert (len(day1), len(day2), set(day2.op)) == (2, 2, {"follow"})


def test_every_error_feedpipe_explains_is_one_line_and_a_defect_keeps_its_traceback(
    monkeypatch, capsys
):
    """The command line catches one base class (``jobs.common.errors.FeedpipeError``), which
    every error a user can act on derives from, and prints it in one line (exit 1); any other
    exception is a defect and propagates with its traceback."""
    from jobs import cli
    from jobs.common.config import ConfigError
    from jobs.common.errors import FeedpipeError
    from jobs.common.pointers import PublishFailed
    from jobs.common.readiness import LandingNotReady
    from jobs.common.storage import StorageError
    from jobs.common.tables import ContractError
    from jobs.common.versions import LegacyLayout
    from jobs.serving.published import NotPublished
    from jobs.serving.reader import FeedError
    from jobs.stages.ingest_topics import TopicsUnsupported
    from jobs.stages.landing_files import LandingError
    from jobs.stages.publish import PublishRefused
    from jobs.stages.rules import IngestRejected
    from jobs.stages.validate import ValidationFailed
    from jobs.workloads.importers import SourceError

    explained = (
        ConfigError,
        ContractError,
        LandingError,
        IngestRejected,
        TopicsUnsupported,
        LandingNotReady,
        LegacyLayout,
        StorageError,
        NotPublished,
        SourceError,
        PublishRefused,
        PublishFailed,
        FeedError,
        ValidationFailed,
    )
    for kind in explained:
        assert issubclass(kind, FeedpipeError), kind

        def fail(args, settings, kind=kind):
            raise kind("the day is wrong\n  in two lines")

        monkeypatch.setattr(cli, "cmd_config", fail)
        assert cli.main(["config"]) == 1, kind
        assert capsys.readouterr().err == "feedpipe: error: the day is wrong in two lines\n"

    def defect(args, settings):
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "cmd_config", defect)
    with pytest.raises(KeyError, match="a bug"):
        cli.main(["config"])

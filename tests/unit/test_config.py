"""Configuration precedence: defaults < TOML file < FEEDPIPE_* environment < flags."""

from __future__ import annotations

import pytest

from jobs.common.config import ConfigError, load_settings


def test_defaults_without_file_or_environment():
    s = load_settings(environ={})
    assert (s.push_cost, s.pull_cost, s.feed_k, s.strategy, s.coherency) == (
        3.0,
        1.0,
        20,
        "auto",
        "global",
    )
    assert s.threshold == 3.0


def test_file_then_environment_then_flags(tmp_path):
    cfg = tmp_path / "feedpipe.toml"
    cfg.write_text(
        'push_cost = 2.0\nfeed_k = 10\nwarehouse = "from-file"\n[spark_conf]\n"spark.x" = "1"\n'
    )
    env = {"FEEDPIPE_CONFIG": str(cfg), "FEEDPIPE_FEED_K": "15", "FEEDPIPE_PULL_COST": "0.5"}
    s = load_settings(environ=env, overrides={"feed_k": 7})
    assert s.push_cost == 2.0  # file
    assert s.pull_cost == 0.5  # environment
    assert s.feed_k == 7  # flag beats environment beats file
    assert s.warehouse == "from-file"
    assert s.spark_conf == {"spark.x": "1"}
    assert s.threshold == 4.0


NON_DEFAULT = {
    "landing": ("s3://b/landing", "s3://b/landing"),
    "warehouse": ("/w", "/w"),
    "spark_master": ("spark://h:7077", "spark://h:7077"),
    "spark_remote": ("sc://h:15002", "sc://h:15002"),
    "push_cost": ("2.83", 2.83),
    "pull_cost": ("0.5", 0.5),
    "feed_k": ("50", 50),
    "rate_window_days": ("3", 3),
    "strategy": ("ff-per-pair", "ff-per-pair"),
    "coherency": ("per_producer", "per_producer"),
    "strategies": ("push-all,pull-all", ("push-all", "pull-all")),
    "rate_method": ("trailing_mean_prior", "trailing_mean_prior"),
    "rate_half_life_days": ("5", 5.0),
    "rate_trend_damping": ("0.5", 0.5),
    "flash_factor": ("6", 6.0),
    "flash_min_events": ("20", 20),
    "feed_k_per_producer": ("5", 5),
    "diversity_hours": ("12", 12.0),
    "latency_metric": ("pulls", "pulls"),
    "latency_quantile": ("0.99", 0.99),
    "latency_bound": ("3", 3),
    "latency_ms_base": ("0.4", 0.4),
    "latency_ms_per_source": ("0.05", 0.05),
    "inactive_after_days": ("0", 0),
    "view_part_users": ("1000", 1000),
    "view_user_views": ("10", 10),
    "view_lp_pairs": ("0", 0),
    "bound_pairs": ("1000", 1000),
    "mode_change_margin": ("0.1", 0.1),
    "prior_hours": ("12", 12.0),
    "rate_floor": ("0.01", 0.01),
    "max_lateness_days": ("2", 2),
    "max_attributes_bytes": ("100", 100),
    "landing_ready": ("marker", "marker"),
    "landing_marker": ("_DONE", "_DONE"),
    "allow_empty": ("events,views", ("events", "views")),
    "volume_low": ("0.05", 0.05),
    "volume_high": ("30", 30.0),
    "volume_days": ("3", 3),
    "volume_min_days": ("2", 2),
    "max_follow_removed": ("0.5", 0.5),
    "follow_added_high": ("0", 0.0),
    "accept_gates": ("volume", ("volume",)),
    "max_quarantine_share": ("0.5", 0.5),
    "publish_to": ("s3://b/published", "s3://b/published"),
    "publish_part_mb": ("8", 8.0),
    "store": ("redis://127.0.0.1:6390/2", "redis://127.0.0.1:6390/2"),
    "store_grace_seconds": ("60", 60.0),
    "store_probe_reads": ("10", 10),
    "shuffle_partitions": ("4", 4),
    "spark_conf": ("spark.x=1,spark.y=2", {"spark.x": "1", "spark.y": "2"}),
}
"""A value other than the default for every setting, as an environment variable and as read."""


def documented() -> set[str]:
    """The settings the docs name: the README's ``FEEDPIPE_*`` variables and every key of
    ``feedpipe.example.toml`` (commented-out ones included)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    names = {
        v.lower()
        for v in re.findall(r"(?<![A-Z_])FEEDPIPE_([A-Z_]+[A-Z])", (root / "README.md").read_text())
        if v != "CONFIG"
    }
    example = (root / "feedpipe.example.toml").read_text()
    names |= set(re.findall(r"^#? ?([a-z_]+) =", example, re.M))
    names |= set(re.findall(r"^\[([a-z_]+)\]", example, re.M))
    return names


def test_every_documented_variable_is_read_with_a_non_default_value():
    import dataclasses

    from jobs.common.config import Settings

    fields = {f.name for f in dataclasses.fields(Settings)}
    assert documented() <= fields, documented() - fields
    assert fields <= documented(), f"settings the docs do not name: {fields - documented()}"
    assert set(NON_DEFAULT) == fields
    default = Settings()
    for name, (text, value) in NON_DEFAULT.items():
        env = {f"FEEDPIPE_{name.upper()}": text}
        if name == "coherency":  # the global-only rules do not serve per-producer coherency
            env["FEEDPIPE_STRATEGY"] = "ff-per-pair"
        got = getattr(load_settings(environ=env), name)
        assert got == value != getattr(default, name), name


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FEEDPIPE_FEED_K": "many"}, "feed_k"),
        ({"FEEDPIPE_STRATEGY": "fastest"}, "strategy"),
        ({"FEEDPIPE_PUSH_COST": "-1"}, "positive"),
        ({"FEEDPIPE_COHERENCY": "sometimes"}, "coherency"),
        ({"FEEDPIPE_COHERENCY": "per_producer", "FEEDPIPE_STRATEGY": "ff-consumer"}, "Lemma 2"),
        ({"FEEDPIPE_LATENCY_METRIC": "hours"}, "latency_metric must be one of"),
        ({"FEEDPIPE_LATENCY_METRIC": "ms"}, "needs the read-latency fit: run feedpipe calibrate"),
        ({"FEEDPIPE_LATENCY_BOUND": "2.5"}, "whole number of sources"),
        (
            {
                "FEEDPIPE_LATENCY_METRIC": "ms",
                "FEEDPIPE_LATENCY_BOUND": "0.5",
                "FEEDPIPE_LATENCY_MS_BASE": "0.45",
                "FEEDPIPE_LATENCY_MS_PER_SOURCE": "0.1",
            },
            "0.5 ms is below a read of one source by the calibration",
        ),
        ({"FEEDPIPE_STORE_PROBE_READS": "-1"}, "store_probe_reads"),
        ({"FEEDPIPE_LATENCY_QUANTILE": "1.5"}, "latency_quantile"),
        ({"FEEDPIPE_INACTIVE_AFTER_DAYS": "-1"}, "inactive_after_days"),
        ({"FEEDPIPE_VIEW_LP_PAIRS": "-1"}, "view_lp_pairs must be at least 0"),
    ],
)
def test_bad_values_are_clear_errors(env, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(environ=env)


@pytest.mark.parametrize(
    ("bound", "base", "per_source", "sources"),
    [
        # (bound - base) / per_source, rounded down: worked by hand
        ("1.0", "0.3", "0.1", 7),  # 7 exactly, though 0.7 / 0.1 is 6.999... in floating point
        ("1.05", "0.3", "0.1", 7),
        ("2.5", "0.5", "0.25", 8),
        ("0.55", "0.45", "0.1", 1),
    ],
)
def test_a_bound_in_milliseconds_is_planned_as_the_sources_the_fit_allows(
    bound, base, per_source, sources
):
    s = load_settings(
        environ={
            "FEEDPIPE_LATENCY_METRIC": "ms",
            "FEEDPIPE_LATENCY_BOUND": bound,
            "FEEDPIPE_LATENCY_MS_BASE": base,
            "FEEDPIPE_LATENCY_MS_PER_SOURCE": per_source,
        }
    )
    assert s.latency_bound == float(bound) and s.latency_bound_sources == sources
    assert load_settings(environ={"FEEDPIPE_LATENCY_BOUND": "3"}).latency_bound_sources == 3


def test_unknown_key_in_file_is_an_error(tmp_path):
    cfg = tmp_path / "f.toml"
    cfg.write_text("push_cots = 2\n")
    with pytest.raises(ConfigError, match="unknown setting 'push_cots'"):
        load_settings(str(cfg), environ={})


def test_per_producer_coherency_drops_the_global_rule():
    s = load_settings(environ={"FEEDPIPE_COHERENCY": "per_producer"})
    assert "ff-consumer" not in s.served_strategies
    assert "ff-latency-pair" in s.served_strategies
    assert "ff-consumer" in load_settings(environ={}).served_strategies


def test_on_off_values_are_read_one_way_everywhere_and_a_typo_is_an_error(monkeypatch):
    """``parse_bool`` (``FEEDPIPE_CDS``, a boolean setting): true/false, 1/0, yes/no, on/off
    in any case are read; a word that is none of them is an error naming the variable."""
    from jobs.common import cds
    from jobs.common.config import parse_bool

    for word in ("1", "true", "Yes", " ON "):
        assert parse_bool(word) is True
    for word in ("0", "false", "No", "off", ""):
        assert parse_bool(word) is False
    monkeypatch.setenv("FEEDPIPE_CDS", "OFF")
    assert cds.current_archive() is None
    monkeypatch.setenv("FEEDPIPE_CDS", "maybe")
    with pytest.raises(ConfigError, match="FEEDPIPE_CDS: not true or false: 'maybe'"):
        cds.current_archive()

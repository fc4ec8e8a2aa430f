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


def test_every_documented_environment_variable_is_read():
    env = {
        "FEEDPIPE_LANDING": "s3://b/landing",
        "FEEDPIPE_WAREHOUSE": "/w",
        "FEEDPIPE_SPARK_MASTER": "spark://h:7077",
        "FEEDPIPE_PUSH_COST": "2.83",
        "FEEDPIPE_PULL_COST": "1",
        "FEEDPIPE_FEED_K": "50",
        "FEEDPIPE_RATE_WINDOW_DAYS": "3",
        "FEEDPIPE_STRATEGY": "ff-per-pair",
        "FEEDPIPE_COHERENCY": "global",
    }
    s = load_settings(environ=env)
    assert (s.landing, s.warehouse, s.spark_master) == ("s3://b/landing", "/w", "spark://h:7077")
    assert (s.push_cost, s.feed_k, s.rate_window_days, s.strategy) == (2.83, 50, 3, "ff-per-pair")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FEEDPIPE_FEED_K": "many"}, "feed_k"),
        ({"FEEDPIPE_STRATEGY": "fastest"}, "strategy"),
        ({"FEEDPIPE_PUSH_COST": "-1"}, "positive"),
        ({"FEEDPIPE_COHERENCY": "sometimes"}, "coherency"),
        ({"FEEDPIPE_COHERENCY": "per_producer", "FEEDPIPE_STRATEGY": "ff-consumer"}, "Lemma 2"),
        ({"FEEDPIPE_LATENCY_METRIC": "ms"}, "latency_metric"),
        ({"FEEDPIPE_LATENCY_QUANTILE": "1.5"}, "latency_quantile"),
        ({"FEEDPIPE_INACTIVE_AFTER_DAYS": "-1"}, "inactive_after_days"),
        ({"FEEDPIPE_VIEW_LP_PAIRS": "-1"}, "view_lp_pairs must be at least 0"),
    ],
)
def test_bad_values_are_clear_errors(env, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(environ=env)


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

"""``feedpipe calibrate`` (``jobs.evaluation.calibrate``): the regression on hand-worked
points, the settings written into a TOML file that the configuration then reads, and a run on
a real Redis server (started by the test) that leaves the store as it found it."""

from __future__ import annotations

import pytest

from jobs import cli
from jobs.common import store
from jobs.common.config import load_settings
from jobs.evaluation.calibrate import Fit, calibrate, write_settings


def test_least_squares_on_hand_worked_points():
    exact = Fit.of([1, 2, 3, 4], [3, 5, 7, 9])  # y = 1 + 2x
    assert (exact.slope, exact.intercept, exact.r2) == (2.0, 1.0, 1.0)
    # x mean 2.5, y mean 6.125; Sxy = 10.75, Sxx = 5: slope 2.15, intercept 6.125 - 5.375
    fit = Fit.of([1, 2, 3, 4], [3, 5, 7, 9.5])
    assert fit.slope == pytest.approx(2.15) and fit.intercept == pytest.approx(0.75)
    # residuals 0.1, -0.05, -0.2, 0.15: SSres 0.075 of SStot 23.1875
    assert fit.r2 == pytest.approx(1 - 0.075 / 23.1875)


def test_settings_are_written_at_the_top_of_a_config_the_configuration_reads(tmp_path):
    config = tmp_path / "feedpipe.toml"
    config.write_text(
        'warehouse = "wh"\npush_cost = 3.0\n\n[spark_conf]\n"spark.executor.cores" = "2"\n'
    )
    write_settings(config, {"push_cost": 0.42, "pull_cost": 1.0})
    text = config.read_text()
    assert text.count("push_cost") == 1 and text.index("pull_cost") < text.index("[spark_conf]")
    s = load_settings(str(config))
    assert (s.push_cost, s.pull_cost, s.warehouse) == (0.42, 1.0, "wh")
    assert s.spark_conf == {"spark.executor.cores": "2"}
    fresh = tmp_path / "new.toml"
    write_settings(fresh, {"push_cost": 2.5, "pull_cost": 1.0})
    assert load_settings(str(fresh)).push_cost == 2.5


def test_a_calibration_on_a_real_store_fits_and_leaves_no_keys(redis_server, tmp_path, capsys):
    client = store.connect(redis_server.url)
    client.flushdb()
    client.set("fp:served", "{}")  # a served pointer: left as it is
    sizes = tuple(300 * i for i in range(1, 11))
    done = calibrate(redis_server.url, sizes, repetitions=2, reads=60)
    assert client.keys("*") == [b"fp:served"] and client.get("fp:served") == b"{}"
    assert done.push_us > 0 and done.pull_us > 0
    assert done.ratio == pytest.approx(done.push_us / done.pull_us)
    assert len(done.push_fits) == len(done.pull_fits) == 2
    # more work, more CPU: every fit rises and follows its points
    assert all(f.slope > 0 and f.r2 > 0.5 for f in (*done.push_fits, *done.pull_fits))
    # a read of 32 sources takes longer than a read of none
    assert done.latency_ms_per_source > 0
    assert done.settings() == {
        "push_cost": round(done.ratio, 3),
        "pull_cost": 1.0,
        "latency_ms_base": round(max(done.latency_ms_base, 0.0), 4),
        "latency_ms_per_source": round(done.latency_ms_per_source, 5),
    }

    config = tmp_path / "feedpipe.toml"
    args = ["calibrate", "--store", redis_server.url, "--largest", "1000", "--repetitions", "2"]
    assert cli.main([*args, "--write", str(config)]) == 0
    out = capsys.readouterr().out
    assert "H/L" in out and "latency_ms_per_source = " in out.strip().splitlines()[-1]
    written = load_settings(str(config))
    assert written.pull_cost == 1.0 and written.latency_ms_per_source > 0
    # the fit written is the one a bound in milliseconds is planned with: a bound of five
    # sources' read by the fit plans at most five sources
    five = written.latency_ms_base + 5.5 * written.latency_ms_per_source
    ms = load_settings(
        str(config), environ={"FEEDPIPE_LATENCY_METRIC": "ms", "FEEDPIPE_LATENCY_BOUND": str(five)}
    )
    assert ms.latency_bound_sources == 5
    assert cli.main(["calibrate", "--store", redis_server.url, "--repetitions", "1"]) == 2
    assert "--repetitions must be at least 2" in capsys.readouterr().err

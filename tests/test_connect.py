"""The stages unchanged on a long-lived Spark Connect server.

``feedpipe connect-server`` is started on 127.0.0.1 (a real server, its own JVM); one full day
runs as its client (``feedpipe run --spark-remote sc://127.0.0.1:PORT``, a process with no
Spark of its own). Its tables must equal a local run of the same day, row for row, and serve
the naive feeds; the server's own event log must hold the day's queries.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import free_port
from same_day import assert_same_day

from jobs.common.config import ConfigError, Settings
from jobs.common.spark import connect_server_command, local_cores
from jobs.common.storage import Storage
from jobs.stages import runner
from jobs.workloads.generate import PROFILES, generate, scaled

DAY = dt.date(2026, 1, 1)
K = 5

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A Spark Connect server from ``feedpipe connect-server``; yields its URL and the folder
    of its event log, which is complete once the server has stopped (after the module)."""
    root = tmp_path_factory.mktemp("connect")
    events = root / "events"
    events.mkdir()
    port = free_port()
    env = {**os.environ, "FEEDPIPE_DRIVER_MEMORY": "1g"}
    env["FEEDPIPE_SPARK_CONF"] = (
        f"spark.eventLog.enabled=true,spark.eventLog.compress=false,spark.eventLog.dir={events}"
    )
    log = (root / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs", "connect-server", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError((root / "server.log").read_text()[-4000:]) from None
            time.sleep(0.5)
    yield f"sc://127.0.0.1:{port}", events
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def test_a_day_on_a_connect_server_equals_the_local_run(spark, server, tmp_path):
    url, events = server
    landing = tmp_path / "landing"
    generate(Storage.at(str(landing)), DAY, 1, scaled(PROFILES["ff2010"], 0.002), seed=5)
    # the pure strategies, Feeding Frenzy's and one shared-view planner (Python workers on
    # the server): every kind of stage work
    strategies = ("push-all", "pull-all", "ff-per-pair", "cz-hierarchy2")
    common = {"landing": str(landing), "feed_k": K, "shuffle_partitions": 4}
    common["strategies"] = strategies

    remote = str(tmp_path / "wh_remote")
    cmd = [sys.executable, "-m", "jobs", "run", "--ds", str(DAY), "-q"]
    cmd += ["--landing", str(landing), "--warehouse", remote, "--spark-remote", url]
    env = {**os.environ, "FEEDPIPE_FEED_K": str(K), "FEEDPIPE_SHUFFLE_PARTITIONS": "4"}
    env["FEEDPIPE_STRATEGIES"] = ",".join(strategies)
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-4000:]

    local = str(tmp_path / "wh_local")
    runner.run_day(Settings(**common, warehouse=local), DAY, spark)

    assert_same_day(remote, local, landing, DAY, K, "the Connect server")

    # the queries ran in the server's JVM: its event log holds the client's writes (to the
    # remote run's warehouse), and none of the local run's
    logged = "\n".join(p.read_text(errors="replace") for p in events.rglob("*") if p.is_file())
    assert remote in logged and local not in logged

    # the server ran its client sessions without artifact isolation, which would give each
    # session a class loader of its own and so its own copy of every generated class
    env = next(
        json.loads(line)
        for line in logged.splitlines()
        if '"SparkListenerEnvironmentUpdate"' in line
    )
    props = dict(env["Spark Properties"])
    assert props["spark.sql.artifact.isolation.enabled"] == "false"
    assert "SparkConnectPlugin" in props["spark.plugins"]


def test_the_server_command_carries_the_stage_settings():
    s = Settings(spark_master="local[3]", shuffle_partitions=6, spark_conf={"spark.x.y": "z"})
    cmd = connect_server_command(s, "127.0.0.1", 15010, "2g")
    confs = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--conf")
    assert cmd[cmd.index("--master") + 1] == "local[3]"
    assert cmd[cmd.index("--driver-memory") + 1] == "2g"
    assert confs["spark.sql.shuffle.partitions"] == "6"
    assert confs["spark.sql.session.timeZone"] == "UTC"
    assert confs["spark.connect.grpc.binding.port"] == "15010"
    assert confs["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert confs["spark.default.parallelism"] == "3"
    assert confs["spark.x.y"] == "z"
    assert "spark.driver.memory" not in confs
    # the Connect plugin on a driver of ours, the client sessions sharing generated code
    assert cmd[-1].endswith("connect_service.py") and Path(cmd[-1]).is_file()
    assert confs["spark.plugins"] == "org.apache.spark.sql.connect.SparkConnectPlugin"
    assert confs["spark.sql.artifact.isolation.enabled"] == "false"
    assert int(confs["spark.sql.codegen.cache.maxEntries"]) >= 1000
    own = {"spark.plugins": "com.example.Plugin", "spark.sql.codegen.cache.maxEntries": "7"}
    s2 = Settings(spark_conf=own)
    confs2 = dict(
        a.split("=", 1) for a in connect_server_command(s2, "127.0.0.1", 1, "1g") if "=" in a
    )
    assert confs2["spark.plugins"] == (
        "com.example.Plugin,org.apache.spark.sql.connect.SparkConnectPlugin"
    )
    assert confs2["spark.sql.codegen.cache.maxEntries"] == "7"  # the operator's own stands
    assert (local_cores("local"), local_cores("local[*]")) == (1, os.cpu_count())
    assert local_cores("spark://127.0.0.1:7077") is None
    with pytest.raises(ConfigError, match="sc://"):
        Settings(spark_remote="http://127.0.0.1:15002")

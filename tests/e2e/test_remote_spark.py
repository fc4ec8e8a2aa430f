"""The stages unchanged on other Spark deployments, each day's tables against one local run.

* A Spark standalone cluster: a master and two workers (one core each) started on 127.0.0.1
  from the installed Spark distribution (``bin/spark-class``, the classes
  ``start-master.sh``/``start-worker.sh`` run); the day runs with ``--spark-master``.
* A long-lived Spark Connect server (``feedpipe connect-server``, its own JVM); the day runs as
  its client (``--spark-remote``, a process with no Spark of its own), and the server's own
  event log must hold the day's queries.

Both run the same day of the same workload as a local run (built once, ``baseline``): their
tables must equal it row for row and serve the naive feeds.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.common.config import Settings
from jobs.common.storage import Storage
from jobs.stages import runner
from jobs.workloads.generate import PROFILES, generate, scaled
from support.same_day import assert_same_day
from support.servers import connect_server, free_port, logged

DAY = dt.date(2026, 1, 1)
K = 5
# the pure strategies, Feeding Frenzy's and one shared-view planner (Python workers on the
# executors or the server): every kind of stage work, in less time than all nine strategies
STRATEGIES = ("push-all", "pull-all", "ff-per-pair", "cz-hierarchy2")


@pytest.fixture(scope="module")
def baseline(spark, tmp_path_factory) -> tuple[Path, str]:
    """The day's landing files and its warehouse built by a local run."""
    root = tmp_path_factory.mktemp("baseline")
    landing = root / "landing"
    generate(Storage.at(str(landing)), DAY, 1, scaled(PROFILES["ff2010"], 0.002), seed=5)
    local = str(root / "wh_local")
    settings = Settings(
        landing=str(landing),
        warehouse=local,
        feed_k=K,
        shuffle_partitions=4,
        strategies=STRATEGIES,
    )
    runner.run_day(settings, DAY, spark)
    return landing, local


def run_elsewhere(landing: Path, warehouse: str, *flags: str, **env: str) -> None:
    """``feedpipe run`` of the day in a process of its own, with the baseline's settings."""
    cmd = [sys.executable, "-m", "jobs", "run", "--ds", str(DAY), "-q"]
    cmd += ["--landing", str(landing), "--warehouse", warehouse, *flags]
    full = {**os.environ, "FEEDPIPE_FEED_K": str(K), "FEEDPIPE_SHUFFLE_PARTITIONS": "4"}
    full["FEEDPIPE_STRATEGIES"] = ",".join(STRATEGIES)
    result = subprocess.run(cmd, env={**full, **env}, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-4000:]


def master_state(ui_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
        return dict(json.load(r))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[str, int, Path]]:
    from pyspark.find_spark_home import _find_spark_home

    root = tmp_path_factory.mktemp("cluster")
    spark_class = str(Path(_find_spark_home()) / "bin" / "spark-class")
    port, ui = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    logs = root / "logs"
    logs.mkdir()
    procs = [
        subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
            env=env,
            stdout=open(logs / "master.log", "wb"),
            stderr=subprocess.STDOUT,
        )
    ]
    master = f"spark://127.0.0.1:{port}"
    for i in range(2):
        work = root / f"worker{i}"
        work.mkdir()
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    master,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1536m",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work),
                ],
                env=env,
                stdout=open(logs / f"worker{i}.log", "wb"),
                stderr=subprocess.STDOUT,
            )
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if master_state(ui).get("aliveworkers") == 2:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                tail = "".join(p.read_text()[-1500:] for p in sorted(logs.glob("*.log")))
                raise RuntimeError(f"the standalone cluster did not come up:\n{tail}")
            time.sleep(0.5)
        yield master, ui, root
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def test_a_day_on_a_standalone_cluster_equals_the_local_run(cluster, baseline, tmp_path):
    master, ui, work_dirs = cluster
    landing, local = baseline
    on_cluster = str(tmp_path / "wh_cluster")
    # the executors compile as the suite's drivers do (tests/conftest.py): C1 only
    conf = "spark.executor.memory=1g,spark.cores.max=2"
    conf += f",spark.executor.extraJavaOptions={os.environ.get('FEEDPIPE_JAVA_OPTIONS', '')}"
    run_elsewhere(landing, on_cluster, "--spark-master", master, FEEDPIPE_SPARK_CONF=conf)

    # the work ran on the cluster: the application is there, with an executor on each worker
    apps = master_state(ui)["completedapps"]
    assert [a["name"] for a in apps] == [f"feedpipe-run-{DAY}"], apps
    for work in sorted(work_dirs.glob("worker*")):
        assert list(work.glob(f"{apps[0]['id']}/*/stderr")), f"no executor ran on {work.name}"
    assert_same_day(on_cluster, local, landing, DAY, K, "the cluster")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    with connect_server(tmp_path_factory.mktemp("connect")) as (url, events):
        yield url, events


def test_a_day_on_a_connect_server_equals_the_local_run(server, baseline, tmp_path):
    url, events = server
    landing, local = baseline
    remote = str(tmp_path / "wh_remote")
    run_elsewhere(landing, remote, "--spark-remote", url)
    assert_same_day(remote, local, landing, DAY, K, "the Connect server")

    # the queries ran in the server's JVM: its event log holds the client's writes (to the
    # remote run's warehouse), and none of the local run's
    log = logged(events)
    assert remote in log and local not in log

    # the server ran its client sessions without artifact isolation, which would give each
    # session a class loader of its own and so its own copy of every generated class
    env = next(
        json.loads(line) for line in log.splitlines() if '"SparkListenerEnvironmentUpdate"' in line
    )
    props = dict(env["Spark Properties"])
    assert props["spark.sql.artifact.isolation.enabled"] == "false"
    assert "SparkConnectPlugin" in props["spark.plugins"]

"""The stages unchanged on a Spark standalone cluster.

A master and two workers (one core each) are started on 127.0.0.1 from the installed Spark
distribution (``bin/spark-class``, the classes ``start-master.sh``/``start-worker.sh`` run);
one full day runs with ``--spark-master spark://127.0.0.1:PORT`` and its tables must equal a
local run of the same day, row for row, and serve the naive feeds.
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
from conftest import free_port
from same_day import assert_same_day

from jobs.common.config import Settings
from jobs.common.storage import Storage
from jobs.stages import runner
from jobs.workloads.generate import PROFILES, generate, scaled

DAY = dt.date(2026, 1, 1)
K = 5

pytestmark = pytest.mark.slow


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


def test_a_day_on_a_standalone_cluster_equals_the_local_run(spark, cluster, tmp_path):
    master, ui, work_dirs = cluster
    landing = tmp_path / "landing"
    generate(Storage.at(str(landing)), DAY, 1, scaled(PROFILES["ff2010"], 0.002), seed=5)
    # the pure strategies, Feeding Frenzy's and one shared-view planner (Python workers on the
    # executors): every kind of stage work, in less time than all nine strategies
    strategies = ("push-all", "pull-all", "ff-per-pair", "cz-hierarchy2")
    common = {"landing": str(landing), "feed_k": K, "shuffle_partitions": 4}
    common["strategies"] = strategies

    on_cluster = str(tmp_path / "wh_cluster")
    cmd = [sys.executable, "-m", "jobs", "run", "--ds", str(DAY), "-q"]
    cmd += ["--landing", str(landing), "--warehouse", on_cluster, "--spark-master", master]
    env = {**os.environ, "FEEDPIPE_FEED_K": str(K), "FEEDPIPE_SHUFFLE_PARTITIONS": "4"}
    env["FEEDPIPE_STRATEGIES"] = ",".join(strategies)
    env["FEEDPIPE_SPARK_CONF"] = "spark.executor.memory=1g,spark.cores.max=2"
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-4000:]

    # the work ran on the cluster: the application is there, with an executor on each worker
    apps = master_state(ui)["completedapps"]
    assert [a["name"] for a in apps] == [f"feedpipe-run-{DAY}"], apps
    for work in sorted(work_dirs.glob("worker*")):
        assert list(work.glob(f"{apps[0]['id']}/*/stderr")), f"no executor ran on {work.name}"

    local = str(tmp_path / "wh_local")
    runner.run_day(Settings(**common, warehouse=local), DAY, spark)

    assert_same_day(on_cluster, local, landing, DAY, K, "the cluster")

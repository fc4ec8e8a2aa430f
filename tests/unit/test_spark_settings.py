"""What a Spark session and a Connect server are started with (``jobs.common.spark``,
``jobs.common.cds``): the stages' settings, the collector and the class archive."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyspark
import pytest

from jobs.common.cds import archive_path, current_archive, driver_java_options
from jobs.common.config import ConfigError, Settings
from jobs.common.spark import connect_server_command, local_cores, spark_defaults


def test_install_built_an_archive_for_this_spark_and_jvm(monkeypatch):
    monkeypatch.delenv("FEEDPIPE_JAVA_OPTIONS", raising=False)
    archive = current_archive()
    assert archive is not None, "make install (python -m jobs.common.cds) builds the archive"
    assert archive == archive_path()  # named after this pyspark and this JVM's build
    assert pyspark.__version__ in archive.name and archive.stat().st_size > 10_000_000
    assert driver_java_options() == f"-XX:+UseParallelGC -XX:SharedArchiveFile={archive}"


def test_sessions_pass_the_archive_to_the_driver(monkeypatch):
    """(The DAG's tasks: tests/unit/test_dag_file.py.)"""
    monkeypatch.delenv("FEEDPIPE_JAVA_OPTIONS", raising=False)
    option = driver_java_options()
    assert spark_defaults(Settings())["spark.driver.extraJavaOptions"] == option
    own = Settings(spark_conf={"spark.driver.extraJavaOptions": "-Xss4m"})
    assert spark_defaults(own)["spark.driver.extraJavaOptions"] == "-Xss4m"  # yours wins
    monkeypatch.setenv("FEEDPIPE_CDS", "off")  # no archive, the collector stays
    assert driver_java_options() == "-XX:+UseParallelGC"
    assert spark_defaults(Settings())["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC"


def test_operator_java_options_come_after_the_collector_and_the_archive(monkeypatch):
    monkeypatch.setenv("FEEDPIPE_JAVA_OPTIONS", " -Xss4m -XX:TieredStopAtLevel=1 ")
    archive = current_archive()
    assert archive is not None
    expected = f"-XX:+UseParallelGC -XX:SharedArchiveFile={archive} -Xss4m -XX:TieredStopAtLevel=1"
    assert driver_java_options() == expected
    assert spark_defaults(Settings())["spark.driver.extraJavaOptions"] == expected
    monkeypatch.setenv("FEEDPIPE_CDS", "off")
    assert driver_java_options() == "-XX:+UseParallelGC -Xss4m -XX:TieredStopAtLevel=1"
    monkeypatch.setenv("FEEDPIPE_JAVA_OPTIONS", "")
    assert driver_java_options() == "-XX:+UseParallelGC"


def code_cache_bytes(options: str) -> int:
    """``ReservedCodeCacheSize`` of a JVM started with these options, as the JVM reports it."""
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else "java"
    out = subprocess.run(
        [str(java), *options.split(), "-XX:+PrintFlagsFinal", "-version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (line,) = [x for x in out.splitlines() if " ReservedCodeCacheSize " in x]
    return int(line.split("=")[1].split()[0])


def test_a_c1_only_connect_server_keeps_the_default_room_for_compiled_code(monkeypatch):
    """A server whose drivers run the first compiler only (as the test suite's do) would get
    48 MB of code cache, which a long-lived server filled (its JVM then stopped); the server
    keeps the 240 MB tiered compilation has, and an operator's own size stands."""
    monkeypatch.setenv("FEEDPIPE_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")

    def server_options(settings: Settings) -> str:
        cmd = connect_server_command(settings, "127.0.0.1", 1, "1g")
        confs = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--conf")
        return confs["spark.driver.extraJavaOptions"]

    tiered = code_cache_bytes("")
    assert code_cache_bytes(driver_java_options()) == 48 * 2**20 < tiered  # what C1 alone has
    options = server_options(Settings())
    assert "-XX:TieredStopAtLevel=1" in options
    assert code_cache_bytes(options) == tiered == 240 * 2**20
    own = Settings(spark_conf={"spark.driver.extraJavaOptions": "-XX:ReservedCodeCacheSize=64m"})
    assert code_cache_bytes(server_options(own)) == 64 * 2**20


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


def test_every_s3_client_reads_the_same_endpoint_region_and_keys(monkeypatch):
    """pyarrow's, boto3's and S3A's settings come from one reading of the environment
    (``jobs.common.storage.S3Access``): FEEDPIPE_S3_ENDPOINT before AWS_ENDPOINT_URL,
    AWS_REGION before AWS_DEFAULT_REGION, the keys only when an access key is set."""
    from jobs.common.s3a import s3a_conf
    from jobs.common.storage import S3Access

    for name in ("FEEDPIPE_S3_ENDPOINT", "AWS_REGION", "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://s3.example.org:9000")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    access = S3Access.from_env()
    assert access.pyarrow_options() == {
        "endpoint_override": "s3.example.org:9000",
        "scheme": "https",
        "region": "eu-west-3",
    }
    conf = s3a_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "https://s3.example.org:9000"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-3"
    assert "spark.hadoop.fs.s3a.access.key" not in conf  # S3A's own credential chain

    monkeypatch.setenv("FEEDPIPE_S3_ENDPOINT", "127.0.0.1:9100")
    monkeypatch.setenv("AWS_REGION", "us-east-2")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    access = S3Access.from_env()
    assert (access.endpoint, access.region, access.access_key) == (
        "127.0.0.1:9100",
        "us-east-2",
        "k",
    )
    assert access.pyarrow_options() == {
        "endpoint_override": "127.0.0.1:9100",
        "scheme": "http",
        "region": "us-east-2",
        "access_key": "k",
        "secret_key": "s",
    }
    conf = s3a_conf()
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert (conf["spark.hadoop.fs.s3a.access.key"], conf["spark.hadoop.fs.s3a.secret.key"]) == (
        "k",
        "s",
    )

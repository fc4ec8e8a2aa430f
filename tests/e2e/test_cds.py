"""The class-data sharing archive ``make install`` builds (jobs/common/cds.py): drivers started by
spark-submit, by the DAG and by an in-process session map it, and it really serves classes;
and the drivers' collector, which the archive is made under."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobs.common.cds import driver_java_options

APP = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("cds-check").getOrCreate()
assert spark.range(100).selectExpr("sum(id) AS s").first().s == 4950
beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
print("collectors:", ",".join(sorted(b.getName() for b in beans)))
spark.stop()
"""


def class_sources(log: Path) -> dict[str, int]:
    """Classes loaded by the JVM, counted by where they came from (-Xlog:class+load)."""
    counts = {"archive": 0, "base archive": 0, "jar": 0, "other": 0}
    for line in log.read_text().splitlines():
        if "source: shared objects file (top)" in line:
            counts["archive"] += 1
        elif "source: shared objects file" in line:
            counts["base archive"] += 1
        elif "source: jar:" in line or "source: file:" in line:
            counts["jar"] += 1
        elif "source:" in line:
            counts["other"] += 1
    return counts


def submit(tmp_path: Path, java_options: str, name: str) -> tuple[dict[str, int], str]:
    """Classes by source, and the driver's garbage collectors (their JMX names)."""
    script, log = tmp_path / "app.py", tmp_path / f"{name}.log"
    script.write_text(APP)
    bin_dir = Path(sys.executable).parent
    options = f"{java_options} -Xlog:class+load=info:file={log}".strip()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    cmd = [str(bin_dir / "spark-submit"), "--master", "local[1]"]
    cmd += ["--conf", "spark.ui.enabled=false"]
    done = subprocess.run(
        [*cmd, "--conf", f"spark.driver.extraJavaOptions={options}", str(script)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Unable to use shared archive" not in done.stdout + done.stderr
    collectors = next(x for x in done.stdout.splitlines() if x.startswith("collectors:"))
    return class_sources(log), collectors.split(":", 1)[1].strip()


def test_a_driver_with_the_archive_loads_spark_from_it(tmp_path):
    without, default_gc = submit(tmp_path, "", "without")
    with_archive, gc = submit(tmp_path, driver_java_options(), "with")
    # the parallel collector (the JVM's default here is G1), under which the archive loads
    assert gc == "PS MarkSweep,PS Scavenge" and default_gc != gc
    # the same application loads about as many classes either way...
    total_without, total_with = sum(without.values()), sum(with_archive.values())
    assert abs(total_with - total_without) < 0.1 * total_without
    # ...but with the archive most of Spark's (those it would read from jars) come mapped
    assert without["archive"] == 0 and without["jar"] > 3000
    assert with_archive["archive"] > 0.8 * without["jar"]
    assert with_archive["jar"] < 0.2 * without["jar"]

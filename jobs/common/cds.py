"""A class-data sharing (AppCDS) archive of Spark's classes, for faster driver start.

Every stage is its own Spark application (one ``spark-submit`` per DAG task), and each
driver JVM loads and verifies some 20,000 classes before the first job runs. A dynamic
AppCDS archive (JDK 13+, ``-XX:ArchiveClassesAtExit``) records those classes once, already
parsed and verified; drivers started with ``-XX:SharedArchiveFile`` map it instead. The
measured effect is in docs/tuning.md ("Class-data archive").

``python -m jobs.common.cds`` (run by ``make install``) builds the archive by running a small
representative application (Parquet write and read, a shuffle, a join, a window, a pandas
function) under ``spark-submit``. The archive lives in ``<venv>/share/feedpipe/cds/``, is
named after the Spark version, the collector and the JVM that made it, and is used only
when it exists: ``driver_java_options`` leaves it out otherwise, because a JVM pointed at a
missing archive starts without any class sharing, slower than its default. An archive made by
another JVM build, or with jars changed since, is ignored silently by the JVM, which then
also starts without class sharing: rebuild it (``python -m jobs.common.cds``) after upgrading.
``FEEDPIPE_CDS=off`` disables it.

Every driver also runs the parallel garbage collector (:data:`GC_OPTIONS`), and the archive
is made under it: a dynamic archive made under one collector fails to load under another.

"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from jobs.common.config import parse_bool

TRAINING = """
import sys, tempfile
import pandas as pd
from pyspark.sql import SparkSession, Window, functions as F
spark = SparkSession.builder.appName("feedpipe-cds-training").getOrCreate()
with tempfile.TemporaryDirectory() as tmp:
    df = spark.range(2000).select(
        (F.col("id") % 50).alias("k"), F.col("id").cast("double").alias("v"),
        F.current_timestamp().alias("ts"), F.lit("x").alias("s"))
    df.write.partitionBy("s").parquet(tmp + "/t", compression="zstd")
    back = spark.read.parquet(tmp + "/t")
    agg = back.groupBy("k").agg(F.sum("v").alias("total"), F.count_distinct("v"))
    ranked = back.withColumn(
        "r", F.row_number().over(Window.partitionBy("k").orderBy(F.desc("ts"), "v")))
    joined = ranked.where("r <= 3").join(agg, "k").join(F.broadcast(agg.select("k")), "k")
    out = joined.groupBy("k").applyInPandas(
        lambda pdf: pd.DataFrame({"k": [pdf.k.iloc[0]], "n": [len(pdf)]}), "k long, n long")
    out.write.mode("overwrite").parquet(tmp + "/o")
    assert spark.read.parquet(tmp + "/o").count() == 50
spark.stop()
"""


GC_OPTIONS = "-XX:+UseParallelGC"
"""The drivers' garbage collector. A local driver is the executor too, on a few cores, where
G1 (the JVM's default) takes CPU from the tasks for its concurrent work and write barriers:
warm plan runs on a Spark Connect server at ``ff2010 --scale 4`` took 29.6 to 30.6 s under
it and 31.0 to 34.3 s under G1 (docs/tuning.md, "Parallel collector")."""
GC_TAG = "parallelgc"
"""The collector in the archive's name, so an archive made under another is not used."""


def archive_dir() -> Path:
    return Path(sys.prefix) / "share" / "feedpipe" / "cds"


def java_release() -> str:
    """The build of the JVM spark-submit runs (``JAVA_HOME`` or ``java`` on the PATH)."""
    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java" if "JAVA_HOME" in os.environ else None
    out = subprocess.run(
        [str(java) if java else "java", "-version"], capture_output=True, text=True, check=True
    ).stderr
    found = re.search(r"\(build ([^)]+)\)", out) or re.search(r'version "([^"]+)"', out)
    return found.group(1) if found else "unknown"


def archive_path(release: str | None = None) -> Path:
    import pyspark

    name = f"spark-{pyspark.__version__}-{GC_TAG}-java-{release or java_release()}.jsa"
    return archive_dir() / re.sub(r"[^A-Za-z0-9._-]", "_", name)


def current_archive() -> Path | None:
    """The archive drivers should map, if there is one (no JVM is started to find it)."""
    if not parse_bool(os.environ.get("FEEDPIPE_CDS") or "on", "FEEDPIPE_CDS"):
        return None
    folder = archive_dir()
    if not folder.is_dir():
        return None
    import pyspark

    found = sorted(folder.glob(f"spark-{pyspark.__version__}-{GC_TAG}-java-*.jsa"))
    return found[0] if len(found) == 1 else None  # build() keeps one


JAVA_OPTIONS_ENV = "FEEDPIPE_JAVA_OPTIONS"
"""JVM options added to every driver's, after the collector and the archive: a place for an
operator's own flags that keeps both (``spark.driver.extraJavaOptions`` in ``spark_conf``
replaces them). The test suite sets ``-XX:TieredStopAtLevel=1`` there (docs/operations.md,
"Driver JVM options")."""


def driver_java_options() -> str:
    """``spark.driver.extraJavaOptions`` for a driver on this machine: the collector
    (:data:`GC_OPTIONS`), the class archive when there is one, then
    ``FEEDPIPE_JAVA_OPTIONS``."""
    archive = current_archive()
    options = f"{GC_OPTIONS} -XX:SharedArchiveFile={archive}" if archive else GC_OPTIONS
    extra = os.environ.get(JAVA_OPTIONS_ENV, "").strip()
    return f"{options} {extra}" if extra else options


def build(force: bool = False) -> Path:
    """Run the training application under ``spark-submit`` and keep its class archive."""
    target = archive_path()
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob("*.jsa"):
        stale.unlink()
    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as tmp:
        script, partial = Path(tmp) / "training.py", Path(tmp) / "archive.jsa"
        script.write_text(TRAINING)
        env = {
            **os.environ,
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
            "PYSPARK_PYTHON": sys.executable,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        cmd = [str(bin_dir / "spark-submit"), "--master", "local[2]"]
        cmd += ["--conf", "spark.ui.enabled=false", "--conf", "spark.log.level=WARN"]
        options = f"{GC_OPTIONS} -XX:ArchiveClassesAtExit={partial}"
        cmd += ["--driver-java-options", options, str(script)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0 or not partial.exists():
            raise RuntimeError(f"the CDS training application failed:\n{done.stderr[-3000:]}")
        shutil.move(str(partial), target.with_suffix(".tmp"))
        os.replace(target.with_suffix(".tmp"), target)
    return target


if __name__ == "__main__":
    print(build(force="--force" in sys.argv))

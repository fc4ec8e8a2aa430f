"""Spark's S3A connector for local runs and tests.

Spark's own distribution carries no S3 connector. Where no registry serves ``hadoop-aws``,
the install step takes ``hadoop-aws-3.3.1.jar`` and ``aws-java-sdk-bundle-1.11.901.jar`` out
of the PyPI source package ``sagemaker-pyspark==1.4.5`` (checked against its sha256) into
``<venv>/share/feedpipe/jars``. A real cluster should use the ``hadoop-aws`` that matches its
Hadoop version instead (``FEEDPIPE_S3A_JARS``, comma-separated paths; see docs/storage.md).

``python -m jobs.common.s3a`` fetches the jars (idempotent).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from jobs.common.storage import S3Access

PACKAGE, VERSION = "sagemaker-pyspark", "1.4.5"
SHA256 = "05ca2d5081d7138ce29a8fb0a9cba077f28c825288ed07aed46a82e63c0bf1fb"
JARS = ("hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar")


def jar_dir() -> Path:
    return Path(sys.prefix) / "share" / "feedpipe" / "jars"


def jar_paths() -> list[str]:
    """The S3A jars to put on Spark's class path (``FEEDPIPE_S3A_JARS`` wins)."""
    env = os.environ.get("FEEDPIPE_S3A_JARS")
    if env:
        return [p for p in env.split(",") if p]
    return [str(jar_dir() / j) for j in JARS if (jar_dir() / j).exists()]


def s3a_conf(endpoint: str | None = None) -> dict[str, str]:
    """Spark settings for S3A against ``endpoint`` (``FEEDPIPE_S3_ENDPOINT``; AWS when unset).

    Hadoop 3.3's defaults for these timeouts are strings with units ("60s") that Spark 4's
    Hadoop 3.4 client cannot read from the older jar: plain numbers are given instead."""
    access = S3Access.from_env()
    if endpoint:
        access = dataclasses.replace(access, endpoint=endpoint)
    conf = {
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.threads.keepalivetime": "60",
        "spark.hadoop.fs.s3a.connection.establish.timeout": "30000",
        "spark.hadoop.fs.s3a.connection.timeout": "200000",
        "spark.hadoop.fs.s3a.connection.request.timeout": "0",
        "spark.hadoop.fs.s3a.multipart.purge.age": "86400",
        "spark.hadoop.fs.s3a.connection.ttl": "300000",
        "spark.hadoop.fs.s3a.connection.idle.time": "60000",
        "spark.hadoop.fs.s3a.connection.acquisition.timeout": "60000",
    }
    conf.update(access.hadoop_options())
    jars = jar_paths()
    if jars:
        conf["spark.jars"] = ",".join(jars)
    return conf


def fetch(target: Path | None = None) -> list[Path]:
    """Download the source package once, verify it, keep only the two jars."""
    target = target or jar_dir()
    wanted = [target / j for j in JARS]
    if all(p.exists() for p in wanted):
        return wanted
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # pip reads the index from PyPI only (--isolated); the sdist is not built
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--isolated",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--disable-pip-version-check",
                f"{PACKAGE}=={VERSION}",
                "-d",
                tmp,
            ],
            check=True,
        )
        (archive,) = Path(tmp).glob("*.tar.gz")
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != SHA256:
            raise RuntimeError(f"{archive.name}: sha256 {digest} != {SHA256}")
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = member.name.rsplit("/", 1)[-1]
                if name in JARS:
                    src = tar.extractfile(member)
                    assert src is not None
                    with open(target / name, "wb") as out:
                        shutil.copyfileobj(src, out)
    missing = [str(p) for p in wanted if not p.exists()]
    if missing:
        raise RuntimeError(f"jars not found in {PACKAGE} {VERSION}: {missing}")
    return wanted


if __name__ == "__main__":
    for path in fetch():
        print(path)

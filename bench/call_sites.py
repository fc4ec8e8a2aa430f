"""PySpark's DataFrame call sites on small days: a two-day ``feedpipe backfill`` of ``ff2010``
at a small scale with ``spark.python.sql.dataFrameDebugging.enabled`` false (the stages'
setting, ``jobs/common/spark.py``) and true (PySpark's default), alternated in one run.

    python -m bench.call_sites [--scale 0.002] [--reps 2] [--work var/bench/jvm]

With it on, every DataFrame call records its Python call site in the JVM before it runs
(more Py4J calls); what that costs shows on days whose stages are mostly driver work.
Reported as ``bench.jvm_options`` reports (wall and machine CPU seconds, medians, ratios);
writes ``bench/results/call_sites_ff2010_<scale>.json``.
"""

from __future__ import annotations

from typing import Any

from bench.jvm_options import compare

KEY = "spark.python.sql.dataFrameDebugging.enabled"
VARIANTS = {"off": {}, "on": {"FEEDPIPE_SPARK_CONF": f"{KEY}=true"}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return compare("call_sites", VARIANTS, argv, __doc__)


if __name__ == "__main__":
    main()

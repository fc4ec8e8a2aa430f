"""The driver program of ``feedpipe connect-server`` (``spark-submit`` runs this file).

It starts the application's Spark session and holds it open. The Spark Connect service comes
up with the session, as a Spark plugin (``org.apache.spark.sql.connect.SparkConnectPlugin``,
set by ``jobs.common.spark.connect_server_command`` with the session's other settings), and
serves clients until the server is stopped: a signal to the ``spark-submit`` process (its
JVM, which then stops the session) or to this one.

Why not Spark's own ``SparkConnectServer``: it forces per-session artifact isolation, which
gives every client session its own class loader, and Spark keys its cache of generated code
by class loader. Every stage run (a new client session) then compiled all its generated
classes again and the JVM warmed them up from scratch: at ``ff2010 --scale 4`` about 90
compilations and 25 to 40 s of JIT compiler time per plan run (docs/tuning.md,
"Connect server without artifact isolation"). Started this way, without isolation, the
sessions share the generated classes of the runs before them.
"""

from __future__ import annotations

import os
import signal
import threading


def main() -> int:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    parent = os.getppid()  # the spark-submit JVM; when it is gone, so is the service
    while not stop.wait(1.0) and os.getppid() == parent:
        pass
    if os.getppid() == parent:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env bash
# Entrypoint of the feedpipe image: runs its arguments (airflow ..., spark-class ..., feedpipe ...).
#
# Spark drivers and workers announce an address that the other containers connect back to.
# Unless the service sets them, use this container's own address: the stages' spark-submit
# would otherwise bind the driver to 127.0.0.1, which no executor on a worker can reach.
set -euo pipefail
if [[ -z "${SPARK_LOCAL_IP:-}" ]]; then
    # the first non-loopback address of the container's interfaces
    SPARK_LOCAL_IP="$(hostname -I | awk '{print $1}')"
    export SPARK_LOCAL_IP
fi
export SPARK_LOCAL_HOSTNAME="${SPARK_LOCAL_HOSTNAME:-$SPARK_LOCAL_IP}"
exec "$@"

#!/usr/bin/env bash
# One-shot set-up of Airflow (the airflow-init service): migrate the metadata database, then
# store the admin's password for Airflow's simple auth manager. Safe to run again.
set -euo pipefail
: "${AIRFLOW_ADMIN_USER:?AIRFLOW_ADMIN_USER is not set}"
: "${AIRFLOW_ADMIN_PASSWORD:?AIRFLOW_ADMIN_PASSWORD is not set}"
: "${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?the passwords file is not configured}"

airflow db migrate

python - <<'PY'
import json
import os

path = os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w", encoding="utf-8") as f:
    json.dump({os.environ["AIRFLOW_ADMIN_USER"]: os.environ["AIRFLOW_ADMIN_PASSWORD"]}, f)
    f.write("\n")
os.chmod(path, 0o600)
print(f"admin user {os.environ['AIRFLOW_ADMIN_USER']!r} ready")
PY

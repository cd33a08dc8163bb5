"""`AIRFLOW__CORE__HOSTNAME_CALLABLE` for the scale-out test: two Celery workers on one machine
would record the same task-instance hostname; each one is told its name through the
environment instead."""

from __future__ import annotations

import os

ENV_VAR = "SCALEOUT_WORKER_NAME"


def worker_name() -> str:
    return os.environ[ENV_VAR]

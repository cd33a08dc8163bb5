"""Real training runs for the runs pages' tests: ``python -m training`` on a version the real
pipeline built, recording into the test's store (METADATA_DB_URL) and writing metrics.jsonl,
diagnosis.json and checkpoints under CHECKPOINT_URL, as a launcher would start it. The
AIRFLOW_CTX_* variables are what Airflow gives a task, so the run carries a dag_run id."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def train_run(
    env: dict[str, str],
    store_url: str,
    run_id: str,
    version_id: str,
    *,
    dag_run_id: str | None = None,
    **train: object,
) -> subprocess.CompletedProcess:
    child = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRAIN_", "DATASET_", "RUN_ID", "METADATA_DB_URL", "AIRFLOW_CTX_"))
    }
    child.update(env)
    child.update(
        {
            "METADATA_DB_URL": store_url,
            "DATASET_NAME": "digits",
            "DATASET_VERSION": version_id,
            "RUN_ID": run_id,
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            "TRAIN_DEVICE": "cpu",
            "TRAIN_MODEL": "mlp",
            "TRAIN_EPOCHS": "3",
            "TRAIN_BATCH_SIZE": "16",
            "LAKETRAIN_LAUNCHER": "local",
        }
    )
    if dag_run_id:
        child.update({"AIRFLOW_CTX_DAG_ID": "train", "AIRFLOW_CTX_DAG_RUN_ID": dag_run_id})
    child.update({f"TRAIN_{k.upper()}": str(v) for k, v in train.items()})
    proc = subprocess.run(
        [sys.executable, "-m", "training"],
        env=child,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc

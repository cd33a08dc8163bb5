"""MLflow, when a team uses it: a real ``mlflow server`` on 127.0.0.1 gets the run's params,
its metric history, its dataset input (name, the version id as digest, the version folder as
source), the best checkpoint as an artifact and the RUN_ID / dag run tags. A server that is
down costs the run a warning, not its result; without MLFLOW_TRACKING_URI nothing of mlflow is
imported."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.training.trainer_support import REPO, base_env, digits_home, read_result, run_trainer

TRAIN = {"epochs": 2, "batch_size": 32, "model": "mlp", "device": "cpu", "seed": 1}


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return digits_home(tmp_path_factory)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("mlflow")
    root = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    exe = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [str(exe), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        + ["--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}"]
        + ["--artifacts-destination", str(root / "artifacts")],
        # No job runner: with a database backend mlflow 3 otherwise starts a huey consumer and
        # seven worker processes (each importing mlflow) that a tracking client never uses, and
        # waits for them at shutdown.
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        stdout=open(root / "server.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(
                "mlflow server did not start:\n" + (root / "server.log").read_text()[-3000:]
            )
        time.sleep(0.1)
    yield url
    # The server's graceful shutdown is not under test (its database is thrown away): the
    # whole group at once, rather than waiting seconds for uvicorn to drain.
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.mark.slow
def test_a_run_is_mirrored_to_a_real_mlflow_server(
    digits: dict, mlflow_server: str, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    env = base_env(digits, tmp_path, "mlf-run", **TRAIN)
    env["MLFLOW_TRACKING_URI"] = mlflow_server
    env["AIRFLOW_CTX_DAG_RUN_ID"] = "manual__2026-12-01T10:00:00+00:00"
    env["AIRFLOW_CTX_DAG_ID"] = "train"
    proc = run_trainer(env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MLflow" not in proc.stderr  # no warning: the mirror worked
    result = read_result(tmp_path, "mlf-run")

    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("laketrain-digits")
    [run] = client.search_runs([exp.experiment_id], "tags.RUN_ID = 'mlf-run'")
    assert run.info.status == "FINISHED"
    assert run.data.tags["laketrain.dag_run_id"] == env["AIRFLOW_CTX_DAG_RUN_ID"]
    assert run.data.tags["laketrain.version_id"] == digits["version_id"]
    params = run.data.params
    assert (params["epochs"], params["batch_size"], params["seed"]) == ("2", "32", "1")
    # the per-step history: every train line of metrics.jsonl, at its step
    lines = [
        json.loads(x) for x in (tmp_path / "mlf-run" / "metrics.jsonl").read_text().splitlines()
    ]
    train_steps = [r["step"] for r in lines if r.get("kind") == "train"]
    history = client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in history) == sorted(train_steps) and len(train_steps) > 2
    val = client.get_metric_history(run.info.run_id, "val_accuracy")
    assert len(val) == 2 and max(m.value for m in val) == pytest.approx(result["best_metric"])
    [inp] = run.inputs.dataset_inputs
    assert inp.dataset.name == "digits" and inp.dataset.digest == digits["version_id"][:36]
    assert inp.dataset.source.endswith(f"/datasets/digits/{digits['version_id']}")
    arts = {a.path for a in client.list_artifacts(run.info.run_id, "best_checkpoint")}
    assert "best_checkpoint/state.pt" in arts


def test_a_tracking_server_that_is_down_does_not_fail_the_training(
    digits: dict, tmp_path: Path
) -> None:
    pytest.importorskip("mlflow")
    env = base_env(digits, tmp_path, "mlf-down", **TRAIN)
    env["MLFLOW_TRACKING_URI"] = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    proc = run_trainer(env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_result(tmp_path, "mlf-down")["status"] == "succeeded"
    assert "MLflow start failed, the run goes on without MLflow" in proc.stderr
    assert proc.stderr.count("goes on without MLflow") == 1  # one warning, not one per step


def test_without_a_tracking_uri_nothing_of_mlflow_is_imported(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from training.api import RunReport\n"
        "r = RunReport(None, run_id='x', dataset='d')\n"
        "r.log(step=1, loss=0.5)\n"
        "assert r.mlflow is None\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'training.mlflow_log')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
    assert "training.mlflow_log" not in out.stdout

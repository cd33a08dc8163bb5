"""Mirroring a run to MLflow, when a team uses it: with ``MLFLOW_TRACKING_URI`` set, the run's
params, its per-step metrics, its dataset input (the dataset's name, the version id as the
digest, the version's folder URL as the source), its best checkpoint as an artifact and tags
for ``RUN_ID`` and the dag run. laketrain's own store stays the source of truth.

Without MLFLOW_TRACKING_URI nothing here imports mlflow (``RunReport`` does not even import
this module). A tracking server that is down, or an mlflow that is not installed, never fails
the training: one warning, and the run goes on without MLflow.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger("training")

FLUSH_EVERY = 50  # metric values per log_batch call: one HTTP request, not one per step
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
# The client retries an unreachable server for minutes by default: a few seconds here.
CLIENT_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "preempted": "KILLED"}


def enabled() -> bool:
    return bool(os.environ.get("MLFLOW_TRACKING_URI", "").strip())


def version_source(dataset: str, version_id: str) -> str:
    """The version's folder as a URL (``DATA_ROOT/datasets/<name>/<id>``), else its laketrain
    URI."""
    root = os.environ.get("DATA_ROOT")
    if root:
        return (Path(root).resolve() / "datasets" / dataset / version_id).as_uri()
    return f"laketrain://datasets/{dataset}/{version_id}"


class MlflowRun:
    """One laketrain run as one MLflow run (rank 0 only). Every method is safe to call after a
    failure: the first error disables the mirror with a warning."""

    def __init__(self, run_id: str, dataset: str) -> None:
        self.run_id, self.dataset = run_id, dataset
        self.client: Any = None
        self.mlflow_run_id: str | None = None
        self.disabled = False
        self._pending: list[Any] = []

    def _fail(self, what: str, exc: BaseException) -> None:
        if not self.disabled:
            from pipeline.redact import redact_text

            log.warning(
                "MLflow %s failed, the run goes on without MLflow: %s",
                what,
                redact_text(f"{type(exc).__name__}: {exc}")[:500],
            )
        self.disabled = True

    def start(self, version_id: str, params: dict[str, Any], *, name: str | None = None) -> None:
        if self.disabled or self.mlflow_run_id is not None:
            return
        try:
            for key, value in CLIENT_DEFAULTS.items():
                os.environ.setdefault(key, value)
            from mlflow.tracking import MlflowClient

            self.client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
            experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or f"laketrain-{self.dataset}"
            found = self.client.get_experiment_by_name(experiment)
            exp_id = found.experiment_id if found else self.client.create_experiment(experiment)
            tags = {
                "laketrain.run_id": self.run_id,
                "RUN_ID": self.run_id,
                "laketrain.dataset": self.dataset,
                "laketrain.version_id": version_id,
            }
            dag_run = os.environ.get("AIRFLOW_CTX_DAG_RUN_ID")
            if dag_run:
                tags["laketrain.dag_run_id"] = dag_run
                tags["laketrain.dag_id"] = os.environ.get("AIRFLOW_CTX_DAG_ID", "")
            run = self.client.create_run(exp_id, tags=tags, run_name=name or self.run_id)
            self.mlflow_run_id = run.info.run_id
            self._log_params(params)
            self._log_input(version_id)
        except Exception as exc:
            self._fail("start", exc)

    def _log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(str(k), str(v)[:MAX_PARAM_CHARS]) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):  # the server's limit per batch
            self.client.log_batch(self.mlflow_run_id, params=items[i : i + 100])

    def _log_input(self, version_id: str) -> None:
        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(
            name=self.dataset,
            digest=version_id[:36],  # MLflow keeps at most 36 characters of a digest
            source_type="laketrain",
            source=version_source(self.dataset, version_id),
        )
        tag = InputTag(key="mlflow.data.context", value="training")
        self.client.log_inputs(self.mlflow_run_id, [DatasetInput(dataset, [tag])])

    def log(self, record: dict[str, Any]) -> None:
        """One metrics.jsonl line: its numeric fields as metrics at its ``step``."""
        if self.disabled or self.mlflow_run_id is None:
            return
        try:
            import time

            from mlflow.entities import Metric

            step = int(record.get("step") or 0)
            now = int(time.time() * 1000)
            for key, value in record.items():
                if key in ("step", "kind") or isinstance(value, bool):
                    continue
                if isinstance(value, int | float) and value == value:  # numbers, not NaN
                    self._pending.append(Metric(key, float(value), now, step))
            if len(self._pending) >= FLUSH_EVERY:
                self.flush()
        except Exception as exc:
            self._fail("logging metrics", exc)

    def flush(self) -> None:
        if self.disabled or self.mlflow_run_id is None or not self._pending:
            return
        try:
            batch, self._pending = self._pending, []
            for i in range(0, len(batch), 1000):
                self.client.log_batch(self.mlflow_run_id, metrics=batch[i : i + 1000])
        except Exception as exc:
            self._fail("logging metrics", exc)

    def finish(self, status: str, checkpoint_url: str | None) -> None:
        """The last metrics, the best checkpoint as the ``best_checkpoint`` artifact, the end."""
        if self.disabled or self.mlflow_run_id is None:
            return
        self.flush()
        if checkpoint_url and not self.disabled:
            try:
                self._log_checkpoint(checkpoint_url)
            except Exception as exc:
                self._fail("logging the best checkpoint", exc)
        if not self.disabled:
            try:
                self.client.set_terminated(self.mlflow_run_id, STATUS.get(status, "FAILED"))
            except Exception as exc:
                self._fail("ending the run", exc)

    def _log_checkpoint(self, url: str) -> None:
        from pipeline.storage import store_for

        store = store_for(url)
        self.client.set_tag(self.mlflow_run_id, "laketrain.checkpoint_url", url)
        with tempfile.TemporaryDirectory(prefix="laketrain-mlflow-") as tmp:
            local = Path(tmp) / "best_checkpoint"
            local.mkdir()
            for obj in store.list(url.rstrip("/") + "/"):
                name = obj.rsplit("/", 1)[-1]
                store.get_file(obj, local / name)
            self.client.log_artifacts(self.mlflow_run_id, str(local), "best_checkpoint")

"""A run's records: `RunReport` writes the metrics lines (``metrics.jsonl``), the final
``result.json`` beside the checkpoints, and, with METADATA_DB_URL, the run's rows in the
metadata store (run, checkpoints, events; `RunRecorder`). It is the public API's reporting
object (training.api) and the built-in trainer's.

Only rank 0 writes. A store that is down must not kill a GPU run: every store failure is
logged and training goes on.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_PREEMPTED
from training.metrics import MetricsLog
from training.resume import RunEvents

log = logging.getLogger("training")

STATUS_CODES = {"succeeded": EXIT_OK, "preempted": EXIT_PREEMPTED, "failed": EXIT_FAILED}


class RunRecorder:
    """Run and checkpoint rows in the metadata store (only when ``enabled``: rank 0 with
    METADATA_DB_URL). Failures are logged, training goes on."""

    def __init__(self, run_id: str, dataset: str, enabled: bool) -> None:
        self.run_id, self.dataset = run_id, dataset
        self.enabled = enabled
        self.started = False
        self._sent = 0  # events already sent

    def _call(self, fn_name: str, *args: Any, **kwargs: Any) -> None:
        if not self.enabled:
            return
        try:
            import pipeline.runs as runs

            getattr(runs, fn_name)(*args, **kwargs)
        except Exception:
            log.exception("metadata store: %s failed (training continues)", fn_name)

    def started_run(self, version_id: str, params: dict[str, Any], **record: Any) -> None:
        """The run's row, with what reproduces it as this process sees it: its code version,
        requirements.lock, command, and ``record`` (config, manifest_sha256...)."""
        if self.enabled:
            try:
                from pipeline.runs import repro

                record = {**repro.here(), "command": repro.process_command(), **record}
            except Exception:
                log.exception("measuring the code version failed (training continues)")
        self._call(
            "record_run_started",
            self.run_id,
            self.dataset,
            version_id,
            params,
            dag_id=os.environ.get("AIRFLOW_CTX_DAG_ID"),
            dag_run_id=os.environ.get("AIRFLOW_CTX_DAG_RUN_ID"),
            launcher=os.environ.get("LAKETRAIN_LAUNCHER", "python -m training"),
            **record,
        )
        self.started = True

    def checkpoint(
        self, step: int, epoch: int, url: str, metric: float | None, is_best: bool
    ) -> None:
        self._call(
            "record_checkpoint", self.run_id, step, epoch, url, metric=metric, is_best=is_best
        )

    def checkpoint_deleted(self, step: int, url: str) -> None:
        self._call("record_checkpoint_deleted", self.run_id, step)

    def finished(self, status: str, **kwargs: Any) -> None:
        if self.started:
            self._call("record_run_finished", self.run_id, status, **kwargs)

    def events(self, events: RunEvents) -> None:
        """Send the events not sent yet (before the run's row exists, a queued row from the
        launcher may still take them; with no row at all they stay in result.json only)."""
        for event in events.items[self._sent :]:
            self._call(
                "record_run_event",
                self.run_id,
                event["level"],
                event["message"],
                time=event["time"],
            )
        self._sent = len(events.items)


class RunReport:
    """Metrics lines, result.json and store rows of one run.

    ``manager``: the run's CheckpointManager (result.json and metrics.jsonl go beside its
    checkpoints; its commits and deletions become store rows). ``metric_name`` names the
    metric handed to ``manager.save(metric=...)``; with ``higher_is_better=False`` that metric
    was negated for the manager (which ranks higher-is-better) and is recorded un-negated.
    """

    def __init__(
        self,
        manager: Any,
        *,
        run_id: str | None = None,
        dataset: str | None = None,
        metadata_db_url: str | None = None,
        rank: int = 0,
        metrics_path: Path | None = None,
        metric_name: str | None = None,
        higher_is_better: bool = True,
    ) -> None:
        self.rank = rank
        self.is_main = rank == 0
        self.metric_name = metric_name
        self.higher_is_better = higher_is_better
        self.events = RunEvents()
        self.result: dict[str, Any] | None = None
        self._own_dir: Path | None = None
        if metrics_path is None and self.is_main and manager is not None:
            self._own_dir = Path(tempfile.mkdtemp(prefix="laketrain-report-"))
            metrics_path = self._own_dir / "metrics.jsonl"
        self.mlflow: Any = None  # an MlflowRun with MLFLOW_TRACKING_URI set (rank 0)
        if self.is_main and os.environ.get("MLFLOW_TRACKING_URI", "").strip():
            from training.mlflow_log import MlflowRun  # mlflow itself only inside its calls

            self.mlflow = MlflowRun(run_id or "", dataset or "")
        self.metrics = self._new_log(metrics_path if self.is_main else None)
        # step -> epoch for the store's checkpoint rows; default: the last epoch logged.
        self.epoch_of: Callable[[int], int] | None = None
        self._last_epoch = 0
        self.manager: Any = None
        self.store = RunRecorder(
            run_id or "", dataset or "", self.is_main and bool(metadata_db_url)
        )
        if manager is not None:
            self.attach(manager)

    @classmethod
    def from_env(cls, manager: Any, **kwargs: Any) -> RunReport:
        """RUN_ID, DATASET_NAME and METADATA_DB_URL from the environment; rank from the
        manager."""
        return cls(
            manager,
            run_id=os.environ.get("RUN_ID") or manager.run_id,
            dataset=os.environ.get("DATASET_NAME"),
            metadata_db_url=os.environ.get("METADATA_DB_URL") or None,
            rank=manager.rank,
            **kwargs,
        )

    def attach(self, manager: Any) -> None:
        """Report through ``manager``: its commits and retention deletions become store rows,
        and each commit refreshes ``<run_url>/metrics.jsonl`` (in its upload thread, so the
        training loop never waits on it)."""
        self.manager = manager
        if not self.store.run_id:
            self.store.run_id = manager.run_id
        if self.mlflow is not None and not self.mlflow.run_id:
            self.mlflow.run_id = manager.run_id
        manager.on_commit = self._on_commit
        manager.on_delete = self.store.checkpoint_deleted

    # --------------------------------------------------------------------------- metrics
    def start(
        self,
        version_id: str,
        params: dict[str, Any],
        *,
        config: dict[str, Any] | None = None,
        manifest_sha256: str | None = None,
    ) -> None:
        """The run is running on ``version_id`` with ``params`` (the store's run row).
        ``config``: the resolved config, when it holds more than ``params`` (default: params);
        ``manifest_sha256``: the version's (default: the store's row of the version)."""
        config = dict(params if config is None else config)
        self.store.started_run(version_id, params, config=config, manifest_sha256=manifest_sha256)
        self.store.events(self.events)
        if self.mlflow is not None:
            self.mlflow.start(version_id, params)
            for rec in self.metrics.records:  # a resume: the history up to its checkpoint
                self.mlflow.log(rec)

    def log(self, record: dict[str, Any] | None = None, **fields: Any) -> None:
        """One metrics.jsonl line (rank 0 only): ``report.log(step=10, loss=0.3)``. Give each
        line a ``step``: a resume keeps the lines up to the checkpoint's step."""
        rec = {**(record or {}), **fields}
        if isinstance(rec.get("epoch"), int):
            self._last_epoch = rec["epoch"]
        if self.is_main:
            self.metrics.write(rec)

    @property
    def records(self) -> list[dict[str, Any]]:
        return self.metrics.records

    def state_dict(self) -> dict[str, Any]:
        """For the checkpoint: the lines so far, so that a resume rewrites metrics.jsonl with
        exactly the history up to its step (no gap, no duplicate)."""
        return {"metrics": list(self.metrics.records)}

    def load_state_dict(self, state: dict[str, Any], *, up_to_step: int | None = None) -> None:
        records = [
            r
            for r in state.get("metrics", [])
            if up_to_step is None or r.get("step", 0) <= up_to_step
        ]
        path = self.metrics.path
        self.metrics.close()
        self.metrics = self._new_log(path, records)

    def _new_log(self, path: Path | None, records: list[dict[str, Any]] | None = None) -> Any:
        """The metrics log; with MLflow on, one whose every line is mirrored there too (the
        built-in Trainer writes its lines to ``report.metrics`` directly)."""
        if self.mlflow is None:
            return MetricsLog(path, records)
        return _MirroredLog(path, records, mirror=self.mlflow)

    def upload_metrics(self) -> None:
        """metrics.jsonl beside the checkpoints now (synchronously; finish() does it too)."""
        if self.is_main and self.manager is not None and self.metrics.path is not None:
            self.metrics.flush()
            self.manager.upload_file("metrics.jsonl", self.metrics.path)

    def _on_commit(self, info: dict[str, Any]) -> None:
        # In the manager's upload thread: the list is copied whole (the loop only appends).
        step, metric = int(info["step"]), info.get("metric")
        if metric is not None and not self.higher_is_better:
            metric = -metric
        epoch = self.epoch_of(step) if self.epoch_of is not None else self._last_epoch
        self.store.checkpoint(step, epoch, info["url"], metric, bool(info.get("is_best")))
        if self.is_main and self.manager is not None:
            lines = "".join(json.dumps(r) + "\n" for r in list(self.metrics.records))
            try:
                self.manager.store.write_bytes(
                    f"{self.manager.run_url}/metrics.jsonl", lines.encode()
                )
            except Exception:
                log.exception("metrics.jsonl upload failed (training continues)")

    # ---------------------------------------------------------------------------- finish
    def finish(
        self,
        status: str,
        *,
        best_metric: float | None = None,
        metric_name: str | None = None,
        epochs_done: int = 0,
        steps: int = 0,
        error: str | None = None,
        exit_code: int | None = None,
        **extra: Any,
    ) -> int:
        """End the run: wait for the checkpoint uploads, then write metrics.jsonl and
        result.json and record the result in the store. ``status`` is succeeded, preempted
        or failed; returns the exit code (0, 75, 1 unless ``exit_code`` says otherwise). A
        checkpoint upload that failed turns the run into a failure: its checkpoints are not
        safe."""
        if status not in STATUS_CODES:
            raise ValueError(f"status must be one of {', '.join(STATUS_CODES)}, got {status!r}")
        code = STATUS_CODES[status] if exit_code is None else exit_code
        manager = self.manager
        if manager is not None:
            try:
                manager.close()
            except Exception as exc:
                log.error("checkpoint upload failed: %s", exc)
                status, error, code = "failed", f"checkpoint upload failed: {exc}", EXIT_FAILED
        if not self.is_main:
            return code
        best = _safe(manager.best_pointer) or {} if manager is not None else {}
        latest = _safe(manager.latest_pointer) or {} if manager is not None else {}
        self.result = {
            "status": status,
            "best_metric": best_metric,
            "metric_name": metric_name or self.metric_name,
            "checkpoint_url": best.get("url") or latest.get("url"),
            "epochs_done": epochs_done,
            "steps": steps,
            "latest_checkpoint_url": latest.get("url"),
            "run_url": manager.run_url if manager is not None else None,
            "error": error,
            "exit_code": code,
            "events": list(self.events.items),
            **extra,
        }
        if manager is not None:
            try:
                self.upload_metrics()
            except Exception:
                log.exception("uploading metrics.jsonl failed")
            try:
                manager.write_result(self.result)
            except Exception:
                log.exception("writing result.json failed")
                code = code or EXIT_FAILED
                self.result["exit_code"] = code
        self.metrics.close()
        self.store.events(self.events)
        self.store.finished(
            status,
            best_metric=best_metric,
            metric_name=self.result["metric_name"],
            checkpoint_url=self.result["checkpoint_url"],
            error=error,
            exit_code=code,
        )
        if self.mlflow is not None:
            self.mlflow.finish(status, self.result["checkpoint_url"])
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
        return code


class _MirroredLog(MetricsLog):
    def __init__(self, path: Path | None, records: Any = None, *, mirror: Any) -> None:
        super().__init__(path, records)
        self.mirror = mirror

    def write(self, record: dict[str, Any]) -> None:
        super().write(record)
        self.mirror.log(self.records[-1])


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None

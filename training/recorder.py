"""The run's rows in the metadata store, written by rank 0 only and only with METADATA_DB_URL:
the run, its checkpoints, its events (pipeline.runs). A store that is down must not kill a GPU
run: every failure is logged and training goes on."""

from __future__ import annotations

import logging
import os
from typing import Any

from training.config import RunTarget
from training.resume import RunEvents

log = logging.getLogger("training")


class RunRecorder:
    """Run and checkpoint rows in the metadata store (only with METADATA_DB_URL, only rank 0).
    A store that is down must not kill a GPU run: failures are logged, training goes on."""

    def __init__(self, target: RunTarget, enabled: bool) -> None:
        self.target = target
        self.enabled = enabled and bool(target.metadata_db_url)
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

    def started_run(self, version_id: str, params: dict[str, Any]) -> None:
        self._call(
            "record_run_started",
            self.target.run_id,
            self.target.dataset,
            version_id,
            params,
            dag_id=os.environ.get("AIRFLOW_CTX_DAG_ID"),
            dag_run_id=os.environ.get("AIRFLOW_CTX_DAG_RUN_ID"),
            launcher=os.environ.get("LAKETRAIN_LAUNCHER", "python -m training"),
        )
        self.started = True

    def checkpoint(
        self, step: int, epoch: int, url: str, metric: float | None, is_best: bool
    ) -> None:
        self._call(
            "record_checkpoint",
            self.target.run_id,
            step,
            epoch,
            url,
            metric=metric,
            is_best=is_best,
        )

    def checkpoint_deleted(self, step: int, url: str) -> None:
        self._call("record_checkpoint_deleted", self.target.run_id, step)

    def finished(self, status: str, **kwargs: Any) -> None:
        if self.started:
            self._call("record_run_finished", self.target.run_id, status, **kwargs)

    def events(self, events: RunEvents) -> None:
        """Send the events not sent yet (before the run's row exists, a queued row from the
        launcher may still take them; with no row at all they stay in result.json only)."""
        for event in events.items[self._sent :]:
            self._call(
                "record_run_event",
                self.target.run_id,
                event["level"],
                event["message"],
                time=event["time"],
            )
        self._sent = len(events.items)

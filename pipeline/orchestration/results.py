"""The trainer's outcome, read back by the train DAG's record_result task: the
``CHECKPOINT_URL/<RUN_ID>/result.json`` any launcher's trainer writes, recorded on the run."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("laketrain.orchestration")


def result_url(run_id: str) -> str:
    from pipeline.settings import get_settings

    return f"{get_settings().checkpoint_url.rstrip('/')}/{run_id}/result.json"


@contextmanager
def _aws_env(aws_conn_id: str = "aws_default") -> Iterator[None]:
    """boto3 reads its own AWS_* variables: put the connection's into this (task) process for
    the duration of one read, and take them out again."""
    from pipeline.orchestration.env_contract import aws_credentials

    creds = aws_credentials(aws_conn_id)
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def read_result(run_id: str) -> dict[str, Any] | None:
    """The trainer's ``CHECKPOINT_URL/<RUN_ID>/result.json``, or None when it wrote none."""
    from pipeline.storage import store_for

    url = result_url(run_id)
    with _aws_env():
        try:
            data = store_for(url).read_bytes(url)
        except FileNotFoundError:
            return None
    return json.loads(data)


def _result_wait_seconds() -> float:
    """How long a launch that was stopped from outside may still be writing result.json: the
    launcher's SIGTERM grace (the trainer saves a checkpoint, then its result), and a margin."""
    from pipeline.orchestration.launchers import LauncherConfig

    return LauncherConfig.from_env().kill_grace_seconds + 5.0


def await_result(run_id: str, wait_s: float, poll_s: float = 0.5) -> dict[str, Any] | None:
    """result.json, waiting up to ``wait_s`` for it to appear."""
    deadline = time.monotonic() + wait_s
    while True:
        result = read_result(run_id)
        if result is not None or time.monotonic() >= deadline:
            return result
        time.sleep(poll_s)


def record_finished(
    run_id: str, *, launch_failed: str | None, exit_report: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Record the run's outcome from result.json (status, best metric, checkpoint URL).

    A command that wrote no result.json (a user's own trainer, or one that never started) is
    recorded from its exit status (``exit_report``: the launch task's ``{code, message}``),
    and the record says that the result was missing.
    """
    from pipeline.runs import record_run_event, record_run_finished

    if exit_report is None and launch_failed:
        # The launch task left no exit report: it was stopped from outside (marked failed, timed
        # out) and, as it stopped, SIGTERMed the trainer, which may still be saving its
        # checkpoint and then result.json. This task starts at once, so wait for them within
        # the launcher's grace instead of recording "failed" for a run that was preempted.
        result = await_result(run_id, _result_wait_seconds())
    else:
        result = read_result(run_id)
    report = exit_report or {}
    code = report.get("code")
    if result is None and exit_report is not None:
        from pipeline.redact import redact_url

        missing = (
            f"no result.json at {redact_url(result_url(run_id))}: recorded from the exit status"
        )
        status = {0: "succeeded", 75: "preempted"}.get(code, "failed")
        if launch_failed and status == "succeeded":
            status = "failed"
        words = report.get("message") or launch_failed
        result = {
            "status": status,
            "error": f"{words}; {missing}" if status != "succeeded" else None,
        }
        log.warning("run %s: %s (exit code %s)", run_id, missing, code)
        if status == "succeeded":
            record_run_event(run_id, "WARNING", f"exit code 0; {missing}")
    elif result is not None and report.get("message") and code not in (0, None):
        # The trainer's own words come first; the exit status says what became of it.
        result = {**result, "error": result.get("error") or report["message"]}
    result = result or {}
    status = result.get("status") or ("failed" if launch_failed else "succeeded")
    if launch_failed and status == "succeeded":
        status = "failed"
    if status not in ("succeeded", "failed", "preempted"):
        status = "failed"
    row = record_run_finished(
        run_id,
        status,
        best_metric=result.get("best_metric"),
        metric_name=result.get("metric_name"),
        checkpoint_url=result.get("checkpoint_url"),
        # the trainer's own words ("batch_size: 64 ... lower the batch size") beat ours
        error=(result.get("error") or launch_failed) if status != "succeeded" else None,
        # the launcher saw the process end: its exit status beats what result.json says
        exit_code=code if code is not None else result.get("exit_code"),
    )
    log.info(
        "run %s finished: %s, %s=%s, checkpoint %s",
        run_id,
        status,
        row.get("metric_name"),
        row.get("best_metric"),
        row.get("checkpoint_url"),
    )
    return {
        "run_id": run_id,
        "status": status,
        "best_metric": row.get("best_metric"),
        "metric_name": row.get("metric_name"),
        "checkpoint_url": row.get("checkpoint_url"),
    }

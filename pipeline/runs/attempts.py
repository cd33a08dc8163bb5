"""A run's attempts (``run_attempts``): one row each, opened by ``record_run_started``, ended
by ``record_run_finished`` with its status, exit code and error."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from pipeline.metadata.runs import RUN_QUEUED, RUN_RUNNING, RunAttempt, TrainingRun


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _duration(start: Any, end: Any) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def _attempt(run: TrainingRun, n: int, status: str, launcher: str | None, now: Any) -> RunAttempt:
    return RunAttempt(
        run_id=run.run_id, n=n, status=status, launcher=launcher or run.launcher, started_at=now
    )


def _current_attempt(session: Any, run_id: str) -> RunAttempt | None:
    return (
        session.execute(
            select(RunAttempt).where(RunAttempt.run_id == run_id).order_by(RunAttempt.n.desc())
        )
        .scalars()
        .first()
    )


def _close_open_attempts(session: Any, run_id: str, now: Any) -> None:
    # An attempt that never recorded its end (killed outright, the worker lost) ends where
    # the next one starts; its status says it was cut short.
    for a in session.execute(
        select(RunAttempt).where(RunAttempt.run_id == run_id, RunAttempt.ended_at.is_(None))
    ).scalars():
        a.ended_at = now
        if a.status in (RUN_QUEUED, RUN_RUNNING):
            a.status = "lost"


def _attempt_dict(a: RunAttempt) -> dict:
    return {
        "n": a.n,
        "status": a.status,
        "launcher": a.launcher,
        "started_at": _iso(a.started_at),
        "ended_at": _iso(a.ended_at),
        "duration_s": _duration(a.started_at, a.ended_at),
        "exit_code": a.exit_code,
        "error": a.error,
    }

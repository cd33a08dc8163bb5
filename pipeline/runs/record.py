"""Recording training runs, their attempts and checkpoints in the metadata store.

Called by the trainer (when METADATA_DB_URL is set) and by the train DAG / launchers; read by
the CLI and the UI ("which runs used this version, where are their checkpoints").

Everything is idempotent by ``run_id``: RUN_ID stays the same across retries of one run, so a
retry's ``record_run_started`` updates the same row (and counts the attempt) and a re-recorded
checkpoint step updates its row. No torch and no Airflow here.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from pipeline.metadata.base import utcnow
from pipeline.metadata.runs import (
    RUN_FINAL_STATUSES,
    RUN_QUEUED,
    RUN_RUNNING,
    RUN_STATUSES,
    Checkpoint,
    TrainingRun,
)
from pipeline.runs.attempts import (
    _attempt,
    _close_open_attempts,
    _current_attempt,
    _duration,
)
from pipeline.runs.fill import (
    LAUNCHER_FIELDS,
    _command_from_params,
    _manifest_sha256,
    _next_name,
    _record_fields,
)

__all__ = [
    "RUN_STATUSES",
    "RunNotFoundError",
    "record_checkpoint",
    "record_checkpoint_deleted",
    "record_run_event",
    "record_run_finished",
    "record_run_details",
    "record_run_started",
]


class RunNotFoundError(LookupError):
    """A checkpoint or a result was recorded for a run_id that has no row yet."""


def _store(store: Any) -> Any:
    if store is not None:
        return store
    from pipeline.metadata.store import open_store

    return open_store()


def _check_run_id(run_id: str) -> None:
    if not isinstance(run_id, str) or not run_id or len(run_id) > 255:
        raise ValueError(
            f"run_id must be a non-empty string of at most 255 characters, got {run_id!r}"
        )


def _check_metric(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    # NaN/inf cannot be stored portably (PostgreSQL accepts them, JSON and SQLite readers choke).
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value


def record_run_started(
    run_id: str,
    dataset: str,
    version_id: str,
    params: dict,
    *,
    dag_id: str | None = None,
    dag_run_id: str | None = None,
    launcher: str | None = None,
    status: str = RUN_RUNNING,
    store: Any = None,
    **record: Any,
) -> dict:
    """Create the run's row, or — on a retry of the same run_id — mark it running again and
    count the attempt. Returns the row as a dict.

    Each call counts one attempt, except ``running`` after ``queued``: a launcher (the train
    DAG) records ``status="queued"`` before it starts the trainer, and the trainer's own
    ``running`` call then joins that attempt (params are merged) instead of counting another."""
    _check_run_id(run_id)
    if not dataset:
        raise ValueError("dataset must be a non-empty string")
    if not version_id:
        raise ValueError("version_id must be a non-empty string")
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    if status not in RUN_STATUSES:
        raise ValueError(f"status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
    extra = _record_fields(record)
    s = _store(store)
    # Retries: two first attempts racing to insert the same run_id (the loser updates), or two
    # new runs of one version racing for the same readable name (the loser takes the next).
    for attempt in range(5):
        try:
            with s.session() as session:
                # A no-op write first: it takes SQLite's write lock (and PostgreSQL's row lock),
                # so the read below cannot be stale when two attempts race (SQLite ignores
                # FOR UPDATE, and a plain read-modify-write there loses an attempt).
                session.execute(
                    update(TrainingRun)
                    .where(TrainingRun.run_id == run_id)
                    .values(updated_at=TrainingRun.updated_at)
                )
                run = session.execute(
                    select(TrainingRun).where(TrainingRun.run_id == run_id).with_for_update()
                ).scalar_one_or_none()
                now = utcnow()
                if "command" not in extra and not (run and run.command):
                    extra.update(_command_from_params(params))
                if "manifest_sha256" not in extra and not (run and run.manifest_sha256):
                    extra["manifest_sha256"] = _manifest_sha256(session, version_id)
                if run is None:
                    run = TrainingRun(
                        run_id=run_id,
                        dataset=dataset,
                        version_id=version_id,
                        params=dict(params),
                        status=status,
                        dag_id=dag_id,
                        dag_run_id=dag_run_id,
                        launcher=launcher,
                        attempts=1,
                        started_at=now,
                        updated_at=now,
                        name=_next_name(session, dataset, version_id),
                        **extra,
                    )
                    session.add(run)
                    session.flush()
                    session.add(_attempt(run, 1, status, launcher, now))
                else:
                    # A launcher records the attempt as "queued", then the trainer it started
                    # records "running": one attempt, two calls. Anything else is a new attempt.
                    same_attempt = run.status == RUN_QUEUED and status == RUN_RUNNING
                    if same_attempt:
                        run.params = {**(run.params or {}), **params}
                        current = _current_attempt(session, run_id)
                        if current is None:
                            session.add(_attempt(run, run.attempts or 1, status, launcher, now))
                        else:
                            current.status = status
                    else:
                        run.attempts = (run.attempts or 0) + 1
                        run.params = dict(params)
                        _close_open_attempts(session, run_id, now)
                        session.add(_attempt(run, run.attempts, status, launcher, now))
                    for key, value in extra.items():
                        # The launcher knows what it started (argv, image): the trainer's own
                        # view of its command does not replace it within the same attempt.
                        if same_attempt and key in LAUNCHER_FIELDS and getattr(run, key):
                            continue
                        setattr(run, key, value)
                    if run.name is None:
                        run.name = _next_name(session, dataset, version_id)
                    run.dataset, run.version_id = dataset, version_id
                    run.status, run.error, run.finished_at, run.updated_at = status, None, None, now
                    run.dag_id = dag_id or run.dag_id
                    run.dag_run_id = dag_run_id or run.dag_run_id
                    run.launcher = launcher or run.launcher
                session.flush()
                return _run_dict(run)
        except IntegrityError:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


def record_run_details(run_id: str, store: Any = None, **record: Any) -> dict:
    """Add reproducibility fields (``RECORD_FIELDS``) to a recorded run, e.g. the image digest
    a container launcher learnt after the start."""
    _check_run_id(run_id)
    extra = _record_fields(record)
    with _store(store).session() as session:
        run = _locked_run(session, run_id)
        for key, value in extra.items():
            setattr(run, key, value)
        run.updated_at = utcnow()
        session.flush()
        return _run_dict(run)


def record_run_finished(
    run_id: str,
    status: str,
    best_metric: float | None = None,
    metric_name: str | None = None,
    checkpoint_url: str | None = None,
    error: str | None = None,
    store: Any = None,
    *,
    exit_code: int | None = None,
) -> dict:
    """Set the run's final ``status`` (succeeded / failed / preempted) and its results, and
    end its current attempt (status, exit code, error). Fields passed as None keep what the
    row already has; a second call (the trainer's, then its launcher's) updates the attempt."""
    _check_run_id(run_id)
    if status not in RUN_FINAL_STATUSES:
        raise ValueError(f"status must be one of {', '.join(RUN_FINAL_STATUSES)}, got {status!r}")
    best_metric = _check_metric("best_metric", best_metric)
    with _store(store).session() as session:
        run = _locked_run(session, run_id)
        now = utcnow()
        run.status, run.finished_at, run.updated_at = status, now, now
        if best_metric is not None:
            run.best_metric = best_metric
        if metric_name is not None:
            run.metric_name = metric_name
        if checkpoint_url is not None:
            run.checkpoint_url = checkpoint_url
        run.error = error[:10_000] if error else None
        current = _current_attempt(session, run_id)
        if current is None:  # a row from before 0008: its attempt starts being recorded here
            current = _attempt(run, run.attempts or 1, status, None, run.started_at)
            session.add(current)
        current.status, current.ended_at = status, now
        current.error = run.error
        if exit_code is not None:
            current.exit_code = int(exit_code)
        session.flush()
        return _run_dict(run)


def record_checkpoint(
    run_id: str,
    step: int,
    epoch: int | None,
    url: str,
    metric: float | None = None,
    is_best: bool = False,
    store: Any = None,
) -> dict:
    """Record a committed checkpoint (upsert on (run_id, step)). ``is_best`` moves the run's
    best flag to this checkpoint and copies its metric and URL onto the run."""
    _check_run_id(run_id)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got {step!r}")
    if not url or "://" not in url:
        raise ValueError(f"url must be a checkpoint URL (file:// or s3://), got {url!r}")
    metric = _check_metric("metric", metric)
    with _store(store).session() as session:
        run = _locked_run(session, run_id)
        ckpt = session.execute(
            select(Checkpoint).where(Checkpoint.run_id == run_id, Checkpoint.step == step)
        ).scalar_one_or_none()
        if ckpt is None:
            ckpt = Checkpoint(run_id=run_id, step=step)
            session.add(ckpt)
        ckpt.epoch, ckpt.url, ckpt.metric = epoch, url, metric
        ckpt.is_best, ckpt.created_at, ckpt.deleted_at = bool(is_best), utcnow(), None
        if is_best:
            session.execute(
                update(Checkpoint)
                .where(Checkpoint.run_id == run_id, Checkpoint.step != step)
                .values(is_best=False)
            )
            if metric is not None:
                run.best_metric = metric
            run.checkpoint_url = url
        run.updated_at = utcnow()
        session.flush()
        return _checkpoint_dict(ckpt)


def record_checkpoint_deleted(run_id: str, step: int, store: Any = None) -> bool:
    """Mark a checkpoint as removed by retention (the row stays for lineage). False if unknown."""
    with _store(store).session() as session:
        ckpt = session.execute(
            select(Checkpoint).where(Checkpoint.run_id == run_id, Checkpoint.step == step)
        ).scalar_one_or_none()
        if ckpt is None:
            return False
        ckpt.deleted_at = utcnow()
        return True


EVENT_LEVELS = ("INFO", "WARNING", "ERROR")
MAX_EVENTS = 100  # per run, across attempts: the newest are kept


def record_run_event(
    run_id: str, level: str, message: str, *, time: str | None = None, store: Any = None
) -> bool:
    """Append ``{time, level, message}`` to the run's ``events`` (kept across attempts, the
    newest MAX_EVENTS). False when the run has no row yet (nothing to attach it to)."""
    _check_run_id(run_id)
    level = str(level).upper()
    if level not in EVENT_LEVELS:
        raise ValueError(f"level must be one of {', '.join(EVENT_LEVELS)}, got {level!r}")
    if not isinstance(message, str) or not message:
        raise ValueError("message must be a non-empty string")
    event = {"time": time or utcnow().isoformat(), "level": level, "message": message[:10_000]}
    with _store(store).session() as session:
        run = session.get(TrainingRun, run_id, with_for_update=True)
        if run is None:
            return False
        # A new list, not an in-place append: the JSON column only sees assignments.
        run.events = [*(run.events or []), event][-MAX_EVENTS:]
        run.updated_at = utcnow()
        return True


def _locked_run(session: Any, run_id: str) -> TrainingRun:
    """The run's row, locked for this transaction (SELECT ... FOR UPDATE where the database
    has it), or RunNotFoundError: results, details and checkpoints attach to a started run."""
    run = session.get(TrainingRun, run_id, with_for_update=True)
    if run is None:
        raise RunNotFoundError(f"run {run_id!r} is not recorded; call record_run_started first")
    return run


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _run_dict(run: TrainingRun) -> dict:
    return {
        "run_id": run.run_id,
        "dataset": run.dataset,
        "version_id": run.version_id,
        "params": dict(run.params or {}),
        "status": run.status,
        "best_metric": run.best_metric,
        "metric_name": run.metric_name,
        "checkpoint_url": run.checkpoint_url,
        "dag_id": run.dag_id,
        "dag_run_id": run.dag_run_id,
        "launcher": run.launcher,
        "attempts": run.attempts,
        "error": run.error,
        "events": list(run.events or []),
        "started_at": _iso(run.started_at),
        "updated_at": _iso(run.updated_at),
        "finished_at": _iso(run.finished_at),
        "duration_s": _duration(run.started_at, run.finished_at),
        "name": run.name,
        "manifest_sha256": run.manifest_sha256,
        "command": list(run.command) if run.command is not None else None,
        "image": run.image,
        "image_digest": run.image_digest,
        "code_version": dict(run.code_version) if run.code_version is not None else None,
        "lock_sha256": run.lock_sha256,
        "config": dict(run.config) if run.config is not None else None,
    }


def _checkpoint_dict(c: Checkpoint) -> dict:
    return {
        "run_id": c.run_id,
        "step": c.step,
        "epoch": c.epoch,
        "url": c.url,
        "metric": c.metric,
        "is_best": bool(c.is_best),
        "created_at": _iso(c.created_at),
        "deleted_at": _iso(c.deleted_at),
    }

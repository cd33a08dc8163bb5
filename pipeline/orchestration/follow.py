"""``make run``'s follow-along: the lines it prints while the stack runs.

The formatting functions take the plain dicts the REST API and ``pipeline.runs`` /
``pipeline.datasets.queries`` return, so they are tested on real rows without a stack.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

RUN_TYPES = {
    "asset_triggered": "by an asset event",
    "scheduled": "on schedule",
    "manual": "by hand",
    "operator_triggered": "by another run",
}
MAX_ERROR_CHARS = 300  # one readable line; the whole error is in the task log and the run row


def metric(value: Any) -> str:
    """4 significant digits: 0.9817708333333334 → 0.9818."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:.4g}"


def one_line(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def run_state_line(dag_id: str, run: Mapping[str, Any]) -> str:
    how = RUN_TYPES.get(run.get("run_type", ""), run.get("run_type", ""))
    return f"  {dag_id:<11} {run['dag_run_id']}  ({how}): {run.get('state')}"


def version_line(v: Mapping[str, Any]) -> str:
    return (
        f"      version {v.get('tag')}: {v.get('samples')} samples "
        f"(+{v.get('added')} -{v.get('removed')})"
    )


def run_result_line(
    run_id: str,
    row: Mapping[str, Any] | None,
    failure: str | None = None,
    *,
    dag_state: str = "failed",
) -> str:
    """The outcome of a training run: its metric and checkpoint when it succeeded, its error
    when it did not. ``row`` is ``pipeline.runs.get_run``'s (None: the run was never recorded:
    resolve refused it, or skipped it); ``failure`` is what the DAG run's failed task said."""
    if row is None:
        if dag_state == "success":
            return f"      run {run_id}: nothing to train (skipped; see the resolve task's log)"
        why = failure or "it failed before training started (see the resolve task's log)"
        return f"      run {run_id}: failed: {one_line(why)}"
    status = row.get("status")
    if status == "succeeded":
        parts = [f"      run {run_id}: succeeded"]
        if row.get("metric_name") and row.get("best_metric") is not None:
            parts.append(f"{row['metric_name']}={metric(row['best_metric'])}")
        if row.get("checkpoint_url"):
            parts.append(f"checkpoint {row['checkpoint_url']}")
        return ", ".join(parts)
    why = row.get("error") or failure or "no error recorded (see the launch task's log)"
    return f"      run {run_id}: {status}: {one_line(why)}"


def run_page_line(row: Mapping[str, Any] | None, base_url: str = "") -> str | None:
    """The run's readable name and the address of its page (the UI's run page under the
    api-server), or None for a run that was never recorded."""
    if not row:
        return None
    from pipeline.runs.names import run_page_url

    name = row.get("name") or row["run_id"]
    return f"      {name}: {run_page_url(row['run_id'], base_url)}"


def new_versions(
    rows: Iterable[Mapping[str, Any]], seen: set[str], since: datetime | None = None
) -> list[Mapping[str, Any]]:
    """The versions of ``rows`` (newest first, as ``list_versions`` gives them) not printed
    before and created at or after ``since``, oldest first; marks them all as seen."""
    out = []
    for v in rows:
        vid = v.get("version_id")
        if not vid or vid in seen:
            continue
        seen.add(vid)
        if since is not None and _parse_time(v.get("created_at")) < since:
            continue  # there before this `make run` started: not news
        out.append(v)
    return list(reversed(out))


def _parse_time(value: Any) -> datetime:
    try:
        t = datetime.fromisoformat(str(value))
    except ValueError:
        return datetime.max.replace(tzinfo=UTC)  # unknown: show it rather than hide it
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def failed_task_message(api: Any, dag_id: str, dag_run_id: str) -> str | None:
    """``<task>: <error>`` of the DAG run's first failed task, from the REST API (its task
    instances, then the error in its log); None when the API does not say."""
    status, body = api.get(f"/api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances")
    if status != 200 or not isinstance(body, dict):
        return None
    failed = [ti for ti in body.get("task_instances", []) if ti.get("state") == "failed"]
    if not failed:
        return None
    ti = sorted(failed, key=lambda t: str(t.get("start_date") or ""))[0]
    task_id, attempt = ti.get("task_id"), ti.get("try_number") or 1
    status, log = api.get(
        f"/api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}/logs/{attempt}"
    )
    error = _error_from_log(log) if status == 200 else None
    return f"{task_id}: {error}" if error else f"task {task_id} failed (see its log)"


def _error_from_log(log: Any) -> str | None:
    """The exception message of a structured task log (Airflow 3's ``content`` entries)."""
    entries = log.get("content") if isinstance(log, dict) else None
    if not isinstance(entries, list):
        return None
    for entry in reversed(entries):
        if not isinstance(entry, dict):
            continue
        for detail in entry.get("error_detail") or []:
            if isinstance(detail, dict) and detail.get("exc_value"):
                return str(detail["exc_value"])
    return None


class Follower:
    """Prints what happens: new runs and their state changes, new versions, finished runs."""

    def __init__(
        self,
        api: Any,
        env: Mapping[str, str],
        log: Callable[[str], None] = print,
        *,
        since: datetime | None = None,
    ) -> None:
        self.api, self.env, self.log = api, env, log
        self.since = since
        self.seen: dict[tuple[str, str], str] = {}
        self.seen_versions: set[str] = set()

    def poll(self) -> None:
        for dag_id in ("lake_ingest", "train"):
            for run in reversed(self.api.dag_runs(dag_id, limit=10)):
                key = (dag_id, run["dag_run_id"])
                state = run.get("state")
                if self.seen.get(key) == state:
                    continue
                self.seen[key] = state
                self.log(run_state_line(dag_id, run))
                if state == "success" and dag_id == "lake_ingest":
                    self._print_versions()
                if state in ("success", "failed") and dag_id == "train":
                    self._print_run(run)

    def _with_env(self, fn: Callable[[], Any]) -> Any:
        saved = dict(os.environ)
        os.environ.update({k: v for k, v in self.env.items() if not k.startswith("AIRFLOW")})
        try:
            from pipeline.settings import get_settings

            get_settings.cache_clear()
            return fn()
        except Exception as exc:  # following along must never stop the stack
            return exc
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def _print_versions(self) -> None:
        def newest() -> list[dict]:
            from pipeline.datasets.queries import list_versions

            return list_versions(limit=50)

        rows = self._with_env(newest)
        if isinstance(rows, list):
            for v in new_versions(rows, self.seen_versions, self.since):
                self.log(version_line(v))

    def _print_run(self, run: dict) -> None:
        from pipeline.orchestration.env_contract import sanitize_run_id

        run_id = sanitize_run_id("train", run["dag_run_id"])

        def get() -> dict | None:
            from pipeline.runs import get_run

            return get_run(run_id)

        row = self._with_env(get)
        if isinstance(row, Exception):
            return
        failure = None
        if run.get("state") == "failed" and not (row and row.get("error")):
            try:
                failure = failed_task_message(self.api, "train", run["dag_run_id"])
            except Exception:  # the API restarting: the line still says "failed"
                failure = None
        self.log(run_result_line(run_id, row, failure, dag_state=run.get("state") or "failed"))
        page = run_page_line(row, getattr(self.api, "base", "") or "")
        if page:
            self.log(page)

"""Reading runs: the list, one run in full (attempts, checkpoints, per-epoch metrics), two
runs compared (params, metrics, the data diff of their versions). Used by the CLI
(``laketrain runs/run/compare``) and the UI's run pages; plain dicts, shapes in docs/runs.md.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import func, select

from pipeline.metadata.runs import Checkpoint, RunAttempt, TrainingRun
from pipeline.runs.attempts import _attempt_dict
from pipeline.runs.record import (
    RunNotFoundError,
    _checkpoint_dict,
    _run_dict,
    _store,
)

MIN_PREFIX = 4  # a run_id prefix shorter than this is not looked up
# Columns of the per-epoch table, in this order when present (others follow, sorted).
EPOCH_COLUMNS = (
    "epoch",
    "step",
    "train_loss",
    "train_accuracy",
    "val_loss",
    "val_accuracy",
    "val_rmse",
    "val_mae",
    "lr",
)


def _versions(session: Any, version_ids: set[str]) -> dict[str, Any]:
    """version_id -> DatasetVersion row, for the ones the store knows."""
    if not version_ids:
        return {}
    from pipeline.metadata.datasets import DatasetVersion

    rows = session.execute(
        select(DatasetVersion).where(DatasetVersion.version_id.in_(sorted(version_ids)))
    ).scalars()
    return {v.version_id: v for v in rows}


def _champions(session: Any, run_ids: set[str]) -> set[str]:
    """Which of ``run_ids`` hold their dataset's champion alias now."""
    from pipeline.runs.models import current_aliases

    return {a["run_id"] for a in current_aliases(session).values()} & run_ids


def _summary(run: TrainingRun, version: Any, champions: set[str]) -> dict[str, Any]:
    d = _run_dict(run)
    d["version_tag"] = version.tag if version is not None else None
    d["is_champion"] = run.run_id in champions
    return d


def resolve_run(ref: str, store: Any = None) -> str:
    """The run_id a reference names: a run_id, a readable name (``digits-3fa2b1c0-2``), or a
    unique run_id prefix (>= MIN_PREFIX characters). RunNotFoundError names what was tried."""
    ref = (ref or "").strip()
    if not ref:
        raise RunNotFoundError("run: empty reference (give a RUN_ID or a run name)")
    with _store(store).session() as session:
        if session.get(TrainingRun, ref) is not None:
            return ref
        by_name = session.execute(
            select(TrainingRun.run_id).where(TrainingRun.name == ref)
        ).scalar_one_or_none()
        if by_name is not None:
            return by_name
        if len(ref) >= MIN_PREFIX:
            like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            hits = list(
                session.execute(
                    select(TrainingRun.run_id)
                    .where(TrainingRun.run_id.like(like, escape="\\"))
                    .limit(6)
                ).scalars()
            )
            if len(hits) == 1:
                return hits[0]
            if hits:
                raise RunNotFoundError(
                    f"run {ref!r} is ambiguous: {', '.join(hits[:5])}"
                    + (", ..." if len(hits) > 5 else "")
                )
    raise RunNotFoundError(f"no run {ref!r} (a RUN_ID, a run name or a unique RUN_ID prefix)")


def list_runs(
    dataset: str | None = None,
    status: str | None = None,
    store: Any = None,
    *,
    limit: int = 100,
    offset: int = 0,
) -> dict[str, Any]:
    """Runs, newest first: ``{"total": n, "runs": [summary, ...]}``. A summary is
    ``get_run``'s row without checkpoints/attempt_log/metrics, plus ``version_tag`` and
    ``is_champion``."""
    where = []
    if dataset is not None:
        where.append(TrainingRun.dataset == dataset)
    if status is not None:
        where.append(TrainingRun.status == status)
    with _store(store).session() as session:
        total = session.execute(
            select(func.count()).select_from(TrainingRun).where(*where)
        ).scalar_one()
        rows = list(
            session.execute(
                select(TrainingRun)
                .where(*where)
                .order_by(TrainingRun.started_at.desc(), TrainingRun.run_id)
                .limit(limit)
                .offset(offset)
            ).scalars()
        )
        versions = _versions(session, {r.version_id for r in rows})
        champs = _champions(session, {r.run_id for r in rows})
        runs = [_summary(r, versions.get(r.version_id), champs) for r in rows]
    return {"total": total, "runs": runs, "limit": limit, "offset": offset}


def runs_for_version(version_id: str, store: Any = None) -> list[dict]:
    """Every run that trained on ``version_id``, newest first (summaries, as list_runs)."""
    with _store(store).session() as session:
        rows = list(
            session.execute(
                select(TrainingRun)
                .where(TrainingRun.version_id == version_id)
                .order_by(TrainingRun.started_at.desc(), TrainingRun.run_id)
            ).scalars()
        )
        versions = _versions(session, {version_id})
        champs = _champions(session, {r.run_id for r in rows})
        return [_summary(r, versions.get(r.version_id), champs) for r in rows]


def get_run(run_id: str, store: Any = None, *, metrics: bool = False) -> dict | None:
    """One run in full, or None. The summary fields (list_runs) plus:

    - ``attempts`` (int, the count) and ``attempt_log``: ``[{n, status, launcher, started_at,
      ended_at, duration_s, exit_code, error}]``, oldest first;
    - ``checkpoints``: ``[{run_id, step, epoch, url, metric, is_best, created_at,
      deleted_at}]``, oldest first; ``run_url``: the run's folder ``CHECKPOINT_URL/<RUN_ID>``;
    - ``version``: ``{dataset, version_id, tag, created_at, samples, manifest_sha256}`` or
      None when the store never saw the version; ``aliases``: the aliases it holds now;
    - with ``metrics=True``, ``metrics``: ``run_metrics(row)`` (reads metrics.jsonl and
      diagnosis.json beside the checkpoints).
    """
    with _store(store).session() as session:
        run = session.get(TrainingRun, run_id)
        if run is None:
            return None
        version = _versions(session, {run.version_id}).get(run.version_id)
        champs = _champions(session, {run_id})
        out = _summary(run, version, champs)
        out["checkpoints"] = [
            _checkpoint_dict(c)
            for c in session.execute(
                select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.step)
            ).scalars()
        ]
        out["attempt_log"] = [
            _attempt_dict(a)
            for a in session.execute(
                select(RunAttempt).where(RunAttempt.run_id == run_id).order_by(RunAttempt.n)
            ).scalars()
        ]
        out["version"] = (
            {
                "dataset": version.dataset,
                "version_id": version.version_id,
                "tag": version.tag,
                "created_at": version.created_at.isoformat(),
                "samples": version.samples,
                "manifest_sha256": version.manifest_sha256,
            }
            if version is not None
            else None
        )
        out["aliases"] = ["champion"] if out["is_champion"] else []
    out["run_url"] = _run_url(out)
    if metrics:
        out["metrics"] = run_metrics(out)
    return out


def _run_url(row: dict[str, Any]) -> str | None:
    """The run's folder beside its checkpoints: from a checkpoint URL, else CHECKPOINT_URL."""
    for url in [c["url"] for c in row.get("checkpoints", [])] + [row.get("checkpoint_url")]:
        if url and "/step-" in url:
            return url.rsplit("/step-", 1)[0]
    try:
        from pipeline.settings import get_settings

        return f"{get_settings().checkpoint_url.rstrip('/')}/{row['run_id']}"
    except Exception:
        return None


def run_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """The run's ``metrics.jsonl`` (and ``diagnosis.json``) from beside its checkpoints:
    ``{"source": url, "train": [step records], "epochs": [epoch records], "columns": [the
    per-epoch table's columns], "diagnosis": [finding dicts], "error": None | why it could not
    be read}``. ``row`` is get_run's dict (or anything with ``run_url``/``run_id``)."""
    out: dict[str, Any] = {
        "source": None,
        "train": [],
        "epochs": [],
        "columns": [],
        "diagnosis": [],
        "error": None,
    }
    base = row.get("run_url") or _run_url(row)
    if not base:
        out["error"] = "no checkpoint URL for this run"
        return out
    out["source"] = f"{base}/metrics.jsonl"
    try:
        from pipeline.storage import store_for

        objects = store_for(out["source"])
        text = objects.read_bytes(out["source"]).decode()
    except FileNotFoundError:
        out["error"] = f"{out['source']} does not exist (yet)"
        return out
    except Exception as exc:  # S3 down, no credentials: the page still shows the rest
        from pipeline.redact import redact_text

        out["error"] = redact_text(f"reading {out['source']} failed: {exc}")
        return out
    records = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn last line of a run still writing
        if isinstance(rec, dict):
            records.append(rec)
    out["train"] = [r for r in records if r.get("kind", "train") == "train"]
    out["epochs"] = [r for r in records if r.get("kind") == "epoch"]
    keys = {k for r in out["epochs"] for k in r if k != "kind"}
    out["columns"] = [c for c in EPOCH_COLUMNS if c in keys] + sorted(keys - set(EPOCH_COLUMNS))
    try:
        diag = json.loads(objects.read_bytes(f"{base}/diagnosis.json"))
        out["diagnosis"] = list(diag.get("findings") or [])
    except Exception:
        pass  # no diagnosis written (a user's trainer, a run still going)
    return out


def compare_runs(a: str, b: str, store: Any = None, *, limit: int = 20) -> dict[str, Any]:
    """Two runs side by side (``a``, ``b``: run references, resolve_run's rules):

    ``{"a": get_run(a, metrics=True), "b": ..., "params": [{name, a, b}] (only those that
    differ, params and config merged), "metrics": [{name, a, b}] (best metric and the last
    epoch's values), "data": {"same_version": bool, "diff": diff_versions(...) with at most
    ``limit`` paths per list, or None, "class_counts": [{label, a, b}], "error": None | why},
    "diff_command": "laketrain diff A B"}``."""
    s = _store(store)
    ra = get_run(resolve_run(a, s), s, metrics=True)
    rb = get_run(resolve_run(b, s), s, metrics=True)
    assert ra is not None and rb is not None
    pa = {**(ra.get("config") or {}), **ra["params"]}
    pb = {**(rb.get("config") or {}), **rb["params"]}
    params = [
        {"name": k, "a": pa.get(k), "b": pb.get(k)}
        for k in sorted(set(pa) | set(pb))
        if pa.get(k) != pb.get(k)
    ]
    metrics = [
        {
            "name": "best " + str(ra.get("metric_name") or rb.get("metric_name") or "metric"),
            "a": ra.get("best_metric"),
            "b": rb.get("best_metric"),
        }
    ]
    last_a = (ra["metrics"]["epochs"] or [{}])[-1]
    last_b = (rb["metrics"]["epochs"] or [{}])[-1]
    for k in [c for c in EPOCH_COLUMNS if c in last_a or c in last_b if c not in ("step",)]:
        metrics.append({"name": f"last {k}", "a": last_a.get(k), "b": last_b.get(k)})
    metrics.append({"name": "duration_s", "a": ra.get("duration_s"), "b": rb.get("duration_s")})
    return {
        "a": ra,
        "b": rb,
        "params": params,
        "metrics": metrics,
        "data": _data_diff(ra, rb, s, limit),
        "diff_command": f"laketrain diff {ra['version_id'][:12]} {rb['version_id'][:12]}",
    }


def _data_diff(ra: dict, rb: dict, store: Any, limit: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "same_version": ra["version_id"] == rb["version_id"],
        "diff": None,
        "class_counts": [],
        "error": None,
    }
    if out["same_version"]:
        return out
    from pipeline.datasets.queries import VersionNotFound, diff_versions, get_version

    try:
        out["diff"] = diff_versions(ra["version_id"], rb["version_id"], limit=limit, store=store)
        ca = _class_counts(get_version(ra["version_id"], store=store))
        cb = _class_counts(get_version(rb["version_id"], store=store))
        out["class_counts"] = [
            {"label": k, "a": ca.get(k, 0), "b": cb.get(k, 0)} for k in sorted(set(ca) | set(cb))
        ]
    except VersionNotFound as exc:
        out["error"] = str(exc)
    return out


def _class_counts(version: dict[str, Any]) -> dict[str, int]:
    """Samples per class of a version (train and val together), from its manifest's counts;
    {} for a regression version (its targets have no classes)."""
    per = (version.get("counts") or {}).get("per_split") or {}
    out: dict[str, int] = {}
    for split in per.values():
        for label, n in ((split or {}).get("classes") or {}).items():
            out[str(label)] = out.get(str(label), 0) + int(n)
    return out


__all__ = [
    "compare_runs",
    "get_run",
    "list_runs",
    "resolve_run",
    "run_metrics",
    "runs_for_version",
]

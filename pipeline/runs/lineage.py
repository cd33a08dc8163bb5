"""Lineage, both ways. Down: a model (a run) → its run record → the dataset version it trained
on → the lake files of that version. Up: a lake file (path or md5) → the versions holding it
→ the runs trained on those → which of them are models (and the champion)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from pipeline.runs.record import RunNotFoundError, _store


def run_lineage(ref: str, store: Any = None, *, file_limit: int = 50) -> dict[str, Any]:
    """``{"run": get_run(...) summary with checkpoints, "model": {checkpoint_url, aliases} or
    None (not a model), "version": the version's summary or None (unknown to the store),
    "files": {"total": n, "files": [{path, md5, label, split}] (the first ``file_limit``)}}``."""
    from pipeline.runs.queries import get_run, resolve_run

    s = _store(store)
    run = get_run(resolve_run(ref, s), s)
    if run is None:  # deleted between the two reads
        raise RunNotFoundError(f"no run {ref!r}")
    model = (
        {"checkpoint_url": run["checkpoint_url"], "aliases": run["aliases"]}
        if run["status"] == "succeeded" and run.get("checkpoint_url")
        else None
    )
    files: dict[str, Any] = {"total": 0, "files": []}
    version = None
    if run["version"] is not None:
        from pipeline.datasets.queries import get_version
        from pipeline.datasets.version_rows import sample_rows

        v = get_version(run["version_id"], store=s)
        version = {k: v.get(k) for k in ("dataset", "version_id", "tag", "samples", "created_at")}
        version["manifest_sha256"] = run["version"]["manifest_sha256"]
        t = sample_rows(version_id=run["version_id"])
        with s.session() as session:
            files["total"] = session.execute(
                select(func.count(func.distinct(t.c.path)))
            ).scalar_one()
            rows = session.execute(
                select(t.c.path, t.c.md5, t.c.label, t.c.split)
                .distinct()
                .order_by(t.c.path)
                .limit(file_limit)
            )
            files["files"] = [
                {"path": p, "md5": m, "label": lab, "split": sp} for p, m, lab, sp in rows
            ]
    return {"run": run, "model": model, "version": version, "files": files}


def file_lineage(path_or_md5: str, store: Any = None) -> dict[str, Any]:
    """``{"query": str, "versions": [{dataset, version_id, tag, created_at, path, md5, label,
    split, "runs": [{run_id, name, status, best_metric, metric_name, is_model, aliases}]}]}``
    — every committed version holding the file (newest first) and the runs on each."""
    from pipeline.datasets.queries import versions_containing
    from pipeline.runs.queries import runs_for_version

    s = _store(store)
    versions = versions_containing(path_or_md5, store=s)
    by_version: dict[str, list[dict]] = {}
    out = []
    for v in versions:
        vid = v["version_id"]
        if vid not in by_version:
            by_version[vid] = [
                {
                    "run_id": r["run_id"],
                    "name": r["name"],
                    "status": r["status"],
                    "best_metric": r["best_metric"],
                    "metric_name": r["metric_name"],
                    "is_model": r["status"] == "succeeded" and bool(r["checkpoint_url"]),
                    "aliases": ["champion"] if r["is_champion"] else [],
                }
                for r in runs_for_version(vid, s)
            ]
        out.append({**v, "runs": by_version[vid]})
    return {"query": path_or_md5, "versions": out}

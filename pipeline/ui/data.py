"""Read queries behind the Datasets page and its JSON API.

Everything here reads the metadata store only (never version folders), returns JSON-safe dicts,
and is shaped for pages of a fixed size: one query per listing plus one batched query for the
runs of the whole page — never one query per version — so a page costs the same with 100
versions of 100,000 samples as with 3.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from pipeline.datasets.queries import version_summary
from pipeline.datasets.version_rows import sample_rows
from pipeline.metadata.datasets import DatasetVersion, VersionInvalid
from pipeline.metadata.runs import TrainingRun
from pipeline.metadata.store import MetadataStore
from pipeline.ui.diff import diff_versions
from pipeline.ui.errors import NotFound
from pipeline.ui.params import MAX_LIMIT, clamp
from pipeline.ui.refs import resolve

# The names the app and its callers (bench/ui.py, tests) use from here.
__all__ = ["MAX_LIMIT", "NotFound", "clamp", "diff_versions", "resolve"]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# --- runs -----------------------------------------------------------------------------------


def runs_for_versions(session: Session, version_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The training runs of each version (newest first), in ONE query for the whole page."""
    out: dict[str, list[dict[str, Any]]] = {vid: [] for vid in version_ids}
    if not version_ids:
        return out
    rows = session.scalars(
        select(TrainingRun)
        .where(TrainingRun.version_id.in_(version_ids))
        .order_by(TrainingRun.started_at.desc(), TrainingRun.run_id)
    ).all()
    for r in rows:
        out.setdefault(r.version_id, []).append(run_dict(r))
    return out


def run_dict(r: TrainingRun) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "status": r.status,
        "best_metric": r.best_metric,
        "metric_name": r.metric_name,
        "dag_id": r.dag_id,
        "dag_run_id": r.dag_run_id,
        "launcher": r.launcher,
        "params": r.params,
        "started_at": _iso(r.started_at),
        "finished_at": _iso(r.finished_at),
        "checkpoint_url": r.checkpoint_url,
    }


# --- listings -------------------------------------------------------------------------------


def list_datasets(store: MetadataStore) -> list[dict[str, Any]]:
    """Every dataset with its version count, its latest version and how many of its lake files
    are rejected now. ``latest`` is the datasets' queries' answer (one owner for "latest"); a
    dataset whose files were all rejected has no version yet and is listed all the same."""
    from pipeline.datasets import queries
    from pipeline.lake.rejected import rejected_counts

    with store.session() as s:
        rows = s.execute(
            select(DatasetVersion.dataset, func.count().label("versions"))
            .group_by(DatasetVersion.dataset)
            .order_by(DatasetVersion.dataset)
        ).all()
    counts = {r.dataset: int(r.versions) for r in rows}
    latest = {d["dataset"]: d["latest"] for d in queries.list_datasets(store=store)}
    rejected = rejected_counts(store=store)
    return [
        {
            "name": name,
            "versions": counts.get(name, 0),
            "latest": latest.get(name),
            "rejected": rejected.get(name, 0),
        }
        for name in sorted(counts.keys() | rejected.keys())
    ]


def list_versions(
    store: MetadataStore, dataset: str | None = None, *, limit: int = 25, offset: int = 0
) -> dict[str, Any]:
    """Versions newest first, one page of them, each with the runs that trained on it."""
    limit, offset = clamp(limit, offset)
    with store.session() as s:
        where = [DatasetVersion.dataset == dataset] if dataset else []
        total = s.scalar(select(func.count()).select_from(DatasetVersion).where(*where)) or 0
        versions = s.scalars(
            select(DatasetVersion)
            .where(*where)
            .order_by(DatasetVersion.created_at.desc(), DatasetVersion.version_id.desc())
            .limit(limit)
            .offset(offset)
        ).all()
        runs = runs_for_versions(s, [v.version_id for v in versions])
    items = []
    for v in versions:
        item = version_summary(v)
        item["runs"] = runs.get(v.version_id, [])
        item["best_metric"] = _best(item["runs"])
        items.append(item)
    return {"dataset": dataset, "total": total, "limit": limit, "offset": offset, "items": items}


def _best(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    scored = [r for r in runs if r.get("best_metric") is not None]
    if not scored:
        return None
    # Accuracy-like metrics are better high; a loss is better low.
    low = "loss" in (scored[0].get("metric_name") or "").lower()
    best = (min if low else max)(scored, key=lambda r: r["best_metric"])
    return {
        "run_id": best["run_id"],
        "value": best["best_metric"],
        "metric_name": best["metric_name"],
    }


# --- one version ----------------------------------------------------------------------------


def manifest_summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """The parts of manifest.json worth a glance (not the per-segment list)."""
    keep: dict[str, Any] = {}
    for key in (
        "format_version",
        "modality",
        "format",
        "sample_shape",
        "sample_dtype",
        "classes",
        "mean",
        "std",
        "recipe_hash",
        "created_at",
    ):
        if key in manifest:
            keep[key] = manifest[key]
    counts = manifest.get("counts")
    if isinstance(counts, dict):
        keep["counts"] = {k: v for k, v in counts.items() if k != "per_split"}
    if isinstance(manifest.get("recipe"), dict):
        keep["recipe"] = manifest["recipe"]
    segs = manifest.get("segments")
    if isinstance(segs, list):
        keep["segments"] = len(segs)
        keep["segment_bytes"] = sum(
            int(x.get("size_bytes") or 0) for x in segs if isinstance(x, dict)
        )
    return keep


def _parse_manifest(text: str) -> dict[str, Any]:
    try:
        m = json.loads(text or "{}")
    except ValueError:
        return {}
    return m if isinstance(m, dict) else {}


def class_split_counts(
    session: Session, version_id: str, manifest: dict[str, Any]
) -> list[dict[str, Any]]:
    """Samples per class and split: from the manifest's per-split counts when it has them
    (a version of 100,000 samples then costs no scan), else grouped in SQL. Unlabelled samples
    (the manifest counts them per split but under no class) come last, with label None."""
    counts = manifest.get("counts") if isinstance(manifest.get("counts"), dict) else {}
    per_split = counts.get("per_split")
    by_label: dict[str | None, dict[str, int]] = {}
    if isinstance(per_split, dict) and all(
        isinstance(v, dict) and "classes" in v for v in per_split.values()
    ):
        for split, info in per_split.items():
            for label, n in info["classes"].items():
                by_label.setdefault(label, {})[split] = int(n)
            rest = int(info.get("samples", 0)) - sum(int(n) for n in info["classes"].values())
            if rest > 0:
                by_label.setdefault(None, {})[split] = rest
    else:
        t = sample_rows(version_id)
        rows = session.execute(
            select(t.c.label, t.c.split, func.count()).group_by(t.c.label, t.c.split)
        ).all()
        for label, split, n in rows:
            by_label.setdefault(label, {})[split] = n
    ordered = sorted(k for k in by_label if k is not None) + ([None] if None in by_label else [])
    return [
        {
            "label": label,
            "train": by_label[label].get("train", 0),
            "val": by_label[label].get("val", 0),
            "total": sum(by_label[label].values()),
        }
        for label in ordered
    ]


def get_version(store: MetadataStore, ref: str, dataset: str | None = None) -> dict[str, Any]:
    with store.session() as s:
        v = resolve(store, s, ref, dataset)
        out = version_summary(v)
        out["path"] = v.path
        out["manifest_sha256"] = v.manifest_sha256
        out["deleted_at"] = _iso(v.deleted_at)
        manifest = _parse_manifest(v.manifest)
        out["manifest"] = manifest_summary(manifest)
        if manifest.get("task") == "regression":
            # No classes: the manifest's target histogram, one row per bin (targets.py).
            from pipeline.datasets.targets import histogram_rows

            out["task"] = "regression"
            out["target"] = manifest.get("target") or {}
            out["classes"] = histogram_rows(out["target"])
        else:
            # Always set: the version page's template is strict about undefined keys.
            out["task"] = "classification"
            out["classes"] = class_split_counts(s, v.version_id, manifest)
        parent = s.get(DatasetVersion, v.parent_id) if v.parent_id else None
        out["parent"] = {"version_id": parent.version_id, "tag": parent.tag} if parent else None
        children = s.execute(
            select(DatasetVersion.version_id, DatasetVersion.tag).where(
                DatasetVersion.parent_id == v.version_id
            )
        ).all()
        out["children"] = [{"version_id": c[0], "tag": c[1]} for c in children]
        siblings = s.execute(
            select(DatasetVersion.version_id, DatasetVersion.tag, DatasetVersion.created_at)
            .where(DatasetVersion.dataset == v.dataset, DatasetVersion.version_id != v.version_id)
            .order_by(DatasetVersion.created_at.desc())
            .limit(200)
        ).all()
        out["others"] = [
            {"version_id": o[0], "tag": o[1], "created_at": _iso(o[2])} for o in siblings
        ]
        out["invalid_files"] = invalid_files_in(s, v.version_id, limit=100, offset=0)
    from pipeline.runs import runs_for_version

    out["runs"] = runs_for_version(v.version_id, store=store)
    out["best_metric"] = _best(out["runs"])
    from pipeline.lake.rejected import rejected_files
    from pipeline.ui.trainability import untrainable_reason

    # Why a version cannot be trained, from its manifest; the page then offers no command.
    out["untrainable"] = untrainable_reason(manifest, v.dataset)
    out["train_command"] = None if out["untrainable"] else train_commands(v.dataset, v.version_id)
    # Files of the dataset the lake holds now but no version does (count only; the dataset's
    # page lists them).
    out["rejected_now"] = rejected_files(v.dataset, limit=1, store=store)["total"]
    return out


def invalid_files_in(
    session: Session, version_id: str, *, limit: int, offset: int
) -> dict[str, Any]:
    limit, offset = clamp(limit, offset)
    total = session.scalar(
        select(func.count())
        .select_from(VersionInvalid)
        .where(VersionInvalid.version_id == version_id)
    )
    rows = session.scalars(
        select(VersionInvalid)
        .where(VersionInvalid.version_id == version_id)
        .order_by(VersionInvalid.path, VersionInvalid.line)
        .limit(limit)
        .offset(offset)
    ).all()
    return {
        "total": total or 0,
        "limit": limit,
        "offset": offset,
        "items": [{"path": r.path, "md5": r.md5, "line": r.line, "reason": r.reason} for r in rows],
    }


def invalid_files(
    store: MetadataStore,
    ref: str,
    *,
    dataset: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> dict[str, Any]:
    with store.session() as s:
        v = resolve(store, s, ref, dataset)
        return invalid_files_in(s, v.version_id, limit=limit, offset=offset)


def train_commands(dataset: str, version_id: str, *, epochs: int = 3) -> dict[str, Any]:
    """How to train on exactly this version (pinned by id, never ``latest``): the trainer's
    environment contract, the CLI, and the conf of the ``train`` DAG (its param names)."""
    conf = {"dataset": dataset, "dataset_version": version_id, "epochs": epochs}
    return {
        "env": {
            "DATASET_NAME": dataset,
            "DATASET_VERSION": version_id,
            "TRAIN_EPOCHS": str(epochs),
        },
        "shell": f"DATASET_NAME={_sh(dataset)} DATASET_VERSION={version_id} TRAIN_EPOCHS={epochs} python -m training",
        "cli": f"laketrain train --dataset {_sh(dataset)} --version {version_id} --epochs {epochs}",
        "dag_id": "train",
        "dag_conf": conf,
        "dag_conf_json": json.dumps(conf),
    }


def _sh(word: str) -> str:
    import shlex

    return shlex.quote(word)


# --- thumbnails -----------------------------------------------------------------------------


def thumbnail_rows(
    store: MetadataStore,
    ref: str,
    *,
    dataset: str | None = None,
    per_class: int = 6,
    max_classes: int = 20,
) -> tuple[DatasetVersion, list[dict[str, Any]]]:
    """The first ``per_class`` samples (by index) of each of up to ``max_classes`` labels."""
    per_class = max(1, min(per_class, 32))
    with store.session() as s:
        v = resolve(store, s, ref, dataset)
        t = sample_rows(v.version_id)  # chunked or format 1 alike
        rn = func.row_number().over(partition_by=t.c.label, order_by=t.c.idx).label("rn")
        inner = select(t.c.idx, t.c.label, t.c.path, rn).subquery()
        rows = s.execute(
            select(inner.c.idx, inner.c.label, inner.c.path)
            .where(inner.c.rn <= per_class)
            .order_by(inner.c.label, inner.c.idx)
        ).all()
    labels: list[str] = []
    out = []
    for idx, label, path in rows:
        if label not in labels:
            if len(labels) >= max_classes:
                continue
            labels.append(label)
        out.append({"idx": idx, "label": label, "path": path})
    return v, out

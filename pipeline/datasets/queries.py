"""Read-side queries on dataset versions, answered from the metadata store alone.

Every function returns plain JSON-safe dicts and lists: the CLI prints them, the UI serves
them. None of them opens a version folder.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from pipeline.datasets.head import head_version

# Re-exported: the CLI and the DAG tasks catch it from here.
from pipeline.datasets.manifest import VersionNotFound  # noqa: F401
from pipeline.datasets.refs import resolve_row
from pipeline.datasets.version_rows import diff_maps, path_diff, sample_rows
from pipeline.metadata.datasets import (
    VERSION_COMMITTED,
    DatasetHead,
    DatasetHeadMove,
    DatasetVersion,
    VersionInvalid,
)
from pipeline.metadata.store import MetadataStore, open_store

_MD5 = re.compile(r"[0-9a-fA-F]{32}")
# Versions that exist: committed, and quarantined by the quality gate (listed, shown, diffed
# and exported; never latest). "deleted" (gc'd) ones only with include_deleted.
LISTED = (VERSION_COMMITTED, "quarantined")


def version_summary(v: DatasetVersion) -> dict[str, Any]:
    """One version row as the CLI, the Python API and the UI's JSON API show it."""
    return {
        "dataset": v.dataset,
        "version_id": v.version_id,
        "short_id": v.version_id[:8],
        "tag": v.tag,
        "parent_id": v.parent_id,
        "created_at": v.created_at.isoformat(),
        "samples": v.samples,
        "train": v.train,
        "val": v.val,
        "files": v.files,
        "invalid": v.invalid,
        "added": v.added,
        "removed": v.removed,
        "changed": v.changed,
        "status": v.status,
        "format": v.format,
        "recipe_hash": v.recipe_hash,
        "path": v.path,
        "manifest_sha256": v.manifest_sha256,
    }


def list_versions(
    dataset: str | None = None,
    *,
    limit: int = 50,
    offset: int = 0,
    include_deleted: bool = False,
    store: MetadataStore | None = None,
) -> list[dict[str, Any]]:
    """Versions, newest first."""
    store = store or open_store()
    query = select(DatasetVersion).order_by(
        DatasetVersion.created_at.desc(), DatasetVersion.version_id
    )
    if dataset is not None:
        query = query.where(DatasetVersion.dataset == dataset)
    if not include_deleted:
        query = query.where(DatasetVersion.status.in_(LISTED))
    query = query.limit(max(0, int(limit))).offset(max(0, int(offset)))
    with store.session() as session:
        heads = _head_ids(session, dataset)
        return [
            {**version_summary(v), "is_head": v.version_id in heads} for v in session.scalars(query)
        ]


def list_datasets(*, store: MetadataStore | None = None) -> list[dict[str, Any]]:
    """Each dataset with its number of versions and its latest version (its head)."""
    store = store or open_store()
    with store.session() as session:
        rows = session.execute(
            select(DatasetVersion.dataset, func.count(), func.max(DatasetVersion.created_at))
            .where(DatasetVersion.status.in_(LISTED))
            .group_by(DatasetVersion.dataset)
            .order_by(DatasetVersion.dataset)
        ).all()
        out = []
        for name, count, _ in rows:
            latest = latest_committed(session, name)
            out.append(
                {
                    "dataset": name,
                    "versions": int(count),
                    "latest": version_summary(latest) if latest else None,
                }
            )
        return out


def latest_committed(session: Session, dataset: str) -> DatasetVersion | None:
    """The dataset's head: what ``latest`` names, and the parent of its next build. Not the
    newest created: after the lake returned to an older content, the head is that older
    version (pipeline/datasets/head.py)."""
    return head_version(session, dataset)


def _head_ids(session: Session, dataset: str | None = None) -> set[str]:
    query = select(DatasetHead.version_id)
    if dataset is not None:
        query = query.where(DatasetHead.dataset == dataset)
    return set(session.scalars(query))


def head_history(
    dataset: str, *, limit: int = 100, offset: int = 0, store: MetadataStore | None = None
) -> list[dict[str, Any]]:
    """The moves of the dataset's head, newest first: from/to version (id and tag), when, and
    why (``published`` a new version, ``returned`` to an older one, ``backfilled`` by the
    migration that introduced heads)."""
    store = store or open_store()
    old, new = aliased(DatasetVersion), aliased(DatasetVersion)
    query = (
        select(DatasetHeadMove, old.tag, new.tag)
        .outerjoin(old, old.version_id == DatasetHeadMove.from_version_id)
        .outerjoin(new, new.version_id == DatasetHeadMove.to_version_id)
        .where(DatasetHeadMove.dataset == dataset)
        .order_by(DatasetHeadMove.id.desc())
        .limit(max(0, int(limit)))
        .offset(max(0, int(offset)))
    )
    with store.session() as session:
        return [
            {
                "id": m.id,
                "dataset": m.dataset,
                "from_version_id": m.from_version_id,
                "from_tag": from_tag,
                "to_version_id": m.to_version_id,
                "to_tag": to_tag,
                "moved_at": m.moved_at.isoformat(),
                "reason": m.reason,
            }
            for m, from_tag, to_tag in session.execute(query)
        ]


def _resolve(session: Session, ref: str, dataset: str | None) -> DatasetVersion:
    """The committed version ``ref`` names: the one rule set of pipeline/datasets/refs.py."""
    return resolve_row(session, ref, dataset)


def resolve_version(
    ref: str, dataset: str | None = None, *, store: MetadataStore | None = None
) -> dict[str, Any]:
    """The summary of the version ``ref`` (id / unique prefix / tag / ``latest``) names."""
    store = store or open_store()
    with store.session() as session:
        v = _resolve(session, ref, dataset)
        return {**version_summary(v), "is_head": v.version_id in _head_ids(session, v.dataset)}


def get_version(
    ref: str, dataset: str | None = None, *, store: MetadataStore | None = None
) -> dict[str, Any]:
    """One version in full: its summary, manifest, class/split counts, parent and invalid files."""
    store = store or open_store()
    with store.session() as session:
        v = _resolve(session, ref, dataset)
        out = version_summary(v)
        out["is_head"] = v.version_id in _head_ids(session, v.dataset)
        manifest = json.loads(v.manifest)
        out["manifest"] = manifest
        out["classes"] = manifest.get("classes", [])
        out["counts"] = manifest.get("counts", {})
        out["mean"] = manifest.get("mean", [])
        out["std"] = manifest.get("std", [])
        parent = session.get(DatasetVersion, v.parent_id) if v.parent_id else None
        out["parent"] = version_summary(parent) if parent else None
        out["invalid_files"] = _invalid(session, v.version_id)
        return out


def _invalid(session: Session, version_id: str) -> list[dict[str, Any]]:
    rows = session.scalars(
        select(VersionInvalid)
        .where(VersionInvalid.version_id == version_id)
        .order_by(VersionInvalid.path, VersionInvalid.line)
    )
    return [{"path": r.path, "md5": r.md5, "line": r.line, "reason": r.reason} for r in rows]


def invalid_files(
    version_ref: str, dataset: str | None = None, *, store: MetadataStore | None = None
) -> list[dict[str, Any]]:
    store = store or open_store()
    with store.session() as session:
        return _invalid(session, _resolve(session, version_ref, dataset).version_id)


def diff_versions(
    a: str,
    b: str,
    *,
    dataset: str | None = None,
    limit: int | None = None,
    store: MetadataStore | None = None,
) -> dict[str, Any]:
    """What changed from version ``a`` to version ``b``, by lake path: added, removed and
    changed (other md5 or label) files, each with its md5(s). Two chunked versions read only
    the leaves they do not share (version_rows.diff_maps)."""
    store = store or open_store()
    with store.session() as session:
        va = _resolve(session, a, dataset)
        vb = _resolve(session, b, dataset)
        old, new = diff_maps(session, va.version_id, vb.version_id)
    d = path_diff(old, new)
    cut = (lambda xs: xs[:limit]) if limit is not None else (lambda xs: xs)
    return {
        "a": _brief(va),
        "b": _brief(vb),
        "counts": {k: len(v) for k, v in d.items()},
        "added": [{"path": p, "md5": new[p][0], "label": new[p][1]} for p in cut(d["added"])],
        "removed": [{"path": p, "md5": old[p][0], "label": old[p][1]} for p in cut(d["removed"])],
        "changed": [
            {
                "path": p,
                "old_md5": old[p][0],
                "new_md5": new[p][0],
                "old_label": old[p][1],
                "new_label": new[p][1],
            }
            for p in cut(d["changed"])
        ],
    }


def _brief(v: DatasetVersion) -> dict[str, Any]:
    return {
        "dataset": v.dataset,
        "version_id": v.version_id,
        "tag": v.tag,
        "created_at": v.created_at.isoformat(),
    }


def versions_containing(
    path_or_md5: str, *, limit: int = 500, store: MetadataStore | None = None
) -> list[dict[str, Any]]:
    """Committed versions that hold a lake path (exact) or a content md5, newest first; one
    entry per (version, path)."""
    store = store or open_store()
    key = path_or_md5.strip()
    t = sample_rows(md5=key.lower()) if _MD5.fullmatch(key) else sample_rows(path=key.lstrip("/"))
    # One row per (version, path): a table file or augmented copies give several samples.
    columns = (
        DatasetVersion.dataset,
        DatasetVersion.version_id,
        DatasetVersion.tag,
        DatasetVersion.created_at,
        t.c.path,
        t.c.md5,
        t.c.label,
        t.c.split,
        t.c.duplicate,
    )
    query = (
        select(*columns, func.min(t.c.idx))
        .join(DatasetVersion, DatasetVersion.version_id == t.c.version_id)
        .where(DatasetVersion.status.in_(LISTED))
        .group_by(*columns)
        .order_by(DatasetVersion.created_at.desc(), t.c.path)
        .limit(limit)
    )
    with store.session() as session:
        return [
            {
                "dataset": ds,
                "version_id": vid,
                "tag": tag,
                "created_at": created.isoformat(),
                "path": path,
                "md5": md5,
                "label": label,
                "split": split,
                "duplicate": bool(dup),
                "index": int(idx),
            }
            for ds, vid, tag, created, path, md5, label, split, dup, idx in session.execute(query)
        ]

"""Read queries behind the Datasets page and its JSON API.

Everything here reads the metadata store only (never version folders), returns JSON-safe dicts,
and is shaped for pages of a fixed size: one query per listing plus one batched query for the
runs of the whole page — never one query per version — so a page costs the same with 100
versions of 100,000 samples as with 3.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from operator import itemgetter
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session, aliased

from pipeline.datasets.queries import version_summary
from pipeline.metadata.datasets import DatasetVersion, VersionInvalid, VersionSample
from pipeline.metadata.runs import TrainingRun
from pipeline.metadata.store import MetadataStore
from pipeline.ui.errors import NotFound
from pipeline.ui.params import MAX_LIMIT, MAX_OFFSET
from pipeline.ui.refs import resolve, resolve_pair

__all__ = ["MAX_LIMIT", "NotFound", "resolve"]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def clamp(limit: int, offset: int) -> tuple[int, int]:
    """Keep a client's paging inside sane bounds (a huge limit would defeat pagination, an
    offset past 2**63 overflows the database driver)."""
    return max(1, min(int(limit), MAX_LIMIT)), max(0, min(int(offset), MAX_OFFSET))


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
        rows = session.execute(
            select(VersionSample.label, VersionSample.split, func.count())
            .where(VersionSample.version_id == version_id)
            .group_by(VersionSample.label, VersionSample.split)
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


# --- diff -----------------------------------------------------------------------------------


def diff_versions(
    store: MetadataStore,
    a: str,
    b: str,
    *,
    dataset: str | None = None,
    limit: int = 100,
    offset: int = 0,
    method: str | None = None,
) -> dict[str, Any]:
    """What changed from version ``a`` to ``b``, by path: counts of all, one page of each kind.

    A path's md5/label are those of its first sample row (as the build's own diff). When each
    path has one row on both sides (``samples == files``: images without augmented copies) the
    database does the work — SQLite by index probes on (version_id, path) that page straight off
    the index, PostgreSQL by one FULL OUTER JOIN returning only the differing rows (each is
    slow on the other: see bench/ui.py). Otherwise (table files, augmented copies) both sides
    are streamed in path order and merged in Python, which stays linear where a join would
    multiply the rows of a path. ``method`` forces "sql" or "merge", for tests.
    """
    limit, offset = clamp(limit, offset)
    with store.session() as s:
        va, vb = resolve_pair(store, s, a, b, dataset)
        if method is None:
            one_row_per_path = va.samples == va.files and vb.samples == vb.files
            method = "sql" if one_row_per_path else "merge"
        if method == "sql":
            if s.get_bind().dialect.name == "sqlite":
                # Against its parent, the build already counted this diff (same rule, same rows).
                known = None
                if vb.parent_id == va.version_id:
                    known = {"added": vb.added, "removed": vb.removed, "changed": vb.changed}
                counts, pages = _diff_indexed(s, va.version_id, vb.version_id, limit, offset, known)
            else:
                counts, pages = _diff_joined(s, va.version_id, vb.version_id, limit, offset)
        elif method == "merge":
            counts, pages = _diff_merge(s, va.version_id, vb.version_id, limit, offset)
        else:
            raise ValueError(f"method must be 'sql' or 'merge', got {method!r}")
    return {
        "a": version_summary(va),
        "b": version_summary(vb),
        "limit": limit,
        "offset": offset,
        "counts": counts,
        **pages,
    }


def _diff_indexed(
    s: Session, a: str, b: str, limit: int, offset: int, known: dict[str, int] | None = None
) -> tuple[dict, dict]:
    """SQLite: counts in one pass (or the build's own, against the parent), then each kind's
    page in path order straight off the (version_id, path) index, stopping at the page's end."""
    A, B = aliased(VersionSample), aliased(VersionSample)
    only_b = (
        select(B.path, B.md5, B.label, B.split)
        .outerjoin(A, and_(A.version_id == a, A.path == B.path))
        .where(B.version_id == b, A.id.is_(None))
    )
    only_a = (
        select(A.path, A.md5, A.label, A.split)
        .outerjoin(B, and_(B.version_id == b, B.path == A.path))
        .where(A.version_id == a, B.id.is_(None))
    )
    changed = (
        select(B.path, A.md5.label("old_md5"), B.md5, A.label.label("old_label"), B.label, B.split)
        .join(A, and_(A.version_id == a, A.path == B.path))
        .where(B.version_id == b, or_(A.md5 != B.md5, A.label.is_distinct_from(B.label)))
    )
    counts = known if known is not None else _count_diff(s, a, b)
    pages = {}
    for kind, q in {"added": only_b, "removed": only_a, "changed": changed}.items():
        # A kind with nothing left to show costs no query (a "changed" page scans every path).
        if counts[kind] <= offset:
            pages[kind] = []
            continue
        rows = s.execute(q.order_by(q.selected_columns[0]).limit(limit).offset(offset))
        pages[kind] = [dict(r._mapping) for r in rows]
    return counts, pages


def _count_diff(s: Session, a: str, b: str) -> dict[str, int]:
    """All three counts in ONE pass over b's rows with an index probe into a: with one row per
    path on each side, removed = a's rows minus the matched ones."""
    A, B = aliased(VersionSample), aliased(VersionSample)
    differs = or_(A.md5 != B.md5, A.label.is_distinct_from(B.label))
    added, matched, n_changed = s.execute(
        select(
            func.coalesce(func.sum(case((A.id.is_(None), 1), else_=0)), 0),
            func.count(A.id),
            func.coalesce(func.sum(case((and_(A.id.is_not(None), differs), 1), else_=0)), 0),
        )
        .select_from(B)
        .outerjoin(A, and_(A.version_id == a, A.path == B.path))
        .where(B.version_id == b)
    ).one()
    a_rows = s.scalar(
        select(func.count()).select_from(VersionSample).where(VersionSample.version_id == a)
    )
    return {
        "added": int(added),
        "removed": int(a_rows or 0) - int(matched),
        "changed": int(n_changed),
    }


def _differing_rows(s: Session, a: str, b: str) -> Any:
    """(a.path, a.md5, a.label, a.split, b.path, b.md5, b.label, b.split) of every path that
    differs: on one side only (the other side's columns None) or with another md5/label, in one
    FULL OUTER JOIN (a single hash-join pass on PostgreSQL; SQLite would rescan a materialised
    side per row, hence its own indexed path above)."""
    cols = (VersionSample.path, VersionSample.md5, VersionSample.label, VersionSample.split)
    A = select(*cols).where(VersionSample.version_id == a).subquery("a")
    B = select(*cols).where(VersionSample.version_id == b).subquery("b")
    return s.execute(
        select(A.c.path, A.c.md5, A.c.label, A.c.split, B.c.path, B.c.md5, B.c.label, B.c.split)
        .select_from(B)
        .join(A, A.c.path == B.c.path, full=True)
        .where(
            or_(
                A.c.path.is_(None),
                B.c.path.is_(None),
                A.c.md5 != B.c.md5,
                A.c.label.is_distinct_from(B.c.label),
            )
        )
    )


def _diff_joined(s: Session, a: str, b: str, limit: int, offset: int) -> tuple[dict, dict]:
    """Only the rows that differ come out of the database; counting, ordering and paging them
    happens here, so the cost is the join plus the size of the difference — not a pass per
    kind or per page."""
    # Tuples until the page is cut: a diff of 200,000 paths must not build 200,000 dicts.
    added, removed, changed = [], [], []
    for row in _differing_rows(s, a, b):
        (added if row[0] is None else removed if row[4] is None else changed).append(tuple(row))
    window = slice(offset, offset + limit)
    added.sort(key=itemgetter(4))
    removed.sort(key=itemgetter(0))
    changed.sort(key=itemgetter(4))
    counts = {"added": len(added), "removed": len(removed), "changed": len(changed)}
    pages = {
        "added": [
            {"path": p, "md5": m, "label": la, "split": sp} for *_, p, m, la, sp in added[window]
        ],
        "removed": [
            {"path": p, "md5": m, "label": la, "split": sp} for p, m, la, sp, *_ in removed[window]
        ],
        "changed": [
            {"path": pb, "old_md5": ma, "md5": mb, "old_label": la, "label": lb, "split": sb}
            for _pa, ma, la, _sa, pb, mb, lb, sb in changed[window]
        ],
    }
    return counts, pages


def _first_rows(s: Session, version_id: str) -> Iterator[tuple[str, str, str | None, str]]:
    """(path, md5, label, split) of each path's first row, in path order, streamed."""
    rows = s.execute(
        select(VersionSample.path, VersionSample.md5, VersionSample.label, VersionSample.split)
        .where(VersionSample.version_id == version_id)
        .order_by(VersionSample.path, VersionSample.idx)
        .execution_options(yield_per=5000)
    )
    last = None
    for row in rows:
        if row[0] != last:
            last = row[0]
            yield tuple(row)


def _diff_merge(s: Session, a: str, b: str, limit: int, offset: int) -> tuple[dict, dict]:
    counts = {"added": 0, "removed": 0, "changed": 0}
    pages: dict[str, list] = {"added": [], "removed": [], "changed": []}

    def keep(kind: str, item: dict) -> None:
        n = counts[kind]
        counts[kind] = n + 1
        if offset <= n < offset + limit:
            pages[kind].append(item)

    # Both sides are sorted by path in Python's order (the database's collation may differ).
    old = sorted(_first_rows(s, a))
    new = sorted(_first_rows(s, b))
    i = j = 0
    while i < len(old) or j < len(new):
        if j >= len(new) or (i < len(old) and old[i][0] < new[j][0]):
            p, m, lab, sp = old[i]
            keep("removed", {"path": p, "md5": m, "label": lab, "split": sp})
            i += 1
        elif i >= len(old) or new[j][0] < old[i][0]:
            p, m, lab, sp = new[j]
            keep("added", {"path": p, "md5": m, "label": lab, "split": sp})
            j += 1
        else:
            (p, m0, l0, _), (_, m1, l1, sp) = old[i], new[j]
            if m0 != m1 or l0 != l1:
                keep(
                    "changed",
                    {
                        "path": p,
                        "old_md5": m0,
                        "md5": m1,
                        "old_label": l0,
                        "label": l1,
                        "split": sp,
                    },
                )
            i += 1
            j += 1
    return counts, pages


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
        rn = (
            func.row_number()
            .over(partition_by=VersionSample.label, order_by=VersionSample.idx)
            .label("rn")
        )
        inner = (
            select(VersionSample.idx, VersionSample.label, VersionSample.path, rn)
            .where(VersionSample.version_id == v.version_id)
            .subquery()
        )
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

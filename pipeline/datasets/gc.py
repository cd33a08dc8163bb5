"""Garbage collection of versions and segments. A dry run unless ``apply=True``.

What may go:
- versions beyond the newest ``keep_last`` of each dataset (none when ``keep_last`` is None),
  EXCEPT any version a training run used (``training_runs.version_id``) and each dataset's
  head (what ``latest`` names, in the store or in a HEAD file);
- segments that no kept version references (their processed samples are forgotten with them,
  so a later build decodes those files again rather than pointing at missing rows); segments
  with no rows are kept, since they only hold invalid verdicts and cost nothing;
- chunks no kept version references, and chunk files the store never recorded
  (gc_chunks.py: reference-counted like segments);
- leftovers of killed builds: segment temp folders, version staging folders, segment folders
  and version folders that the store never recorded;
- digests (build/digest.py) of versions that are no longer a head, and their temp files: a
  digest is a cache of one head's leaves, worth nothing once the head moved on.
Anything younger than ``min_age_s`` is left alone: it may belong to a build in flight; so is
any segment of a live build lease (``leases.py``: what a plan or a shard counts on until its
commit, however long the DAG takes between them).

``apply`` takes every dataset's lock row first, so no commit can pick a segment while gc
deletes it, and holds segments_guard exclusively, so no build records a segment (new or
reused) between gc's plan and the removal of the folders it dropped.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import delete, inspect, select, text, update
from sqlalchemy.orm import Session

from pipeline.datasets import cachefile
from pipeline.datasets import manifest as mf
from pipeline.datasets.build import delete_processed_for_segments
from pipeline.datasets.gc_chunks import delete_chunks, plan_chunks, remove_chunk_files
from pipeline.datasets.head import kept_heads
from pipeline.datasets.leases import leased_segments, prune_expired
from pipeline.datasets.segments import clean_stale_temps, segments_guard
from pipeline.metadata.base import utcnow
from pipeline.metadata.datasets import (
    VERSION_COMMITTED,
    VERSION_DELETED,
    DatasetLock,
    DatasetVersion,
    Segment,
    VersionChunk,
    VersionInvalid,
    VersionSample,
    VersionSegment,
)
from pipeline.metadata.store import MetadataStore, open_store

DEFAULT_MIN_AGE_S = 3600.0


@dataclass
class GcPlan:
    keep_last: int | None
    versions: list[dict[str, Any]] = field(default_factory=list)
    segments: list[dict[str, Any]] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)  # gc_chunks.plan_chunks
    kept_for_runs: list[str] = field(default_factory=list)
    kept_for_builds: list[str] = field(default_factory=list)  # segments an in-flight build leased
    bytes: int = 0
    applied: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "keep_last": self.keep_last,
            "applied": self.applied,
            "bytes": self.bytes,
            "versions": self.versions,
            "segments": self.segments,
            "leftovers": self.leftovers,
            "chunks": self.chunks,
            "kept_for_runs": self.kept_for_runs,
            "kept_for_builds": self.kept_for_builds,
        }


# A quarantined version (held by the quality gate, waiting for a decision) is a version like
# a committed one here: ranked by keep_last, its folder and segments kept while it is.
_KEPT_STATUSES = (VERSION_COMMITTED, "quarantined")


def run_versions(session: Session) -> set[str]:
    """Version ids that any training run used; empty when runs are not recorded here."""
    conn = session.connection()
    if not inspect(conn).has_table("training_runs"):
        return set()
    return {
        r[0] for r in conn.execute(text("SELECT DISTINCT version_id FROM training_runs")) if r[0]
    }


def _plan(session: Session, data_root: Path, keep_last: int | None, min_age_s: float) -> GcPlan:
    heads = kept_heads(session, data_root)  # what latest names: kept whatever keep_last says
    plan, kept_segments = plan_versions(session, heads, keep_last)
    now = time.time()
    leased = leased_segments(data_root)  # what in-flight builds count on (leases.py)
    known = plan_recorded_segments(
        session,
        plan,
        kept_segments,
        leased,
        # young, or just reused by a build (process() touches what it reuses)
        young=lambda seg: (
            now - seg.created_at.timestamp() < min_age_s
            or not _old(data_root / seg.path, now, min_age_s)
        ),
    )
    plan = _plan_files(session, data_root, plan, known, leased, now, min_age_s)
    plan.leftovers += stale_head_caches(data_root, heads, now, min_age_s)
    return plan


def stale_head_caches(data_root: Path, heads: set[str], now: float, min_age_s: float) -> list[str]:
    """Digest files, a head's other caches (``<version_id>.<kind>``: its near-duplicate
    groups) and temp files under DATA_ROOT/digests/ that name no kept head: a commit keeps
    only its new head's, but a head moved without a commit (a rollback, an approval) or a
    dataset gone from the store leaves them behind (~37 bytes a sample)."""
    root = data_root / cachefile.CACHE_DIR
    stale: list[str] = []
    for ds_dir in sorted(root.iterdir()) if root.is_dir() else []:
        for path in sorted(ds_dir.iterdir()) if ds_dir.is_dir() else []:
            kept = cachefile.head_of(path.name) in heads
            if path.is_file() and not kept and _old(path, now, min_age_s):
                stale.append(f"{cachefile.CACHE_DIR}/{ds_dir.name}/{path.name}")
    return stale


def plan_recorded_segments(
    session: Session,
    plan: GcPlan,
    kept_segments: set[str],
    leased: set[str],
    *,
    young: Callable[[Segment], bool],
) -> set[str]:
    """Add to ``plan`` the recorded segments no kept version references, none an in-flight
    build leases, and none ``young``; the same rule for every kind of DATA_ROOT. Returns the
    paths of every recorded segment (what is not among them is an unrecorded leftover)."""
    known: set[str] = set()
    for seg in session.scalars(select(Segment)):
        known.add(seg.path)
        if seg.segment_id in kept_segments or seg.n_rows == 0:
            continue
        if seg.segment_id in leased:
            plan.kept_for_builds.append(seg.segment_id)
            continue
        if young(seg):
            continue
        plan.segments.append(
            {
                "segment_id": seg.segment_id,
                "path": seg.path,
                "bytes": seg.size_bytes,
                "recorded": True,
            }
        )
        plan.bytes += seg.size_bytes
    return known


def plan_versions(
    session: Session, heads: set[str], keep_last: int | None
) -> tuple[GcPlan, set[str]]:
    """The versions gc drops (beyond ``keep_last``, never a head nor one a run used), and the
    segments the versions it keeps reference. The same rules for every kind of DATA_ROOT."""
    plan = GcPlan(keep_last)
    used = run_versions(session)
    versions = list(
        session.scalars(
            select(DatasetVersion)
            .where(DatasetVersion.status.in_(_KEPT_STATUSES))
            .order_by(
                DatasetVersion.dataset, DatasetVersion.created_at.desc(), DatasetVersion.version_id
            )
        )
    )
    kept: set[str] = set()
    rank: dict[str, int] = {}
    for v in versions:
        n = rank.get(v.dataset, 0)
        rank[v.dataset] = n + 1
        if keep_last is None or n < keep_last or v.version_id in heads:
            kept.add(v.version_id)
        elif v.version_id in used:
            kept.add(v.version_id)
            plan.kept_for_runs.append(v.version_id)
        else:
            plan.versions.append(
                {"dataset": v.dataset, "version_id": v.version_id, "tag": v.tag, "path": v.path}
            )
    kept_segments: set[str] = set()
    kept_list = sorted(kept)
    for i in range(0, len(kept_list), 500):
        kept_segments.update(
            session.scalars(
                select(VersionSegment.segment_id).where(
                    VersionSegment.version_id.in_(kept_list[i : i + 500])
                )
            )
        )
    return plan, kept_segments


def _plan_files(
    session: Session,
    data_root: Path,
    plan: GcPlan,
    known: set[str],
    leased: set[str],
    now: float,
    min_age_s: float,
) -> GcPlan:
    # Segment folders the store never recorded (a build killed between rename and record).
    seg_root = data_root / "segments"
    for rh_dir in sorted(seg_root.iterdir()) if seg_root.is_dir() else []:
        if not rh_dir.is_dir() or rh_dir.name.startswith("."):  # .leases, not a recipe
            continue
        for folder in sorted(rh_dir.iterdir()):
            rel = f"segments/{rh_dir.name}/{folder.name}"
            if folder.name.startswith(".") or rel in known or not _old(folder, now, min_age_s):
                continue
            if folder.name in leased:
                plan.kept_for_builds.append(folder.name)
                continue
            size = _du(folder)
            plan.segments.append(
                {"segment_id": folder.name, "path": rel, "bytes": size, "recorded": False}
            )
            plan.bytes += size
    # Version folders: staging leftovers, and published folders never recorded as committed.
    recorded = set(
        session.scalars(
            select(DatasetVersion.path).where(DatasetVersion.status.in_(_KEPT_STATUSES))
        )
    )
    ds_root = mf.datasets_root(data_root)
    unrecorded_kept: list[str] = []  # published, not recorded yet, too young to collect
    for ds_dir in sorted(ds_root.iterdir()) if ds_root.is_dir() else []:
        if not ds_dir.is_dir():
            continue
        for folder in sorted(ds_dir.iterdir()):
            if not folder.is_dir():
                continue
            rel = f"datasets/{ds_dir.name}/{folder.name}"
            stale_staging = folder.name.startswith(mf.STAGING_PREFIX)
            unrecorded = not folder.name.startswith(".") and rel not in recorded
            if (stale_staging or unrecorded) and _old(folder, now, min_age_s):
                plan.leftovers.append(rel)
            elif unrecorded:
                unrecorded_kept.append(rel)
    plan.chunks = plan_chunks(
        session,
        data_root,
        dropped={v["version_id"] for v in plan.versions},
        unrecorded_folders=unrecorded_kept,
        min_age_s=min_age_s,
    )
    plan.bytes += sum(c["bytes"] for c in plan.chunks)
    return plan


def _old(path: Path, now: float, min_age_s: float) -> bool:
    try:
        return now - path.stat().st_mtime >= min_age_s
    except FileNotFoundError:
        return True  # already gone: nothing in flight can be using it


def _remove(path: Path) -> None:
    """A leftover folder or file, gone (already gone is fine)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _du(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def collect(
    *,
    keep_last: int | None = None,
    apply: bool = False,
    min_age_s: float = DEFAULT_MIN_AGE_S,
    store: MetadataStore | None = None,
    data_root: Path | str | None = None,
) -> GcPlan:
    """Plan (and with ``apply``, carry out) a garbage collection; return what it covers.
    An ``s3://`` data root is collected by ``gc_s3.py`` under the same rules."""
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"--keep-last must be at least 1 (got {keep_last})")
    if data_root is None:
        from pipeline.settings import get_settings

        data_root = get_settings().data_root
    store = store or open_store()
    if isinstance(data_root, str) and data_root.startswith("s3://"):
        from pipeline.datasets import gc_s3  # the same rules over the bucket's objects

        return gc_s3.collect(
            data_root.rstrip("/"),
            keep_last=keep_last,
            apply=apply,
            min_age_s=min_age_s,
            store=store,
        )
    data_root = Path(data_root)
    if not apply:
        with store.session() as session:
            return _plan(session, data_root, keep_last, min_age_s)
    with segments_guard(data_root, exclusive=True):
        plan = _apply(store, data_root, keep_last, min_age_s)
    plan.applied = True
    return plan


def _apply(
    store: MetadataStore, data_root: Path, keep_last: int | None, min_age_s: float
) -> GcPlan:
    """Plan and delete, under segments_guard: no build records a segment in between."""
    with store.session() as session:
        # Every dataset's lock row: commits wait until gc is done.
        session.execute(update(DatasetLock).values(holder="gc", since=utcnow()))
        plan = _plan(session, data_root, keep_last, min_age_s)
        drop_rows(session, data_root, plan)
    # Files go only once the rows are gone for good: a crash in between leaves unrecorded
    # folders, which the next gc collects as leftovers.
    for v in plan.versions:
        shutil.rmtree(data_root / v["path"], ignore_errors=True)
    for s in plan.segments:
        shutil.rmtree(data_root / s["path"], ignore_errors=True)
    for rel in plan.leftovers:
        _remove(data_root / rel)
    remove_chunk_files(data_root, plan.chunks)
    clean_stale_temps(data_root)
    prune_expired(data_root)  # leases of builds that died long ago
    return plan


def drop_rows(session: Session, data_root: Path, plan: GcPlan) -> None:
    """The store's part of applying ``plan``: versions marked deleted, their rows, the dropped
    chunks' and segments' rows (in ``session``, which the caller commits before any file
    goes)."""
    now = utcnow()
    for v in plan.versions:
        vid = v["version_id"]
        session.execute(
            update(DatasetVersion)
            .where(DatasetVersion.version_id == vid)
            .values(status=VERSION_DELETED, deleted_at=now)
        )
        session.execute(delete(VersionSample).where(VersionSample.version_id == vid))
        session.execute(delete(VersionInvalid).where(VersionInvalid.version_id == vid))
        session.execute(delete(VersionSegment).where(VersionSegment.version_id == vid))
        session.execute(delete(VersionChunk).where(VersionChunk.version_id == vid))
    delete_chunks(session, data_root, plan.chunks)
    delete_processed_for_segments(
        session, [s["segment_id"] for s in plan.segments if s["recorded"]]
    )

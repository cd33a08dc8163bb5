"""Garbage collection of an ``s3://`` DATA_ROOT: gc.py's rules, over the bucket's objects.

The same plan as for a folder (``gc.plan_versions``: keep_last, heads, versions a run used;
segments and chunks reference-counted from the store), with the bucket's listing in place of
the folder tree: one paginated LIST of the data root gives every object's size and
LastModified, which stand for a file's size and mtime (``min_age_s`` counts from the newest
object of a folder). The heads kept are the store's and every ``HEAD`` object's. Leases of
builds in flight are read from this machine's work root (``dataroot.py``): a build on
another machine is protected by ``min_age_s`` (default an hour), as a build on another host
is for a shared folder.

``apply`` takes every dataset's lock row and the work root's segments guard, drops the rows
first, then deletes the objects: of a version, its manifest first, so a version being deleted
is never visible half-gone; a crash in between leaves unrecorded objects, which the next gc
collects as leftovers. The head caches a build keeps in this machine's work root (each head's
digest and near-duplicate groups, ``digests/``) are swept by the folder's rule
(``gc.stale_head_caches``), locally. A dry run (the default) deletes nothing.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import select, update

from pipeline.datasets import cachefile, remote_files
from pipeline.datasets import chunks as ch
from pipeline.datasets import manifest as mf
from pipeline.datasets.chunkpack import PACK_SUFFIX
from pipeline.datasets.dataroot import work_root_of
from pipeline.datasets.gc import (
    GcPlan,
    drop_rows,
    plan_recorded_segments,
    plan_versions,
    stale_head_caches,
)
from pipeline.datasets.gc_chunks import plan_chunks
from pipeline.datasets.leases import leased_segments
from pipeline.datasets.publish import s3_store
from pipeline.datasets.segments import segments_guard
from pipeline.metadata.base import utcnow
from pipeline.metadata.datasets import DatasetHead, DatasetLock, DatasetVersion
from pipeline.metadata.store import MetadataStore
from pipeline.storage.s3 import S3_CONCURRENCY
from pipeline.storage.urls import join, split_s3_url

_KEPT_STATUSES = ("committed", "quarantined")


class Listing:
    """Every object under the data root: relative key → (size, LastModified as epoch s)."""

    def __init__(self, remote: str) -> None:
        self.remote = remote.rstrip("/")
        bucket, prefix = split_s3_url(self.remote)
        base = f"s3://{bucket}/{prefix.strip('/')}/" if prefix.strip("/") else f"s3://{bucket}/"
        self.objects: dict[str, tuple[int, float]] = {
            url[len(base) :]: stat for url, stat in s3_store().list_stat(self.remote).items()
        }

    def folders(self, parent: str, depth: int = 1) -> dict[str, tuple[int, float]]:
        """Folders ``depth`` levels below ``parent``: rel path → (bytes, newest LastModified)."""
        out: dict[str, tuple[int, float]] = {}
        head = parent.rstrip("/") + "/"
        for rel, (size, mtime) in self.objects.items():
            if not rel.startswith(head):
                continue
            parts = rel[len(head) :].split("/")
            if len(parts) <= depth:
                continue
            key = head + "/".join(parts[:depth])
            total, newest = out.get(key, (0, 0.0))
            out[key] = (total + size, max(newest, mtime))
        return out

    def chunk_bytes(self, h: str) -> int:
        suffixes = (ch.META_SUFFIX, ch.INDEX_SUFFIX, ch.NODE_SUFFIX, PACK_SUFFIX)
        return sum(self.objects.get(ch.chunk_relpath(h, s), (0, 0.0))[0] for s in suffixes)

    def unrecorded_chunks(self, folders: list[str]) -> set[str]:
        """Nodes and leaves the manifests of published, unrecorded versions name."""
        out: set[str] = set()
        for rel in folders:
            dataset, version_id = rel.split("/")[1:3]
            try:
                section = remote_files.read_manifest(self.remote, dataset, version_id)[0]["chunks"]
            except (mf.ManifestError, FileNotFoundError, KeyError, TypeError):
                continue
            for node in section.get("nodes", []):
                out.add(node["hash"])
                try:
                    raw = s3_store().read_bytes(
                        join(self.remote, ch.chunk_relpath(node["hash"], ch.NODE_SUFFIX))
                    )
                    out.update(c["hash"] for c in json.loads(raw)["children"])
                except (FileNotFoundError, ValueError, KeyError):
                    continue
        return out

    def leftover_chunks(self, known: set[str], min_age_s: float) -> list[dict[str, Any]]:
        """Chunk objects no store row or unrecorded version names, older than ``min_age_s``."""
        now = time.time()
        found: dict[str, dict[str, Any]] = {}
        for rel, (size, mtime) in self.objects.items():
            parts = rel.split("/")
            if len(parts) != 3 or parts[0] != ch.CHUNKS_DIR:
                continue
            h = parts[2].split(".", 1)[0]
            if h in known or len(h) != 64 or now - mtime < min_age_s:
                continue
            item = found.setdefault(h, {"hash": h, "kind": "file", "bytes": 0, "recorded": False})
            item["bytes"] += size
        return list(found.values())


def _heads(session, remote: str, listing: Listing) -> set[str]:
    kept = set(session.scalars(select(DatasetHead.version_id)))
    datasets = {rel.split("/")[1] for rel in listing.objects if rel.startswith("datasets/")}
    for dataset in sorted(datasets):
        try:
            head = remote_files.read_head(remote, dataset)
        except mf.ManifestError:
            continue  # unreadable: it names nothing gc could keep
        if head is not None:
            kept.add(head["version_id"])
    return kept


def plan(session, remote: str, keep_last: int | None, min_age_s: float) -> GcPlan:
    listing = Listing(remote)
    heads = _heads(session, remote, listing)
    result, kept_segments = plan_versions(session, heads, keep_last)
    now = time.time()
    leased = leased_segments(work_root_of(remote))
    seg_folders = listing.folders("segments", depth=2)
    known = plan_recorded_segments(
        session,
        result,
        kept_segments,
        leased,
        young=lambda seg: (
            now - seg.created_at.timestamp() < min_age_s
            or now - seg_folders.get(seg.path, (0, 0.0))[1] < min_age_s
        ),
    )
    for rel, (size, newest) in sorted(seg_folders.items()):
        name = rel.rsplit("/", 1)[1]
        if rel in known or name.startswith(".") or now - newest < min_age_s:
            continue
        if name in leased:
            result.kept_for_builds.append(name)
            continue
        result.segments.append({"segment_id": name, "path": rel, "bytes": size, "recorded": False})
        result.bytes += size
    recorded = set(
        session.scalars(
            select(DatasetVersion.path).where(DatasetVersion.status.in_(_KEPT_STATUSES))
        )
    )
    unrecorded_kept = []
    for rel, (_size, newest) in sorted(listing.folders("datasets", depth=2).items()):
        if rel in recorded or rel.rsplit("/", 1)[1].startswith("."):
            continue
        if now - newest >= min_age_s:
            result.leftovers.append(rel)
        else:
            unrecorded_kept.append(rel)
    result.chunks = plan_chunks(
        session,
        work_root_of(remote),
        dropped={v["version_id"] for v in result.versions},
        unrecorded_folders=unrecorded_kept,
        min_age_s=min_age_s,
        remote=listing,
    )
    result.bytes += sum(c["bytes"] for c in result.chunks)
    # The head caches a build keeps in the local work root (digests/: gc.stale_head_caches).
    result.leftovers += stale_head_caches(work_root_of(remote), heads, now, min_age_s)
    return result


def _delete_version(remote: str, rel: str) -> None:
    store = s3_store()
    store.delete(join(remote, rel, mf.MANIFEST))  # first: no longer a version
    store.delete_prefix(join(remote, rel))


def collect(
    remote: str,
    *,
    keep_last: int | None,
    apply: bool,
    min_age_s: float,
    store: MetadataStore,
) -> GcPlan:
    """gc.collect for an ``s3://`` data root (the module docstring)."""
    if not apply:
        with store.session() as session:
            return plan(session, remote, keep_last, min_age_s)
    with segments_guard(work_root_of(remote), exclusive=True):
        with store.session() as session:
            session.execute(update(DatasetLock).values(holder="gc", since=utcnow()))
            result = plan(session, remote, keep_last, min_age_s)
            drop_rows(session, work_root_of(remote), result)
        s3 = s3_store()
        for v in result.versions:
            _delete_version(remote, v["path"])
        for rel in result.leftovers:
            if rel.startswith(f"{cachefile.CACHE_DIR}/"):  # a local cache file, not a remote folder
                (work_root_of(remote) / rel).unlink(missing_ok=True)
            else:
                _delete_version(remote, rel)
        for s in result.segments:
            s3.delete_prefix(join(remote, s["path"]))
        urls = [
            join(remote, ch.chunk_relpath(c["hash"], suffix))
            for c in result.chunks
            for suffix in (ch.META_SUFFIX, ch.INDEX_SUFFIX, ch.NODE_SUFFIX, PACK_SUFFIX)
        ]
        if urls:
            with ThreadPoolExecutor(min(S3_CONCURRENCY, len(urls))) as pool:
                list(pool.map(s3.delete, urls))
    result.applied = True
    return result

"""Garbage collection of chunk files (pipeline/datasets/chunks.py), reference-counted like
segments: a leaf lives while any version that gc keeps lists it in ``version_chunks``, a node
while any such version's manifest names it.

What may go:
- recorded chunks (``chunks`` rows, with their leaf entries and the samples no other leaf
  holds) that no version left after this gc references: those of the versions gc drops now,
  and orphans (rows a crash or an earlier gc left behind);
- chunk files the store never recorded (a build killed between writing and committing) and
  temp files of interrupted writes, once older than ``min_age_s``.
Never a chunk that a version folder still on disk names without a store record yet (a build
that published and has not committed: its manifest lists the nodes), nor one of a kept
version, a head, or a version a run used (those versions are simply not dropped: gc.py).

gc runs this under segments_guard held exclusively (gc.collect), and a build writes and
records its chunks under the same guard held shared, so no build reuses a chunk between the
plan and the removal.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from pipeline.datasets import chunkread
from pipeline.datasets import chunks as ch
from pipeline.datasets.leaf_index import drop_entries
from pipeline.metadata.datasets import (
    CHUNK_LEAF,
    CHUNK_NODE,
    VERSION_DELETED,
    Chunk,
    DatasetVersion,
    VersionChunk,
)

_BATCH = 500
_SUFFIXES = (ch.META_SUFFIX, ch.INDEX_SUFFIX, ch.NODE_SUFFIX)


def _manifest_nodes(text: str | None) -> list[str]:
    try:
        m = json.loads(text or "{}")
        return [n["hash"] for n in m["chunks"]["nodes"]]
    except (ValueError, KeyError, TypeError):
        return []  # format 1, or no chunk section: it names no node


def _kept_nodes(session: Session, dropped: set[str]) -> set[str]:
    kept: set[str] = set()
    rows = session.execute(
        select(DatasetVersion.version_id, DatasetVersion.manifest).where(
            DatasetVersion.status != VERSION_DELETED
        )
    )
    for version_id, manifest in rows:
        if version_id not in dropped:
            kept.update(_manifest_nodes(manifest))
    return kept


def _still_listed(session: Session, hashes: list[str], dropped: set[str]) -> set[str]:
    """Those of ``hashes`` some version gc keeps lists among its leaves."""
    listed: set[str] = set()
    for i in range(0, len(hashes), _BATCH):
        rows = session.execute(
            select(VersionChunk.chunk_hash, VersionChunk.version_id)
            .where(VersionChunk.chunk_hash.in_(hashes[i : i + _BATCH]))
            .distinct()
        )
        listed.update(h for h, vid in rows if vid not in dropped)
    return listed


def _on_disk_unrecorded(data_root: Path, folders: list[str]) -> set[str]:
    """Leaves and nodes of published version folders the store does not know (yet)."""
    out: set[str] = set()
    for rel in folders:
        try:
            manifest = json.loads((data_root / rel / "manifest.json").read_text())
            section = manifest["chunks"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.update(n["hash"] for n in section.get("nodes", []))
        try:
            out.update(leaf.hash for leaf in chunkread.walk_leaves(data_root, section))
        except (ch.ChunkError, OSError, ValueError, KeyError):
            continue
    return out


def chunk_bytes(data_root: Path, h: str) -> int:
    total = 0
    for suffix in _SUFFIXES:
        try:
            total += ch.chunk_path(data_root, h, suffix).stat().st_size
        except FileNotFoundError:
            pass
    return total


def plan_chunks(
    session: Session,
    data_root: Path,
    *,
    dropped: set[str],
    unrecorded_folders: list[str],
    min_age_s: float,
    remote: Any = None,
) -> list[dict[str, Any]]:
    """The chunks gc removes when it drops the versions ``dropped``: dicts of ``hash``,
    ``kind``, ``bytes``, ``recorded``. ``unrecorded_folders``: version folders (relative to
    DATA_ROOT) on disk that the store does not record and gc leaves in place. ``remote``: an
    ``s3://`` data root's listing (``gc_s3.Listing``), which then answers for the files."""
    if remote is not None:
        protected = remote.unrecorded_chunks(unrecorded_folders)
    else:
        protected = _on_disk_unrecorded(data_root, unrecorded_folders)
    # Leaves: of the dropped versions, and rows no version lists at all.
    candidates: set[str] = set()
    drop_list = sorted(dropped)
    for i in range(0, len(drop_list), _BATCH):
        candidates.update(
            session.scalars(
                select(VersionChunk.chunk_hash).where(
                    VersionChunk.version_id.in_(drop_list[i : i + _BATCH])
                )
            )
        )
    listed_any = select(VersionChunk.chunk_hash).where(VersionChunk.chunk_hash == Chunk.hash)
    candidates.update(
        session.scalars(select(Chunk.hash).where(Chunk.kind == CHUNK_LEAF, ~listed_any.exists()))
    )
    leaf_list = sorted(candidates - protected)
    gone_leaves = set(leaf_list) - _still_listed(session, leaf_list, dropped)
    kept_nodes = _kept_nodes(session, dropped) | protected
    gone_nodes = {
        h for h in session.scalars(select(Chunk.hash).where(Chunk.kind == CHUNK_NODE))
    } - kept_nodes
    size = remote.chunk_bytes if remote is not None else (lambda h: chunk_bytes(data_root, h))
    out = [
        {"hash": h, "kind": kind, "bytes": size(h), "recorded": True}
        for kind, hashes in ((CHUNK_LEAF, gone_leaves), (CHUNK_NODE, gone_nodes))
        for h in sorted(hashes)
    ]
    if remote is not None:
        recorded = set(session.scalars(select(Chunk.hash)))
        out.extend(remote.leftover_chunks(recorded | protected, min_age_s))
    else:
        out.extend(_leftover_files(session, data_root, protected, min_age_s))
    return out


def _leftover_files(
    session: Session, data_root: Path, protected: set[str], min_age_s: float
) -> list[dict[str, Any]]:
    """Chunk files with no ``chunks`` row, older than ``min_age_s``; temp files too."""
    root = Path(data_root) / ch.CHUNKS_DIR
    if not root.is_dir():
        return []
    recorded = set(session.scalars(select(Chunk.hash)))
    now = time.time()
    found: dict[str, dict[str, Any]] = {}
    for sub in sorted(root.iterdir()):
        if not sub.is_dir():
            continue
        for f in sorted(sub.iterdir()):
            name = f.name
            h = name.split(".", 1)[0]
            is_temp = name.startswith(".tmp-")
            if not is_temp and (h in recorded or h in protected or len(h) != 64):
                continue
            try:
                st = f.stat()
            except FileNotFoundError:
                continue
            if now - st.st_mtime < min_age_s:
                continue  # a build in flight may be about to record it
            key = f"{sub.name}/{name}" if is_temp else h
            item = found.setdefault(
                key,
                {"hash": key, "kind": "temp" if is_temp else "file", "bytes": 0, "recorded": False},
            )
            item["bytes"] += st.st_size
    return list(found.values())


def delete_chunks(session: Session, data_root: Path, planned: list[dict[str, Any]]) -> None:
    """Drop the planned chunks' rows (in ``session``: they go with the versions' rows)."""
    hashes = [c["hash"] for c in planned if c["recorded"]]
    for i in range(0, len(hashes), _BATCH):
        part = hashes[i : i + _BATCH]
        drop_entries(session, part)
        session.execute(delete(Chunk).where(Chunk.hash.in_(part)))


def remove_chunk_files(data_root: Path, planned: list[dict[str, Any]]) -> None:
    """Remove the planned chunks' files, once their rows are gone for good."""
    root = Path(data_root) / ch.CHUNKS_DIR
    for c in planned:
        if c["kind"] == "temp":
            (root / c["hash"]).unlink(missing_ok=True)
            continue
        for suffix in _SUFFIXES:
            ch.chunk_path(data_root, c["hash"], suffix).unlink(missing_ok=True)

"""One scan's pass over the lake: walk it, hash what the fast path hands back, sort each file
into the ScanResult (new, changed, renamed, touched, deleted, refused, unreadable) and write the
ledger rows that differ.

Kept apart from ``pipeline.lake.scan``, which owns the entry point around this pass: the lake's
location, the transaction, the lock row and the scan row. Unchanged rows get no statement at all
(their last sighting is the scan's, ``pipeline.lake.last_seen``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from pipeline.lake.ledger_db import (
    STATUS_INVALID,
    STATUS_OK,
    STATUS_REFUSED,
    STATUS_UNREADABLE,
    LedgerTx,
)
from pipeline.lake.ledger_keys import LedgerKeys
from pipeline.lake.walk import (
    Candidate,
    FastPath,
    Refused,
    Settling,
    StatKey,
    Unlistable,
    walk_lake,
)

if TYPE_CHECKING:
    from pipeline.lake.s3hashing import S3HashPool
    from pipeline.lake.scan import ScanResult

# New ledger rows are inserted in batches of this many as hash results arrive.
INSERT_BATCH = 2048


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str
    md5: str | None
    size: int | None = None
    previous_md5: str | None = None
    renamed_from: str | None = None


class _Known(NamedTuple):
    id: int
    key: StatKey | None
    md5: str | None
    status: str
    deleted: bool


def scan_into(
    tx: LedgerTx,
    result: ScanResult,
    lake: Path | str,
    dataset: str | None,
    settle: float,
    workers: int,
    now: datetime,
    on_total: Callable[[int], None] | None,
    on_progress: Callable[[int], None] | None,
) -> None:
    """Walk ``lake`` into ``result`` and write its rows on ``tx``, whose caller holds the
    lake's lock row and owns the scan row."""
    from pipeline.lake.hashing import HashPool

    hasher_pool: HashPool | S3HashPool
    entries: Iterator[object]
    if isinstance(lake, str):
        # An S3 lake (pipeline.lake.s3walk): listings instead of the stat walk, objects
        # streamed through MD5 on a thread pool; its fast-path key is (size, LastModified,
        # ETag, VersionId), read off the ledger's etag/version_id columns.
        from pipeline.lake.s3hashing import S3HashPool
        from pipeline.lake.s3walk import walk_s3_lake
        from pipeline.storage.listing import LakeReader

        reader = LakeReader()
        fast = FastPath(tx.load_s3_keys(dataset))
        hasher_pool = S3HashPool(reader, on_progress=on_progress)
        entries = walk_s3_lake(lake, dataset=dataset, fast=fast, reader=reader)
    else:
        fast = FastPath({})  # filled by the walk: each walking process reads its own keys
        hasher_pool = HashPool(workers, on_progress=on_progress)
        # The hash workers' processes also walk a large lake, split by folder (walk_split).
        entries = walk_lake(
            lake,
            dataset=dataset,
            settle_seconds=settle,
            fast=fast,
            shares=workers,
            keys=LedgerKeys(tx, dataset),
        )
    to_hash: list[Candidate] = []
    seen: set[str] = set()  # paths the walk yielded (the fast path's matches are counted)
    unlisted: list[str] = []
    refused: dict[str, Refused] = {}
    with hasher_pool as hasher:
        for entry in entries:
            if type(entry) is Candidate:
                seen.add(entry.path)
                to_hash.append(entry)
                if type(entry.key) is StatKey:
                    hasher.add(entry.path, entry.abspath)
                else:
                    hasher.add(entry.path, entry.abspath, entry.key.version_id)  # type: ignore[call-arg,union-attr]
            elif isinstance(entry, Settling):
                seen.add(entry.path)  # exists; just not ready
                result.settling += 1
            elif isinstance(entry, Refused):
                # Kept apart from `seen` until the walk ends: an escaped path (a name that
                # is not UTF-8) can equal a real file's name, and the real file wins.
                if entry.path in refused:
                    result.refused.append((entry.path, _collided(entry.reason)))
                else:
                    refused[entry.path] = entry
            elif isinstance(entry, Unlistable):
                unlisted.append(entry.path)
                result.unreadable.append((entry.path, entry.reason))
        result.unchanged = fast.unchanged
        if on_total:
            on_total(len(to_hash))
        for path in [p for p in refused if p in seen or p in fast.matched_escapable]:
            # Reported, never recorded: its row would collide with the real file's row.
            result.refused.append((path, _collided(refused.pop(path).reason)))
        seen.update(refused)

        # Only what differs is read in full: fast-path rows whose key moved, or not seen.
        # Read in full: rows the walk handed back (key moved, or not to be trusted), present
        # rows it did not see (deleted now, unless under a folder it could not list), and the
        # rows of refused paths (recorded below).
        wanted = list(fast.stale)
        wanted += [p for p, row in fast.known.items() if not row[5] and not _under_any(p, unlisted)]
        wanted += [p for p in refused if p in fast.known]
        known = tx.full_rows(sorted(set(wanted)))
        fast.known.clear()
        vanished = [
            path
            for path, raw in known.items()
            if not raw[_DELETED] and path not in seen and not _under_any(path, unlisted)
        ]
        vanished_by_md5: dict[str, list[str]] = {}
        for path in vanished:
            md5 = known[path][_MD5]
            if md5:
                vanished_by_md5.setdefault(md5, []).append(path)

        renamed_sources: set[str] = set()
        inserts: list[dict[str, object]] = []
        updates: list[dict[str, object]] = []
        for cand, res in zip(to_hash, hasher.iter_results(), strict=True):
            row = _as_known(known.get(cand.path))
            stat_cols = {
                **_key_columns(cand.key),
                "last_seen": now,
                "last_scan_id": result.scan_id,
                "deleted_at": None,
            }
            if res.md5 is None:
                result.unreadable.append((cand.path, res.error or "unreadable"))
                cols = {**stat_cols, "md5": None, "status": STATUS_UNREADABLE, "error": res.error}
            else:
                result.bytes_hashed += cand.key.size
                cols = {**stat_cols, "md5": res.md5, "status": STATUS_OK, "error": None}
                if row is None or row.deleted or row.md5 is None:
                    cols["content_changed_at"] = now
                    sources = vanished_by_md5.get(res.md5)
                    if sources:
                        old = sources.pop(0)
                        renamed_sources.add(old)
                        result.renamed.append(
                            FileChange(cand.path, res.md5, cand.key.size, renamed_from=old)
                        )
                    else:
                        result.new.append(FileChange(cand.path, res.md5, cand.key.size))
                elif row.md5 != res.md5:
                    cols["content_changed_at"] = now
                    result.changed.append(
                        FileChange(cand.path, res.md5, cand.key.size, previous_md5=row.md5)
                    )
                else:
                    if row.status == STATUS_INVALID:
                        # Same bytes: the preprocessor's verdict still holds.
                        cols["status"] = STATUS_INVALID
                        cols.pop("error")
                    result.touched.append(FileChange(cand.path, res.md5, cand.key.size))
            if row is None:
                inserts.append(_new_row(cand.path, cols, now))
                if len(inserts) >= INSERT_BATCH:  # insert while the pool hashes the rest
                    tx.insert_rows(inserts)
                    inserts = []
            else:
                updates.append({"row_id": row.id, **cols})

    for entry in refused.values():
        row = _as_known(known.get(entry.path))
        cols = {
            "status": STATUS_REFUSED,
            "error": entry.reason,
            "md5": None,
            "last_seen": now,
            "last_scan_id": result.scan_id,
            "deleted_at": None,
            "size": None,
            "mtime_ns": None,
            "ctime_ns": None,
            "inode": None,
            "etag": None,
            "version_id": None,
        }
        result.refused.append((entry.path, entry.reason))
        if row is None:
            inserts.append(_new_row(entry.path, cols, now))
        else:
            updates.append({"row_id": row.id, **cols})

    for path in vanished:
        row = _as_known(known[path])
        # A rename's old path is gone, but its content was not deleted.
        if path not in renamed_sources:
            result.deleted.append(FileChange(path, row.md5))
        updates.append({"row_id": row.id, "deleted_at": now, "last_scan_id": result.scan_id})

    # No statement for the rows that did not change: a present row's last sighting is this
    # scan's (pipeline.lake.last_seen); refreshing last_seen on every row cost a 1M-file
    # no-change rescan more than the rest of the scan together.
    tx.insert_rows(inserts)
    tx.update_rows(updates)


def _key_columns(key: object) -> dict[str, object]:
    """The ledger columns of a change key: a file's stat key, or an object's S3 key (whose
    LastModified goes to mtime_ns; ctime and inode do not exist in S3)."""
    if type(key) is StatKey:
        return {
            "size": key.size,
            "mtime_ns": key.mtime_ns,
            "ctime_ns": key.ctime_ns,
            "inode": key.inode,
            "etag": None,
            "version_id": None,
        }
    return {
        "size": key.size,  # type: ignore[attr-defined]
        "mtime_ns": key.mtime_ns,  # type: ignore[attr-defined]
        "ctime_ns": None,
        "inode": None,
        "etag": key.etag,  # type: ignore[attr-defined]
        "version_id": key.version_id,  # type: ignore[attr-defined]
    }


def _collided(reason: str) -> str:
    return f"{reason} (another file has this name in the ledger; not recorded)"


def _new_row(path: str, cols: dict[str, object], now: object) -> dict[str, object]:
    return {
        "path": path,
        "dataset": path.split("/", 1)[0] if "/" in path else "",
        "first_seen": now,
        "content_changed_at": now,
        **cols,
    }


def _under_any(path: str, prefixes: list[str]) -> bool:
    return any(p == "" or path == p or path.startswith(p + "/") for p in prefixes)


# Positions in a full ledger row (ledger_db._FULL_COLUMNS).
_MD5, _STATUS, _DELETED = 6, 7, 8


def _as_known(raw: tuple | None) -> _Known | None:
    if raw is None:
        return None
    row_id, _path, size, mtime, ctime, inode, md5, status, deleted = raw
    key = StatKey(size, mtime, ctime, inode) if size is not None else None
    return _Known(row_id, key, md5, status, bool(deleted))

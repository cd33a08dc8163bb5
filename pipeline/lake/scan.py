"""The ledger scan: stat every lake file, hash only new or changed ones, record the result.

One scan is one transaction. It first takes the lake's lock row, so a second scan of the same
lake waits (or, with ``wait=False``, fails with ScanBusyError) and then sees the first one's
result instead of hashing the same files again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

from sqlalchemy import and_, bindparam, update
from sqlalchemy.orm import Session

from pipeline.gcpause import gc_paused
from pipeline.lake.hashing import HashPool
from pipeline.lake.walk import Candidate, Refused, Settling, StatKey, Unlistable, walk_lake
from pipeline.metadata.base import UTCDateTime, utcnow
from pipeline.metadata.driver import driver_executemany, driver_rows
from pipeline.metadata.ledger import (
    STATUS_INVALID,
    STATUS_OK,
    STATUS_REFUSED,
    STATUS_UNREADABLE,
    LakeLock,
    LedgerFile,
    Scan,
)
from pipeline.metadata.locks import LockBusyError, ensure_lock_row, take_lock_row
from pipeline.metadata.store import MetadataStore, open_store

# last_seen (and last_scan_id) of an unchanged file is refreshed at most this often.
LAST_SEEN_RESOLUTION = timedelta(minutes=1)
# New ledger rows are inserted in batches of this many as hash results arrive.
INSERT_BATCH = 2048


class ScanBusyError(RuntimeError):
    """Another scan of the same lake holds the lock."""


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str
    md5: str | None
    size: int | None = None
    previous_md5: str | None = None
    renamed_from: str | None = None


@dataclass
class ScanResult:
    """What one scan saw. ``new``/``changed``/``renamed``/``deleted`` are content changes;
    ``touched`` files were re-hashed (their stat key moved) but kept their md5."""

    scan_id: int
    lake: str
    dataset: str | None
    new: list[FileChange] = field(default_factory=list)
    changed: list[FileChange] = field(default_factory=list)
    renamed: list[FileChange] = field(default_factory=list)
    deleted: list[FileChange] = field(default_factory=list)
    touched: list[FileChange] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    unchanged: int = 0
    settling: int = 0
    bytes_hashed: int = 0
    seconds: float = 0.0

    @property
    def files_seen(self) -> int:
        return (
            len(self.new)
            + len(self.changed)
            + len(self.renamed)
            + len(self.touched)
            + self.unchanged
            + len(self.unreadable)
        )

    @property
    def files_per_second(self) -> float:
        return self.files_seen / self.seconds if self.seconds > 0 else 0.0

    @property
    def has_content_changes(self) -> bool:
        return bool(self.new or self.changed or self.renamed or self.deleted)

    @property
    def changed_datasets(self) -> list[str]:
        paths = [
            c.path for group in (self.new, self.changed, self.renamed, self.deleted) for c in group
        ]
        return sorted({p.split("/", 1)[0] for p in paths})

    def summary(self) -> dict[str, object]:
        return {
            "scan_id": self.scan_id,
            "dataset": self.dataset,
            "new": len(self.new),
            "changed": len(self.changed),
            "renamed": len(self.renamed),
            "deleted": len(self.deleted),
            "touched": len(self.touched),
            "unchanged": self.unchanged,
            "refused": len(self.refused),
            "unreadable": len(self.unreadable),
            "settling": self.settling,
            "bytes_hashed": self.bytes_hashed,
            "seconds": round(self.seconds, 4),
            "files_per_second": round(self.files_per_second, 1),
            "changed_datasets": self.changed_datasets,
        }

    def to_json(self) -> dict[str, object]:
        data = self.summary()
        for name in ("new", "changed", "renamed", "deleted", "touched"):
            data[f"{name}_files"] = [asdict(c) for c in getattr(self, name)]
        data["refused_files"] = [{"path": p, "reason": r} for p, r in self.refused]
        data["unreadable_files"] = [{"path": p, "error": e} for p, e in self.unreadable]
        return data


class _Known(NamedTuple):
    id: int
    key: StatKey | None
    md5: str | None
    status: str
    deleted: bool


@gc_paused()
def scan(
    lake: Path | None = None,
    *,
    dataset: str | None = None,
    store: MetadataStore | None = None,
    settle_seconds: float | None = None,
    workers: int | None = None,
    wait: bool = True,
    on_total: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> ScanResult:
    """Scan ``lake`` (default: settings.lake_dir), optionally one dataset, into the ledger."""
    from pipeline.settings import get_settings

    settings = get_settings()
    lake = Path(lake or settings.lake_dir)
    if not lake.is_dir():
        raise FileNotFoundError(f"lake folder does not exist: {lake}")
    if dataset is not None and ("/" in dataset or dataset in ("", ".", "..")):
        raise ValueError(f"dataset must be a first-level lake folder name, got {dataset!r}")
    store = store or open_store()
    settle = settings.settle_seconds if settle_seconds is None else settle_seconds
    workers = workers or settings.hash_workers
    lake_key = os.path.realpath(lake)

    ensure_lock_row(store, LakeLock, lake_key)
    started = time.perf_counter()
    with store.session() as session:
        try:
            take_lock_row(session, LakeLock, lake_key, wait=wait)
        except LockBusyError as exc:
            raise ScanBusyError(
                f"another scan of the lake {lake_key} is running; try again when it finishes"
            ) from exc
        scan_row = Scan(lake=lake_key, dataset=dataset)
        session.add(scan_row)
        session.flush()
        result = ScanResult(scan_id=scan_row.id, lake=lake_key, dataset=dataset)
        known = _load_ledger(session, dataset)
        now = utcnow()

        to_hash: list[Candidate] = []
        seen: set[str] = set()
        unlisted: list[str] = []
        refused: dict[str, Refused] = {}
        with HashPool(workers, on_progress=on_progress) as hasher:
            for entry in walk_lake(lake, dataset=dataset, settle_seconds=settle):
                if type(entry) is Candidate:
                    seen.add(entry.path)
                    raw = known.get(entry.path)
                    if (  # the fast path: a present, known file whose stat key did not move
                        raw is not None
                        and not raw[_DELETED]
                        and raw[_STATUS] in (STATUS_OK, STATUS_INVALID)
                        and (raw[2], raw[3], raw[4], raw[5]) == entry.key
                    ):
                        result.unchanged += 1
                    else:
                        to_hash.append(entry)
                        hasher.add(entry.path, entry.abspath)
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
            if on_total:
                on_total(len(to_hash))
            for path in [p for p in refused if p in seen]:
                # Reported, never recorded: its row would collide with the real file's row.
                result.refused.append((path, _collided(refused.pop(path).reason)))
            seen.update(refused)

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
                    "size": cand.key.size,
                    "mtime_ns": cand.key.mtime_ns,
                    "ctime_ns": cand.key.ctime_ns,
                    "inode": cand.key.inode,
                    "last_seen": now,
                    "last_scan_id": scan_row.id,
                    "deleted_at": None,
                }
                if res.md5 is None:
                    result.unreadable.append((cand.path, res.error or "unreadable"))
                    cols = {
                        **stat_cols,
                        "md5": None,
                        "status": STATUS_UNREADABLE,
                        "error": res.error,
                    }
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
                        _bulk_insert(session, inserts)
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
                "last_scan_id": scan_row.id,
                "deleted_at": None,
                "size": None,
                "mtime_ns": None,
                "ctime_ns": None,
                "inode": None,
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
            updates.append({"row_id": row.id, "deleted_at": now, "last_scan_id": scan_row.id})

        _write(session, inserts, updates, dataset, scan_row.id, now)
        result.seconds = time.perf_counter() - started
        _finish_scan_row(scan_row, result)
    return result


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


def _load_ledger(session: Session, dataset: str | None) -> dict[str, tuple]:
    # Plain driver SQL: ORM/Core result processing (timezone-aware datetimes per row) costs
    # more than the whole walk on a 20k-file no-change rescan.
    sql = (
        "SELECT id, path, size, mtime_ns, ctime_ns, inode, md5, status, "
        "CASE WHEN deleted_at IS NULL THEN 0 ELSE 1 END FROM ledger_files"
    )
    params: tuple[object, ...] = ()
    if dataset is not None:
        sql += " WHERE dataset = ?"
        params = (dataset,)
    fetched = driver_rows(session, sql, params)
    # Raw driver tuples keyed by path; only the rows a scan actually touches become _Known.
    return {row[1]: row for row in fetched}


# Positions in a raw ledger tuple from _load_ledger.
_MD5, _STATUS, _DELETED = 6, 7, 8


def _as_known(raw: tuple | None) -> _Known | None:
    if raw is None:
        return None
    row_id, _path, size, mtime, ctime, inode, md5, status, deleted = raw
    key = StatKey(size, mtime, ctime, inode) if size is not None else None
    return _Known(row_id, key, md5, status, bool(deleted))


def _write(
    session: Session,
    inserts: list[dict[str, object]],
    updates: list[dict[str, object]],
    dataset: str | None,
    scan_id: int,
    now: object,
) -> None:
    # One set-based statement marks the present rows as seen; only real changes get per-row
    # statements. It skips rows seen within LAST_SEEN_RESOLUTION: rewriting every row on every
    # rescan doubled the cost of a no-change rescan (and grew SQLite's WAL by the whole table).
    seen = (
        update(LedgerFile)
        .where(
            LedgerFile.deleted_at.is_(None),
            LedgerFile.last_seen < now - LAST_SEEN_RESOLUTION,  # type: ignore[operator]
        )
        .values(last_seen=now, last_scan_id=scan_id)
    )
    if dataset is not None:
        seen = seen.where(LedgerFile.dataset == dataset)
    session.execute(seen)
    if inserts:
        _bulk_insert(session, inserts)
    by_shape: dict[tuple[str, ...], list[dict[str, object]]] = {}
    for u in updates:
        by_shape.setdefault(tuple(sorted(u)), []).append(u)
    table = LedgerFile.__table__
    for shape, rows in by_shape.items():
        values = {k: bindparam(k) for k in shape if k != "row_id"}
        stmt = table.update().where(and_(table.c.id == bindparam("row_id"))).values(values)
        session.connection().execute(stmt, rows)


def _bulk_insert(session: Session, rows: list[dict[str, object]]) -> None:
    """Insert ledger rows through the DBAPI's executemany.

    A cold scan inserts one row per lake file; SQLAlchemy's per-row parameter processing
    costs more than hashing the files. Values are converted once per distinct value with the
    column type's own bind processor, so both backends store exactly what the ORM would.
    """
    conn = session.connection()
    dialect = conn.dialect
    table = LedgerFile.__table__
    columns = sorted({key for row in rows for key in row})
    converters = []
    for i, name in enumerate(columns):
        proc = table.c[name].type.bind_processor(dialect)
        if dialect.name == "sqlite" and isinstance(table.c[name].type, UTCDateTime):
            # pysqlite would adapt each datetime with isoformat(" ") per row; do it once.
            proc = _sqlite_datetime(proc)
        if proc is not None:
            converters.append((i, proc, {}))
    sql = (
        f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    )
    params = []
    for row in rows:
        values = [row.get(c) for c in columns]
        for i, proc, cache in converters:  # every row of a scan shares one `now`: convert once
            v = values[i]
            if v is not None:
                values[i] = cache[v] if v in cache else cache.setdefault(v, proc(v))
        params.append(values)
    driver_executemany(session, sql, params)


def _sqlite_datetime(proc):  # type: ignore[no-untyped-def]
    def convert(value):  # type: ignore[no-untyped-def]
        value = proc(value) if proc is not None else value
        return value.isoformat(" ") if hasattr(value, "isoformat") else value

    return convert


def _finish_scan_row(row: Scan, result: ScanResult) -> None:
    row.finished_at = utcnow()
    row.new = len(result.new)
    row.changed = len(result.changed)
    row.deleted = len(result.deleted)
    row.renamed = len(result.renamed)
    row.touched = len(result.touched)
    row.unchanged = result.unchanged
    row.refused = len(result.refused)
    row.unreadable = len(result.unreadable)
    row.settling = result.settling
    row.bytes_hashed = result.bytes_hashed
    row.seconds = result.seconds

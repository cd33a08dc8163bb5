"""The ledger scan: stat every lake file, hash only new or changed ones, record the result.

One scan is one transaction. It first takes the lake's lock row, so a second scan of the same
lake waits (or, with ``wait=False``, fails with ScanBusyError) and then sees the first one's
result instead of hashing the same files again.

What it costs (a no-change rescan of a million files must stay near a bare stat walk): the
fast path runs inside the walk (``walk.FastPath``) against five values per ledger row
(``ledger_db.load_keys``); only the rows that differ are read in full; unchanged rows get no
statement at all (their last sighting is the scan's, ``pipeline.lake.last_seen``). All SQL
runs on a plain DBAPI connection (``ledger_db``), so a SQLite store at head is scanned without
importing SQLAlchemy (``pipeline.metadata.fastpath``). This module owns the entry point
(lake location, transaction, lock row, scan row) and the result; the pass over the lake and
its ledger rows is ``pipeline.lake.scan_pass``.

An ``s3://`` lake goes through the same steps with listings instead of the stat walk
(``pipeline.lake.s3walk``), streamed GETs instead of file reads (``pipeline.lake.s3hashing``)
and (size, LastModified, ETag, VersionId) as the fast-path key (docs/s3-lake.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.cyclic_gc import gc_paused
from pipeline.lake.ledger_db import (
    LockBusyError,
    sqlite_transaction,
    store_transaction,
)
from pipeline.lake.scan_pass import FileChange, scan_into

if TYPE_CHECKING:
    from pipeline.metadata.store import MetadataStore


class ScanBusyError(RuntimeError):
    """Another scan of the same lake holds the lock."""


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


@gc_paused()
def scan(
    lake: Path | str | None = None,
    *,
    dataset: str | None = None,
    store: MetadataStore | None = None,
    settle_seconds: float | None = None,
    workers: int | None = None,
    wait: bool = True,
    on_total: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> ScanResult:
    """Scan ``lake`` (default: settings.lake_dir; a folder, or an ``s3://bucket/prefix``
    string), optionally one dataset, into the ledger."""
    from pipeline.settings import get_settings

    settings = get_settings()
    if dataset is not None and ("/" in dataset or dataset in ("", ".", "..")):
        raise ValueError(f"dataset must be a first-level lake folder name, got {dataset!r}")
    lake = _lake_location(lake if lake is not None else settings.lake_dir)
    settle = settings.settle_seconds if settle_seconds is None else settle_seconds
    workers = workers or settings.hash_workers
    # The lock row's key: the folder's real path, or the lake's URL.
    lake_key = lake if isinstance(lake, str) else os.path.realpath(lake)

    with _transactions(store, settings.database_url) as transaction:
        with transaction() as tx:
            tx.ensure_lock_row(lake_key)
        started = time.perf_counter()
        with transaction() as tx:
            now = datetime.now(UTC)
            try:
                tx.take_lock_row(lake_key, wait=wait, now=now)
            except LockBusyError as exc:
                raise ScanBusyError(
                    f"another scan of the lake {lake_key} is running; try again when it finishes"
                ) from exc
            scan_id = tx.insert_scan(lake_key, dataset, now)
            result = ScanResult(scan_id=scan_id, lake=lake_key, dataset=dataset)
            scan_into(tx, result, lake, dataset, settle, workers, now, on_total, on_progress)
            result.seconds = time.perf_counter() - started
            tx.finish_scan(scan_id, _counts(result), result.seconds)
    return result


def _lake_location(lake: Path | str) -> Path | str:
    """A local lake as a Path that must be a folder; an S3 lake as its URL string."""
    if isinstance(lake, str) and lake.startswith("s3://"):
        # Imported only here: a scan of a folder does not load the storage layer.
        from pipeline.storage.urls import split_s3_url

        split_s3_url(lake)  # a malformed URL fails here, naming it
        return lake.rstrip("/")
    if str(lake).startswith("s3:/"):
        # Path("s3://b/p") collapsed the scheme: the caller turned the URL into a Path.
        raise ValueError(f"an S3 lake must be given as an s3://bucket/prefix string, not {lake!r}")
    lake = Path(lake)
    if not lake.is_dir():
        raise FileNotFoundError(f"lake folder does not exist: {lake}")
    return lake


@contextmanager
def _transactions(store: MetadataStore | None, url: str) -> Iterator[Callable[[], object]]:
    """A factory of LedgerTx transactions: on a plain sqlite3 connection when no store was
    handed in and the SQLite store is already at head (no SQLAlchemy import), else on the
    store's sessions (open_store migrates a store that is behind)."""
    if store is None:
        from pipeline.metadata.fastpath import open_sqlite_at_head

        conn = open_sqlite_at_head(url)
        if conn is not None:
            try:
                yield lambda: sqlite_transaction(conn, url)
            finally:
                conn.close()
            return
        from pipeline.metadata.store import open_store

        store = open_store(url)
    yield lambda: store_transaction(store)


def _counts(result: ScanResult) -> dict[str, int]:
    return {
        "new": len(result.new),
        "changed": len(result.changed),
        "deleted": len(result.deleted),
        "renamed": len(result.renamed),
        "touched": len(result.touched),
        "unchanged": result.unchanged,
        "refused": len(result.refused),
        "unreadable": len(result.unreadable),
        "settling": result.settling,
        "bytes_hashed": result.bytes_hashed,
    }

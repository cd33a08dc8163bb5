"""The scan's SQL, on a plain DBAPI connection: the lake's lock row, the scan row, the ledger
load and the writes, on SQLite (``sqlite3``) and PostgreSQL (psycopg) alike.

No SQLAlchemy here: `laketrain scan` on a SQLite store at head runs without importing it
(pipeline.metadata.fastpath), and inside a store's session the same SQL runs on the session's
own DBAPI connection. SQL is written with ``?`` markers; psycopg gets ``%s``.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.lake.walk_split import PathRange

STATUS_OK = "ok"  # the statuses of pipeline.metadata.ledger (a test keeps them equal)
STATUS_UNREADABLE = "unreadable"
STATUS_INVALID = "invalid"
STATUS_REFUSED = "refused"

# Rows the fast path may trust: present, a verdict that holds while the bytes do, a full key.
_FAST = (
    "deleted_at IS NULL AND status IN ('ok', 'invalid') AND size IS NOT NULL "
    "AND mtime_ns IS NOT NULL AND ctime_ns IS NOT NULL AND inode IS NOT NULL"
)
# The same for an object of an S3 lake: its key is (size, LastModified, ETag, VersionId).
_FAST_S3 = (
    "deleted_at IS NULL AND status IN ('ok', 'invalid') AND size IS NOT NULL "
    "AND mtime_ns IS NOT NULL AND etag IS NOT NULL"
)
_FULL_COLUMNS = (
    "id, path, size, mtime_ns, ctime_ns, inode, md5, status, "
    "CASE WHEN deleted_at IS NULL THEN 0 ELSE 1 END"
)
_PATH_BATCH = 500
_SQLITE_BUSY_MS = 600_000  # restored after a non-waiting lock attempt (the engine's default)
_SCAN_COUNTS = (
    "new",
    "changed",
    "deleted",
    "renamed",
    "touched",
    "unchanged",
    "refused",
    "unreadable",
    "settling",
    "bytes_hashed",
)


class LockBusyError(RuntimeError):
    """Another scan holds the lake's lock row and the caller chose not to wait."""


class LedgerTx:
    """One transaction on a DBAPI connection; ``dialect`` is ``sqlite`` or ``postgresql``."""

    def __init__(self, conn: Any, dialect: str, url: str | None = None) -> None:
        self.conn = conn
        self.dialect = dialect
        self.url = url  # the store's, for a share process's own connection (ledger_keys.py)
        self._qmark = dialect == "sqlite"

    def _sql(self, sql: str) -> str:
        return sql if self._qmark else sql.replace("?", "%s")

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        cursor = self.conn.cursor()
        try:
            cursor.execute(self._sql(sql), tuple(params))
            return cursor.fetchall()
        finally:
            cursor.close()

    def execute(self, sql: str, params: Sequence[object] = ()) -> None:
        cursor = self.conn.cursor()
        try:
            cursor.execute(self._sql(sql), tuple(params))
        finally:
            cursor.close()

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        if not rows:
            return
        cursor = self.conn.cursor()
        try:
            cursor.executemany(self._sql(sql), rows)
        finally:
            cursor.close()

    def ts(self, value: datetime) -> object:
        """A timestamp as the ORM's UTCDateTime stores it: SQLite text in UTC, else as is."""
        if self._qmark:
            return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        return value

    # ------------------------------------------------------------------ lock and scan row

    def ensure_lock_row(self, lake: str) -> None:
        # Read first: an INSERT, even one that does nothing, waits for SQLite's write lock,
        # which a running scan holds; a scan with wait=False must reach take_lock_row at once.
        if not self.rows("SELECT 1 FROM lake_locks WHERE lake = ?", (lake,)):
            self.execute(
                "INSERT INTO lake_locks (lake) VALUES (?) ON CONFLICT (lake) DO NOTHING", (lake,)
            )

    def take_lock_row(self, lake: str, *, wait: bool, now: datetime) -> None:
        """Hold the lake's lock row until this transaction ends (PostgreSQL's row lock,
        SQLite's write lock); with ``wait=False`` raise LockBusyError at once when held."""
        if not wait:
            if self._qmark:
                self.execute("PRAGMA busy_timeout = 0")
            else:
                self.execute("SET LOCAL lock_timeout = '1ms'")
        try:
            self.execute(
                "UPDATE lake_locks SET holder = ?, since = ? WHERE lake = ?",
                (f"{socket.gethostname()}:{os.getpid()}", self.ts(now), lake),
            )
        except _operational_errors() as exc:
            raise LockBusyError(f"lake_locks {lake!r} is held by another writer") from exc
        finally:
            if self._qmark and not wait:
                self.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_MS}")

    def insert_scan(self, lake: str, dataset: str | None, now: datetime) -> int:
        zeros = ", ".join("0" for _ in _SCAN_COUNTS)
        (row,) = self.rows(
            f"INSERT INTO scans (lake, dataset, started_at, {', '.join(_SCAN_COUNTS)}, seconds) "
            f"VALUES (?, ?, ?, {zeros}, 0) RETURNING id",
            (lake, dataset, self.ts(now)),
        )
        return int(row[0])

    def finish_scan(self, scan_id: int, counts: dict[str, int], seconds: float) -> None:
        sets = ", ".join(f"{name} = ?" for name in _SCAN_COUNTS)
        self.execute(
            f"UPDATE scans SET finished_at = ?, {sets}, seconds = ? WHERE id = ?",
            (
                self.ts(datetime.now(UTC)),
                *(counts[name] for name in _SCAN_COUNTS),
                seconds,
                scan_id,
            ),
        )

    # ------------------------------------------------------------------ reads

    def load_keys(self, dataset: str | None, where: PathRange | None = None) -> dict[str, tuple]:
        """``path -> (path, size, mtime_ns, ctime_ns, inode, deleted)`` for every row (or those
        of a split walk's share, ``where``), in one pass over the table: five small values per
        file instead of the whole row (a 1M-file ledger). A row the fast path must not trust
        (deleted, unreadable, refused, no full key) gets size -1, which no file has, so the
        walk hands it back to the scan."""
        return self._keys(_FAST, "ctime_ns, inode", dataset, where)

    def count_keys(self, dataset: str | None) -> int:
        """The rows load_keys would return."""
        sql, params = self._where_dataset("SELECT COUNT(*) FROM ledger_files WHERE 1 = 1", dataset)
        return int(self.rows(sql, params)[0][0])

    def load_s3_keys(self, dataset: str | None) -> dict[str, tuple]:
        """``path -> (path, size, mtime_ns, etag, version_id, deleted)``: load_keys for an S3
        lake (pipeline.lake.s3walk). A row of a local file has no etag, so it gets size -1."""
        return self._keys(_FAST_S3, "etag, version_id", dataset)

    def _keys(
        self, trusted: str, key_columns: str, dataset: str | None, where: PathRange | None = None
    ) -> dict[str, tuple]:
        # One query for both lake kinds: (path, size or -1 when untrusted, mtime_ns, the two
        # key columns of this kind, deleted).
        table = "ledger_files"
        ranged, bounds = "", ()
        if where is not None:
            ranged, bounds = self._range_clause(where)
            if self.dialect == "sqlite":
                # A full pass: SQLite would walk the path index for a range, one table lookup a
                # row, at half the speed of reading the table through (measured at 1M rows).
                table = "ledger_files NOT INDEXED"
        sql = (
            f"SELECT path, CASE WHEN {trusted} THEN size ELSE -1 END, mtime_ns, {key_columns}, "
            f"CASE WHEN deleted_at IS NULL THEN 0 ELSE 1 END FROM {table} WHERE 1 = 1{ranged}"
        )
        sql, params = self._where_dataset(sql, dataset)
        cursor = self.conn.cursor()
        try:
            cursor.execute(sql, (*bounds, *params))
            return {row[0]: row for row in cursor}
        finally:
            cursor.close()

    def _range_clause(self, where: PathRange) -> tuple[str, tuple[str, ...]]:
        """PathRange.select in SQL. Paths compare as code points, which is UTF-8 byte order:
        SQLite's BINARY collation, PostgreSQL's "C" (a database's locale would interleave
        punctuation and letters, and the shares' ranges would overlap)."""
        path = "path" if self.dialect == "sqlite" else 'path COLLATE "C"'
        # At least two slashes: inside a dataset's subfolder (psycopg reads % as a marker).
        deep = "path LIKE '%/%/%'" if self._qmark else "path LIKE '%%/%%/%%'"
        if where.first:
            if where.high is None:
                return "", ()
            return f" AND ({path} < ? OR NOT {deep})", (where.high,)
        clause, bounds = f" AND {path} >= ? AND {deep}", (where.low,)
        if where.high is not None:
            clause, bounds = clause + f" AND {path} < ?", (where.low, where.high)
        return clause, bounds

    def full_rows(self, paths: Sequence[str]) -> dict[str, tuple]:
        """Full rows (``_FULL_COLUMNS``) by path: the few rows a scan must look at closely."""
        out: dict[str, tuple] = {}
        for i in range(0, len(paths), _PATH_BATCH):
            batch = paths[i : i + _PATH_BATCH]
            marks = ", ".join("?" * len(batch))
            for row in self.rows(
                f"SELECT {_FULL_COLUMNS} FROM ledger_files WHERE path IN ({marks})", batch
            ):
                out[row[1]] = row
        return out

    def _where_dataset(self, sql: str, dataset: str | None) -> tuple[str, tuple]:
        if dataset is None:
            return self._sql(sql), ()
        return self._sql(sql + " AND dataset = ?"), (dataset,)

    # ------------------------------------------------------------------ writes

    def insert_rows(self, rows: list[dict[str, object]]) -> None:
        if not rows:
            return
        columns = sorted({key for row in rows for key in row})
        sql = (
            f"INSERT INTO ledger_files ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' * len(columns))})"
        )
        self.executemany(sql, [[self._value(row.get(c)) for c in columns] for row in rows])

    def update_rows(self, updates: list[dict[str, object]]) -> None:
        by_shape: dict[tuple[str, ...], list[dict[str, object]]] = {}
        for u in updates:
            by_shape.setdefault(tuple(sorted(k for k in u if k != "row_id")), []).append(u)
        for shape, rows in by_shape.items():
            sets = ", ".join(f"{k} = ?" for k in shape)
            self.executemany(
                f"UPDATE ledger_files SET {sets} WHERE id = ?",
                [[*(self._value(r[k]) for k in shape), r["row_id"]] for r in rows],
            )

    def _value(self, value: object) -> object:
        return self.ts(value) if isinstance(value, datetime) else value


def _operational_errors() -> tuple[type[BaseException], ...]:
    import sqlite3

    errors: list[type[BaseException]] = [sqlite3.OperationalError]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        errors.append(psycopg.OperationalError)
    return tuple(errors)


@contextmanager
def store_transaction(store: Any) -> Iterator[LedgerTx]:
    """A LedgerTx on a MetadataStore session's own connection (committed with the session)."""
    with store.session() as session:
        conn = session.connection()
        yield LedgerTx(conn.connection, conn.dialect.name, store.url)


@contextmanager
def sqlite_transaction(conn: Any, url: str | None = None) -> Iterator[LedgerTx]:
    """A LedgerTx on a plain ``sqlite3`` connection: committed on success, else rolled back;
    "database is locked" past the busy timeout is StoreBusyError, as through the engine."""
    import sqlite3

    try:
        yield LedgerTx(conn, "sqlite", url)
        conn.commit()
    except BaseException as exc:
        conn.rollback()
        if isinstance(exc, sqlite3.OperationalError) and "database is locked" in str(exc):
            from pipeline.metadata.store import StoreBusyError

            raise StoreBusyError("the metadata store is locked by another writer") from exc
        raise

"""The fast path's ledger keys for one scan's walk, read as the walk needs them.

A walk in one process reads them all on the scan's own connection. A split walk
(pipeline.lake.walk_split) reads one share's range in each walking process at once: the scan's
process its own on its connection, each share process its own on a connection of its own,
opened after the fork and closed before it leaves. At a million rows that halves the keys'
read (~1.4 s in one process), and no process holds another's keys.

A share process reads the committed ledger, as the scan's transaction does: the scan holds
the lake's lock row, and only a scan writes the fast path's key columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pipeline.lake.ledger_db import LedgerTx

if TYPE_CHECKING:
    from pipeline.lake.walk_split import PathRange


class LedgerKeys:
    """The keys of ``dataset`` (None: every dataset) for a walk on ``tx``'s transaction."""

    def __init__(self, tx: LedgerTx, dataset: str | None) -> None:
        self._tx, self._dataset = tx, dataset

    def count(self) -> int:
        return self._tx.count_keys(self._dataset)

    @property
    def reopenable(self) -> bool:
        """Whether another process can open the store (not an in-memory SQLite database)."""
        return _reader_target(self._tx) is not None

    def load(self, where: PathRange | None = None) -> dict[str, tuple]:
        """All the keys, or those ``where`` owns, on the scan's connection."""
        return self._tx.load_keys(self._dataset, where)

    def load_apart(self, where: PathRange) -> dict[str, tuple]:
        """The keys ``where`` owns, on a connection of this process's own (a share process
        must never use the connection it inherited)."""
        with _own_connection(self._tx) as tx:
            return tx.load_keys(self._dataset, where)


def _reader_target(tx: LedgerTx) -> str | None:
    """What a new connection opens: the SQLite file, or the store's URL; None: none can."""
    if tx.url is None:
        return None
    if tx.dialect == "sqlite":
        from pipeline.metadata.fastpath import sqlite_file

        return sqlite_file(tx.url)
    return tx.url


@contextmanager
def _own_connection(tx: LedgerTx) -> Iterator[LedgerTx]:
    target = _reader_target(tx)
    if target is None:
        raise RuntimeError("this store cannot be opened by another process")
    if tx.dialect == "sqlite":
        from pipeline.metadata.fastpath import connect_sqlite

        conn = connect_sqlite(tx.url, target)  # a file that cannot be opened: StoreUnavailable
        try:
            yield LedgerTx(conn, "sqlite", tx.url)
        finally:
            conn.close()
        return
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(target, poolclass=NullPool)
    try:
        conn = engine.raw_connection()
        try:
            yield LedgerTx(conn, tx.dialect, tx.url)
        finally:
            conn.close()
    finally:
        engine.dispose()

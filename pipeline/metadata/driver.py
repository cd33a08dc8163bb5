"""Bulk reads and writes straight through the DBAPI cursor, in the session's transaction.

Scans, plans and commits read or write one row per lake file; SQLAlchemy's per-row result and
parameter processing would cost more than the SQL itself. SQL here is written with ``?``
markers and rewritten for drivers with the ``format`` paramstyle (psycopg).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice

from sqlalchemy.orm import Session


def _native(session: Session, sql: str) -> str:
    if session.connection().dialect.paramstyle != "qmark":
        return sql.replace("?", "%s")
    return sql


def driver_rows(session: Session, sql: str, params: Sequence[object] = ()) -> list[tuple]:
    """All rows of ``sql`` as plain tuples."""
    cursor = session.connection().connection.cursor()
    try:
        cursor.execute(_native(session, sql), tuple(params))
        return cursor.fetchall()
    finally:
        cursor.close()


def driver_iter(
    session: Session, sql: str, params: Sequence[object] = (), *, batch: int = 5000
) -> Iterator[tuple]:
    """The rows of ``sql`` as plain tuples, fetched ``batch`` at a time: for reads of a row per
    lake file that the caller folds into something smaller, so the whole result is never held."""
    cursor = session.connection().connection.cursor()
    try:
        cursor.execute(_native(session, sql), tuple(params))
        while part := cursor.fetchmany(batch):
            yield from part
    finally:
        cursor.close()


def driver_executemany(
    session: Session, sql: str, rows: Iterable[Sequence[object]], *, batch: int = 0
) -> None:
    """Run ``sql`` once per row, in slices of ``batch`` rows when given. ``rows`` may be a
    generator: it is then drawn a batch at a time, never held whole."""
    step = batch or (len(rows) if isinstance(rows, Sequence) else 5000)
    it = iter(rows)
    part = list(islice(it, step))
    if not part:
        return
    sql = _native(session, sql)
    cursor = session.connection().connection.cursor()
    try:
        while part:
            cursor.executemany(sql, part)
            part = list(islice(it, step))
    finally:
        cursor.close()

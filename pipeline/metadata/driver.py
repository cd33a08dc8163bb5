"""Bulk reads and writes straight through the DBAPI cursor, in the session's transaction.

Scans, plans and commits read or write one row per lake file; SQLAlchemy's per-row result and
parameter processing would cost more than the SQL itself. SQL here is written with ``?``
markers and rewritten for drivers with the ``format`` paramstyle (psycopg).
"""

from __future__ import annotations

from collections.abc import Sequence

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


def driver_executemany(
    session: Session, sql: str, rows: Sequence[Sequence[object]], *, batch: int = 0
) -> None:
    """Run ``sql`` once per row (in slices of ``batch`` rows when given)."""
    if not rows:
        return
    sql = _native(session, sql)
    step = batch or len(rows)
    cursor = session.connection().connection.cursor()
    try:
        for i in range(0, len(rows), step):
            cursor.executemany(sql, rows[i : i + step])
    finally:
        cursor.close()

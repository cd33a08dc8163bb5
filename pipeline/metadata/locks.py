"""Lock rows: one row per resource (a lake, a dataset) that a writer updates first.

The update holds PostgreSQL's row lock, or SQLite's write lock, until the transaction ends, so
writers of one resource serialise across processes and hosts; readers are never blocked.
"""

from __future__ import annotations

import os
import socket

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from pipeline.metadata.base import utcnow
from pipeline.metadata.store import MetadataStore

# SQLite's busy timeout restored after a non-waiting attempt (the engine's own default).
_SQLITE_BUSY_MS = 600_000


class LockBusyError(RuntimeError):
    """Another writer holds the lock row and the caller chose not to wait."""


def ensure_lock_row(store: MetadataStore, model: type, key: str) -> None:
    """Create the resource's lock row if missing (its own short transaction)."""
    try:
        with store.session() as session:
            if session.get(model, key) is None:
                session.add(model(**{_key_column(model).name: key}))
    except IntegrityError:
        pass  # another process created it first


def take_lock_row(session: Session, model: type, key: str, *, wait: bool = True) -> None:
    """Hold the resource's lock for the rest of ``session``'s transaction; with ``wait=False``
    raise LockBusyError at once when another writer holds it."""
    conn = session.connection()
    dialect = conn.dialect.name
    if not wait:
        if dialect == "sqlite":
            conn.exec_driver_sql("PRAGMA busy_timeout = 0")
        elif dialect == "postgresql":
            conn.exec_driver_sql("SET LOCAL lock_timeout = '1ms'")
    try:
        session.execute(
            update(model)
            .where(_key_column(model) == key)
            .values(holder=f"{socket.gethostname()}:{os.getpid()}", since=utcnow())
        )
    except OperationalError as exc:
        raise LockBusyError(f"{model.__tablename__} {key!r} is held by another writer") from exc
    finally:
        if dialect == "sqlite" and not wait:
            conn.exec_driver_sql(f"PRAGMA busy_timeout = {_SQLITE_BUSY_MS}")


def _key_column(model: type):  # -> the mapped primary-key column
    (column,) = model.__table__.primary_key.columns  # type: ignore[attr-defined]
    return column

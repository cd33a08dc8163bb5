"""Open the metadata store: engine, SQLite pragmas, migrations on first use, sessions."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.metadata.fastpath import (  # noqa: F401 - StoreVersionError is caught from here
    MIGRATIONS_DIR,
    StoreVersionError,
    migration_revisions,
    revision_state,
)
from pipeline.redact import redact_text, redact_url

# libpq's connect timeout (seconds) unless the URL sets ``connect_timeout``: an unreachable
# host must fail a command in seconds, not after the OS's TCP timeout (minutes).
CONNECT_TIMEOUT_S = 10
# An arbitrary constant shared by every laketrain process: the PostgreSQL advisory lock that
# serialises concurrent first-use migrations.
_MIGRATION_LOCK_KEY = 7_514_212_001


class StoreBusyError(RuntimeError):
    """The store stayed locked by another writer for longer than we were willing to wait."""


class StoreUnavailable(SQLAlchemyError):
    """The store cannot be reached, or the connection to it was lost in the middle of a
    command. ``url`` has its password masked and ``detail`` is the driver's first line, so
    ``str()`` is safe to print. Whatever transaction was open is rolled back by the server.
    A SQLAlchemyError, so code that already handles store errors that way keeps doing so."""

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(url, detail)  # both in args: it pickles across a worker pool
        self.url = url
        self.detail = detail

    def __str__(self) -> str:
        return f"metadata store {self.url} is unavailable: {self.detail}"


def _unavailable_hook(url: str):  # -> a handle_error listener
    shown = redact_url(url)

    def on_error(ctx: ExceptionContext) -> None:
        # A failed pre-ping is SQLAlchemy's own business: it reconnects (and a failed
        # reconnect comes back here as a connect error). Lost connections and failed connects
        # (no connection yet) become StoreUnavailable; other errors (locks, constraints) pass.
        if ctx.is_pre_ping or not (ctx.is_disconnect or ctx.connection is None):
            return
        lines = str(ctx.original_exception).strip().splitlines() or [
            type(ctx.original_exception).__name__
        ]
        raise StoreUnavailable(shown, redact_text(lines[0])) from ctx.original_exception

    return on_error


def _sqlite_pragmas(busy_timeout_s: float):  # -> a "connect" listener
    def on_connect(dbapi_conn: object, _record: object) -> None:
        cursor = dbapi_conn.cursor()  # type: ignore[attr-defined]
        # WAL lets readers (the UI, the CLI) go on while a scan or a build writes.
        _retry_while_locked(lambda: cursor.execute("PRAGMA journal_mode=WAL"), busy_timeout_s)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return on_connect


def _retry_while_locked(statement, timeout_s: float) -> None:
    """Run ``statement``, retrying while SQLite says the file is locked. Switching a fresh file
    to WAL needs its exclusive lock, and SQLite answers "database is locked" at once, without
    calling the busy handler, when another process is switching it at the same instant (several
    processes opening a new store together): the busy timeout alone does not cover it."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            statement()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.2)


def make_engine(url: str, *, busy_timeout_s: float = 600.0) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": busy_timeout_s})
        event.listen(engine, "connect", _sqlite_pragmas(busy_timeout_s))
    else:
        connect_args = (
            {} if "connect_timeout" in parsed.query else {"connect_timeout": CONNECT_TIMEOUT_S}
        )
        engine = create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    event.listen(engine, "handle_error", _unavailable_hook(url))
    return engine


def alembic_config(url: str):  # -> alembic.config.Config, imported lazily (slow import)
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    """The migrations' head, read off the migration files (no Alembic import)."""
    return migration_revisions().head


def current_revision(engine: Engine) -> str | None:
    """The store's ``alembic_version`` row (None: never migrated). Plain SQL: loading Alembic
    to read one row cost more than a no-change scan."""
    from sqlalchemy import inspect

    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to ``revision``; concurrent callers wait their turn, then find the
    store current (alembic reads the revision again under the lock) and change nothing."""
    from alembic import command

    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK_KEY})
        elif engine.dialect.name == "sqlite":
            # The driver opens no transaction before DDL, so two processes on a fresh file would
            # both create alembic_version. BEGIN IMMEDIATE takes the write lock first (waiting
            # up to the busy timeout) and holds the whole upgrade in one transaction.
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


class MetadataStore:
    """A handle on one metadata database. Cheap to share within a process."""

    def __init__(self, url: str, *, auto_upgrade: bool = True) -> None:
        self.url = url
        self.engine = make_engine(url)
        # A newer store (unknown revision) raises StoreVersionError here: never downgrade it.
        if auto_upgrade and revision_state(current_revision(self.engine)) != "current":
            upgrade(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on any error."""
        with self._sessions() as session:
            try:
                yield session
                session.commit()
            except OperationalError as exc:
                session.rollback()
                if "database is locked" in str(exc):
                    raise StoreBusyError("the metadata store is locked by another writer") from exc
                raise
            except BaseException:
                session.rollback()
                raise

    def dispose(self) -> None:
        self.engine.dispose()


_stores: dict[str, MetadataStore] = {}
_stores_lock = threading.Lock()


def open_store(url: str | None = None) -> MetadataStore:
    """The store at ``url`` (default: the settings' METADATA_DB_URL), migrated to head."""
    if url is None:
        from pipeline.settings import get_settings

        url = get_settings().database_url
    with _stores_lock:
        store = _stores.get(url)
        if store is None:
            store = _stores[url] = MetadataStore(url)
        return store


def forget_store(url: str) -> None:
    """Close and drop the cached handle on ``url`` (its database is about to be deleted or
    replaced): the next open_store(url) connects and migrates afresh."""
    with _stores_lock:
        store = _stores.pop(url, None)
    if store is not None:
        store.dispose()

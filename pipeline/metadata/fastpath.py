"""The store's cheap paths, without SQLAlchemy or Alembic: the migration check and a plain
SQLite connection for the ledger scan.

Importing SQLAlchemy, pydantic-settings and Alembic cost a `laketrain scan` of an unchanged
20,000-file lake four times the scan itself. A store at head needs none of them: its revision
is one row of ``alembic_version``, and the head is read off the migration files' ``revision`` /
``down_revision`` lines. Alembic is loaded only when an upgrade is due
(``pipeline.metadata.store.upgrade``).
"""

from __future__ import annotations

import os
import re
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# The busy timeout the SQLAlchemy engine sets too (store.make_engine's default).
SQLITE_BUSY_TIMEOUT_S = 600.0

_ASSIGN = re.compile(r"^(revision|down_revision)\s*(?::[^=]+)?=\s*(.+?)\s*$", re.M)


class StoreVersionError(RuntimeError):
    """The store was migrated by a newer laketrain: its revision is not among this one's
    migrations. Nothing is changed; running an older laketrain on it would misread it."""


class Revisions(NamedTuple):
    head: str
    known: frozenset[str]


@lru_cache(maxsize=4)
def migration_revisions(folder: Path = MIGRATIONS_DIR / "versions") -> Revisions:
    """The single head and every revision of the migration files in ``folder``."""
    parents: dict[str, str | None] = {}
    for path in sorted(folder.glob("*.py")):
        found = dict(_ASSIGN.findall(path.read_text(encoding="utf-8")))
        if "revision" not in found:
            continue
        revision = _literal(found["revision"], path)
        down = _literal(found.get("down_revision", "None"), path)
        if not isinstance(revision, str) or not (down is None or isinstance(down, str)):
            raise RuntimeError(f"{path.name}: revision and down_revision must be plain strings")
        parents[revision] = down
    heads = set(parents) - {d for d in parents.values() if d is not None}
    if len(heads) != 1:
        raise RuntimeError(f"migrations in {folder} have {len(heads)} heads: {sorted(heads)}")
    return Revisions(heads.pop(), frozenset(parents))


def _literal(text: str, path: Path) -> object:
    text = text.split("#", 1)[0].strip()
    if text == "None":
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    raise RuntimeError(f"{path.name}: cannot read the revision {text!r}")


def revision_state(current: str | None, revisions: Revisions | None = None) -> str:
    """``"current"`` (at head), ``"behind"`` (empty or older: upgrade) for a store at
    ``current``; a revision this laketrain does not know raises StoreVersionError."""
    revisions = revisions or migration_revisions()
    if current == revisions.head:
        return "current"
    if current is None or current in revisions.known:
        return "behind"
    raise StoreVersionError(
        f"the metadata store is at migration {current!r}, which this laketrain does not know "
        f"(its newest is {revisions.head!r}): it was upgraded by a newer laketrain; "
        "use that version, nothing was changed"
    )


def sqlite_file(url: str) -> str | None:
    """The database file of a plain ``sqlite:///path`` URL, else None (other backends,
    in-memory databases and URLs with options go through SQLAlchemy)."""
    for prefix in ("sqlite:///", "sqlite+pysqlite:///"):
        if url.startswith(prefix):
            path = url[len(prefix) :]
            if not path or path == ":memory:" or "?" in path or "%" in path:
                return None
            return path
    return None


def connect_sqlite(url: str, path: str) -> sqlite3.Connection:
    """A connection set up like store.make_engine's (WAL, foreign keys, busy timeout); a file
    that cannot be opened is StoreUnavailable, like a failed connect through the engine."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
    except (OSError, sqlite3.Error) as exc:
        from pipeline.metadata.store import StoreUnavailable
        from pipeline.redact import redact_url

        raise StoreUnavailable(redact_url(url), str(exc).strip() or type(exc).__name__) from exc
    return conn


def stored_revision(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return row[0] if row else None


def open_sqlite_at_head(url: str) -> sqlite3.Connection | None:
    """A plain connection to the SQLite store at ``url`` when it is already at head; None when
    the URL is not a plain SQLite file or the store needs migrating (the caller then opens it
    through ``open_store``, which upgrades). A newer store raises StoreVersionError."""
    path = sqlite_file(url)
    if path is None or not os.path.exists(path):
        return None
    conn = connect_sqlite(url, path)
    try:
        if revision_state(stored_revision(conn)) == "current":
            return conn
    except BaseException:
        conn.close()
        raise
    conn.close()
    return None

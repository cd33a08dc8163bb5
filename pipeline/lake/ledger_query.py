"""Read-side queries on the ledger for the CLI and the UI."""

from __future__ import annotations

import fnmatch
import re

from sqlalchemy import select

from pipeline.lake.last_seen import LastSeen
from pipeline.lake.walk import escape_path
from pipeline.metadata.ledger import LedgerFile
from pipeline.metadata.store import MetadataStore, open_store

STATUSES = ("ok", "unreadable", "invalid", "refused", "deleted")


def list_files(
    *,
    path_glob: str | None = None,
    md5_prefix: str | None = None,
    status: str | None = None,
    limit: int = 1000,
    store: MetadataStore | None = None,
) -> list[dict[str, object]]:
    if status is not None and status not in STATUSES:
        raise ValueError(f"--status must be one of {', '.join(STATUSES)}; got {status!r}")
    if md5_prefix is not None and not re.fullmatch(r"[0-9a-fA-F]{1,32}", md5_prefix):
        raise ValueError(f"--md5 must be a hex prefix of at most 32 digits; got {md5_prefix!r}")
    store = store or open_store()
    if path_glob:
        # A name typed on the command line arrives as surrogates when it is not UTF-8; the
        # ledger holds such a path escaped (see pipeline.lake.walk).
        path_glob = escape_path(path_glob)
    query = select(LedgerFile).order_by(LedgerFile.path)
    if md5_prefix:
        query = query.where(LedgerFile.md5.startswith(md5_prefix.lower()))
    if status == "deleted":
        query = query.where(LedgerFile.deleted_at.is_not(None))
    elif status is not None:
        query = query.where(LedgerFile.status == status, LedgerFile.deleted_at.is_(None))
    if path_glob:
        # Narrow in SQL by the literal prefix before the first wildcard, then match exactly.
        prefix = re.split(r"[*?\[]", path_glob, maxsplit=1)[0]
        if prefix:
            query = query.where(LedgerFile.path.startswith(prefix, autoescape=True))
    rows = []
    with store.session() as session:
        seen = LastSeen(session)
        for f in session.scalars(query):
            if path_glob and not fnmatch.fnmatchcase(f.path, path_glob):
                continue
            rows.append(
                {
                    "path": f.path,
                    "dataset": f.dataset,
                    "size": f.size,
                    "md5": f.md5,
                    "status": "deleted" if f.deleted_at else f.status,
                    "error": f.error,
                    "first_seen": f.first_seen.isoformat(),
                    "last_seen": seen.of(f).isoformat(),
                    "deleted_at": f.deleted_at.isoformat() if f.deleted_at else None,
                }
            )
            if len(rows) >= limit:
                break
    return rows

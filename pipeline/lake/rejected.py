"""Read-only queries on the lake files the platform refused: the ledger rows that are in the lake
now (``deleted_at`` null) with a rejecting status.

A rejected file is in no version (a build leaves it out and, when nothing else changed, makes
no version at all), so version-side listings never show it; these queries are how the UI and
the CLI name it with its reason. Statuses: ``invalid`` (preprocessing could not use the bytes),
``unreadable`` (the scanner could not read it), ``refused`` (a symlink out of the lake, a
special file).
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import func, select

from pipeline.lake.last_seen import LastSeen
from pipeline.metadata.ledger import (
    STATUS_INVALID,
    STATUS_REFUSED,
    STATUS_UNREADABLE,
    LedgerFile,
)
from pipeline.metadata.store import MetadataStore, open_store

REJECTED_STATUSES = (STATUS_INVALID, STATUS_UNREADABLE, STATUS_REFUSED)
_MD5 = re.compile(r"[0-9a-fA-F]{32}")


def _live_rejected() -> tuple[Any, Any]:
    return LedgerFile.status.in_(REJECTED_STATUSES), LedgerFile.deleted_at.is_(None)


def rejected_dict(f: LedgerFile, seen: LastSeen | None = None) -> dict[str, Any]:
    """One rejected file as the CLI and the UI show it. ``since`` is when these bytes were
    first seen (the verdict holds until the content changes); ``last_seen`` the last scan
    (pipeline.lake.last_seen; without ``seen``, the row's own column)."""
    last_seen = seen.of(f) if seen is not None else f.last_seen
    return {
        "path": f.path,
        "dataset": f.dataset,
        "status": f.status,
        "reason": f.error or f.status,
        "md5": f.md5,
        "size": f.size,
        "since": f.content_changed_at.isoformat() if f.content_changed_at else None,
        "last_seen": last_seen.isoformat() if last_seen else None,
    }


def rejected_files(
    dataset: str | None = None,
    *,
    limit: int = 100,
    offset: int = 0,
    store: MetadataStore | None = None,
) -> dict[str, Any]:
    """One page of the rejected files (of ``dataset``, or of the whole lake), by path."""
    store = store or open_store()
    where = [*_live_rejected()]
    if dataset is not None:
        where.append(LedgerFile.dataset == dataset)
    with store.session() as session:
        total = session.scalar(select(func.count()).select_from(LedgerFile).where(*where)) or 0
        rows = session.scalars(
            select(LedgerFile)
            .where(*where)
            .order_by(LedgerFile.path)
            .limit(max(0, int(limit)))
            .offset(max(0, int(offset)))
        ).all()
        seen = LastSeen(session)
        items = [rejected_dict(f, seen) for f in rows]
    return {
        "dataset": dataset,
        "total": int(total),
        "limit": limit,
        "offset": offset,
        "items": items,
    }


def rejected_counts(*, store: MetadataStore | None = None) -> dict[str, int]:
    """Number of rejected files per dataset (datasets without any are left out)."""
    store = store or open_store()
    with store.session() as session:
        rows = session.execute(
            select(LedgerFile.dataset, func.count())
            .where(*_live_rejected())
            .group_by(LedgerFile.dataset)
        ).all()
    return {name: int(n) for name, n in rows}


def find_rejected(
    path_or_md5: str, *, limit: int = 100, store: MetadataStore | None = None
) -> list[dict[str, Any]]:
    """The rejected files a search names: by content md5 (32 hex digits), else by exact lake
    path, else by a path relative to a dataset folder (``3/x.png`` finds ``digits/3/x.png``)."""
    store = store or open_store()
    key = path_or_md5.strip()
    if not key:
        return []
    with store.session() as session:
        seen = LastSeen(session)
        base = select(LedgerFile).where(*_live_rejected()).order_by(LedgerFile.path).limit(limit)
        if _MD5.fullmatch(key):
            return [
                rejected_dict(f, seen)
                for f in session.scalars(base.where(LedgerFile.md5 == key.lower()))
            ]
        path = key.lstrip("/")
        found = session.scalars(base.where(LedgerFile.path == path)).all()
        if not found:
            names = session.scalars(
                select(LedgerFile.dataset).where(*_live_rejected()).distinct()
            ).all()
            candidates = [f"{n}/{path}" for n in names if n]
            if candidates:
                found = session.scalars(base.where(LedgerFile.path.in_(candidates))).all()
        return [rejected_dict(f, seen) for f in found]

"""Rejected lake files, named in the ingest task logs: what a user who dropped a corrupt file
looks for first ("2 invalid" alone does not say which two, nor why).

Every list is capped (the first ``MAX_LOGGED_FILES`` and "... and N more"): a lake with
100,000 bad files must not write 100,000 log lines per task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

log = logging.getLogger("laketrain.orchestration")

MAX_LOGGED_FILES = 50


def log_files(
    label: str,
    items: Sequence[tuple[str, str]],
    *,
    logger: logging.Logger = log,
    limit: int = MAX_LOGGED_FILES,
) -> None:
    """One warning line per (path, reason), the first ``limit`` of them, then the rest as a
    count."""
    for path, reason in items[:limit]:
        logger.warning("%s file: %s: %s", label, path, reason or label)
    if len(items) > limit:
        logger.warning("... and %d more %s files", len(items) - limit, label)


def rejected_ledger_files(
    dataset: str | None = None,
    *,
    md5s: Iterable[str] | None = None,
    statuses: Sequence[str] | None = None,
    store=None,
) -> list[tuple[str, str, str]]:
    """(path, status, reason) of the present ledger files that are not ``ok``: of ``dataset``
    when given, with one of ``md5s`` when given (a shard's files), in path order."""
    from sqlalchemy import select

    from pipeline.metadata.ledger import (
        STATUS_INVALID,
        STATUS_REFUSED,
        STATUS_UNREADABLE,
        LedgerFile,
    )
    from pipeline.metadata.store import open_store

    wanted = list(statuses or (STATUS_INVALID, STATUS_REFUSED, STATUS_UNREADABLE))
    query = select(LedgerFile.path, LedgerFile.status, LedgerFile.error).where(
        LedgerFile.status.in_(wanted), LedgerFile.deleted_at.is_(None)
    )
    if dataset is not None:
        query = query.where(LedgerFile.dataset == dataset)
    out: list[tuple[str, str, str]] = []
    with (store or open_store()).session() as session:
        if md5s is None:
            out = [(p, s, e or s) for p, s, e in session.execute(query)]
        else:
            keys = sorted(set(md5s))
            for i in range(0, len(keys), 500):  # bounded IN lists on every backend
                rows = session.execute(query.where(LedgerFile.md5.in_(keys[i : i + 500])))
                out.extend((p, s, e or s) for p, s, e in rows)
    return sorted(out)


def invalid_ledger_files() -> list[tuple[str, str]]:
    """(path, reason) of every present file the build found invalid, in path order."""
    from pipeline.metadata.ledger import STATUS_INVALID

    return [(p, r) for p, _, r in rejected_ledger_files(statuses=(STATUS_INVALID,))]


def log_rejected(rows: Sequence[tuple[str, str, str]], *, logger: logging.Logger = log) -> None:
    """``log_files`` per status (invalid, refused, unreadable), each list capped on its own."""
    by_status: dict[str, list[tuple[str, str]]] = {}
    for path, status, reason in rows:
        by_status.setdefault(status, []).append((path, reason))
    for status in sorted(by_status):
        log_files(status, by_status[status], logger=logger)

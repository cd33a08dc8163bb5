"""When a ledger row was last seen, without rewriting every row on every scan.

A scan writes a ledger row only when something about the file changed. Every present row of
the lake (or of the dataset a scan covered) is seen by each scan, so a present row's last
sighting is the latest scan of its dataset or of the whole lake, whichever is later, or the
row's own ``last_seen`` (written when it last changed) if that is later still. A deleted row
keeps its own ``last_seen``. Refreshing the column on every row instead cost a 1M-file
no-change rescan more than the rest of the scan together.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from pipeline.metadata.ledger import Scan


class LastSeen:
    """The latest scan per dataset (``None``: whole-lake scans), read once per query."""

    def __init__(self, session: Session) -> None:
        # A scan is one transaction: every scans row that exists has finished.
        rows = session.execute(
            select(Scan.dataset, func.max(Scan.started_at)).group_by(Scan.dataset)
        ).all()
        self._latest: dict[str | None, datetime] = {d: t for d, t in rows if t is not None}

    def of(self, row: Any) -> datetime | None:
        """``row`` is a LedgerFile (``last_seen``, ``deleted_at``, ``dataset``)."""
        if row.deleted_at is not None:
            return row.last_seen
        times = [row.last_seen, self._latest.get(None), self._latest.get(row.dataset)]
        present = [t for t in times if t is not None]
        return max(present) if present else None

"""The dataset's change set since its head: the ledger rows a scan wrote after the head was found.

Every row a scan inserts or updates (a new, changed, touched, renamed, deleted or refused file)
gets that scan's id in ``last_scan_id``; a row the scan found unchanged keeps its old one.
Scans of one lake are serialised by its lock row and allocate their id under it, so a larger
id commits later. Each commit that leaves the head matching the lake (a version published, the
head moved back, or no change) records in ``dataset_ledger_marks``:

- ``scan``: the largest ``last_scan_id`` among the dataset's rows when it read the ledger
  (read before the rows, so a scan that lands in between is only read again);
- ``pending``: the paths it left out because their content had no processed sample yet (a
  file scanned after the plan: the next build takes it);
- ``exact``: whether the head's chunks are this very assembly (this commit wrote them), not
  only a version of the same id (same md5/label/split list; paths or mtimes may differ).

Then every current file that is not in the head as its ledger row says now is a row with
``last_scan_id`` above ``scan`` (or NULL: a row no scan wrote), or a pending path, or one of the
head's invalid files whose processed rows gc removed. ``plan`` plans those alone, and
``commit`` stops before assembling anything when there are none: a no-change rebuild costs
O(changes), not O(files). An older ``scan`` only makes the set larger, never wrong. A mark
naming another version than the head (the head moved by approve, or before marks existed), or
a head under another recipe, gives ``None``: the full read, as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy.orm import Session

from pipeline.datasets.version_rows import ENTRIES_OF_VERSION
from pipeline.metadata.datasets import DatasetLedgerMark
from pipeline.metadata.driver import driver_rows
from pipeline.metadata.ledger import STATUS_INVALID, STATUS_OK

_IN_BATCH = 900  # bound values per IN (SQLite's default limit is 999)


def watermark(session: Session, dataset: str) -> int:
    """The largest scan id among the dataset's ledger rows (0: none); an index lookup on
    (dataset, last_scan_id), migration 0010."""
    # ORDER BY ... LIMIT 1, not max(): SQLite reads max() over every entry of the dataset.
    rows = driver_rows(
        session,
        "SELECT last_scan_id FROM ledger_files WHERE dataset = ? AND last_scan_id IS NOT NULL "
        "ORDER BY last_scan_id DESC LIMIT 1",
        (dataset,),
    )
    return int(rows[0][0]) if rows else 0


def pending_rows(files: list[tuple], processed: dict, recipe) -> list[tuple]:
    """The rows of ``files`` (_current_files') an assembly leaves out for want of a processed
    sample (the rule of check_counted_on and _assemble): the version's pending files."""
    return [
        row
        for row in files
        if row[1] is not None
        and row[4] in (STATUS_OK, STATUS_INVALID)
        and row[1] not in processed
        and not recipe.is_sidecar(row[0])
    ]


def settles(recipe) -> bool:
    """Whether an unchanged path keeps its sample under this recipe whatever else changed: not
    with a labels file (one edit relabels any path) or a group_regex (a split per group)."""
    return recipe.labels.rule != "sidecar" and not recipe.split.group_regex


def ledger_rows(session: Session, paths: list[str], dataset: str | None = None) -> list[tuple]:
    """(path, md5, size, mtime_ns, status, error) of the current ledger rows at ``paths`` (of
    ``dataset``, when given), by path in code point order like the full commit."""
    out: list[tuple] = []
    ordered = sorted(paths)
    for i in range(0, len(ordered), _IN_BATCH):
        part = ordered[i : i + _IN_BATCH]
        # By path alone (its unique index), the dataset and deletion checked here: with them
        # in the WHERE, SQLite without statistics walks the dataset's index instead, every
        # row of the lake per batch (0.5 s a batch at a million files).
        out += [
            r[:6]
            for r in driver_rows(
                session,
                "SELECT path, md5, size, mtime_ns, status, error, dataset, deleted_at "
                f"FROM ledger_files WHERE path IN ({', '.join('?' * len(part))})",
                part,
            )
            if r[7] is None and (dataset is None or r[6] == dataset)
        ]
    out.sort()
    return out


def record_mark(
    session: Session, dataset: str, version_id: str, scan: int, pending: list[str], exact: bool
) -> None:
    """The head (``version_id``) matches the ledger as of ``scan``; under the dataset's lock
    row, in the transaction that moves (or keeps) the head."""
    mark = session.get(DatasetLedgerMark, dataset)
    values = {
        "version_id": version_id,
        "scan": scan,
        "pending": json.dumps(pending),
        "exact": exact,
    }
    if mark is None:
        session.add(DatasetLedgerMark(dataset=dataset, **values))
    else:
        for key, value in values.items():
            setattr(mark, key, value)


@dataclass(frozen=True)
class Since:
    """The ledger state a head was built from."""

    version_id: str
    scan: int
    pending: tuple[str, ...]
    exact: bool

    @classmethod
    def of(cls, session: Session, dataset: str, head, recipe_hash: str) -> Since | None:
        """None when the head cannot anchor a change set (no head, another recipe, no mark
        for this head)."""
        if head is None or head.recipe_hash != recipe_hash:
            return None
        mark = session.get(DatasetLedgerMark, dataset)
        if mark is None or mark.version_id != head.version_id:
            return None
        return cls(mark.version_id, int(mark.scan), tuple(json.loads(mark.pending)), mark.exact)

    def changed(self, session: Session, dataset: str) -> list[tuple]:
        """(path, md5, size, status, deleted) of the rows written since the head was built."""
        # Two index ranges, not one OR: SQLite would walk every entry of the dataset.
        cols = "path, md5, size, status, CASE WHEN deleted_at IS NULL THEN 0 ELSE 1 END"
        return driver_rows(
            session,
            f"SELECT {cols} FROM ledger_files WHERE dataset = ? AND last_scan_id > ?",
            (dataset, self.scan),
        ) + driver_rows(
            session,
            f"SELECT {cols} FROM ledger_files WHERE dataset = ? AND last_scan_id IS NULL",
            (dataset,),
        )

    def pending_rows(self, session: Session) -> list[tuple]:
        """(path, md5, size, mtime_ns, status, error) of the head's pending paths still present."""
        return ledger_rows(session, list(self.pending))

    def invalid_rows(self, session: Session) -> list[tuple]:
        """(path, md5, size) of the head's invalid files, as the ledger has them now."""
        return driver_rows(
            session,
            "SELECT DISTINCT l.path, l.md5, l.size FROM version_invalid v "
            "JOIN ledger_files l ON l.path = v.path "
            "WHERE v.version_id = ? AND l.deleted_at IS NULL AND l.md5 IS NOT NULL",
            (self.version_id,),
        )

    def to_plan(
        self, session: Session, dataset: str, recipe_hash: str, head_segments: list[str]
    ) -> tuple[list[tuple], list[str]]:
        """What plan needs, from the change set: (path, md5, size) of the current files whose
        content has no processed sample under the recipe, by path, and the segments the plan
        counts on (the head's, and those holding the changed files' contents)."""
        candidates: dict[str, tuple] = {}
        for path, md5, size, status, deleted in self.changed(session, dataset):
            if not deleted and md5 is not None and status in (STATUS_OK, STATUS_INVALID):
                candidates[path] = (path, md5, size)
        for path, md5, size, _mtime, status, _error in self.pending_rows(session):
            if md5 is not None and status in (STATUS_OK, STATUS_INVALID):
                candidates[path] = (path, md5, size)
        for path, md5, size in self.invalid_rows(session):
            candidates.setdefault(path, (path, md5, size))
        held = processed_segments(session, recipe_hash, {c[1] for c in candidates.values()})
        todo = sorted(c for c in candidates.values() if c[1] not in held)
        relied = set(head_segments) | {s for s in held.values() if s is not None}
        relied |= set(self._invalid_segments(session, recipe_hash))
        return todo, sorted(relied)

    def _invalid_segments(self, session: Session, recipe_hash: str) -> list[str]:
        rows = driver_rows(
            session,
            "SELECT DISTINCT p.segment_id FROM version_invalid v JOIN processed_samples p "
            "ON p.md5 = v.md5 AND p.recipe_hash = ? "
            "WHERE v.version_id = ? AND p.segment_id IS NOT NULL",
            (recipe_hash, self.version_id),
        )
        return [r[0] for r in rows]

    def affected_paths(self, session: Session, dataset: str, samples) -> list[str]:
        """The sorted paths whose samples may differ from the head's (``exact`` heads only):
        the changed and pending paths, and every path of a content one of them had or has
        (a content's first path decides its split and which paths are duplicates). Every other
        sample is the head's, byte for byte: its ledger row, its content's processed row and
        its split are the head's."""
        changed = self.changed(session, dataset)
        paths = {row[0] for row in changed} | set(self.pending)
        md5s = {row[1] for row in changed if row[1] is not None}
        md5s |= {row[1] for row in self.pending_rows(session) if row[1] is not None}
        md5s |= self.head_md5s(session, sorted(paths))
        if md5s:
            paths.update(s.path for s in samples if s.md5 in md5s)
        return sorted(paths)

    def head_md5s(self, session: Session, paths: list[str]) -> set[str]:
        """The contents the head holds at ``paths`` (plain SQL: building sample_rows' union
        for a long IN list cost SQLAlchemy more than the query)."""
        out: set[str] = set()
        for i in range(0, len(paths), _IN_BATCH):
            part = paths[i : i + _IN_BATCH]
            out.update(
                r[0]
                for r in driver_rows(
                    session,
                    f"SELECT ce.md5 {ENTRIES_OF_VERSION} "
                    f"AND ce.path IN ({', '.join('?' * len(part))})",
                    (self.version_id, *part),
                )
                if r[0] is not None
            )
        return out

    def unchanged(self, session: Session, dataset: str, recipe_hash: str) -> list[tuple] | None:
        """The head's pending rows when the lake holds exactly the head's content (no row
        written since, no pending content processed since); None when something changed."""
        if self.changed(session, dataset):
            return None
        rows = self.pending_rows(session)
        md5s = {r[1] for r in rows if r[1] is not None}
        if processed_segments(session, recipe_hash, md5s):
            return None
        return rows


def processed_segments(session: Session, recipe_hash: str, md5s: set[str]) -> dict[str, str | None]:
    """md5 -> segment_id of the contents in ``md5s`` with a processed sample under the recipe."""
    out: dict[str, str | None] = {}
    ordered = sorted(md5s)
    for i in range(0, len(ordered), _IN_BATCH):
        part = ordered[i : i + _IN_BATCH]
        out.update(
            driver_rows(
                session,
                "SELECT md5, segment_id FROM processed_samples WHERE recipe_hash = ? "
                f"AND md5 IN ({', '.join('?' * len(part))})",
                (recipe_hash, *part),
            )
        )
    return out

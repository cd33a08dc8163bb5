"""The dataset's head: the version that matches the lake's current content after its last build.

``latest`` means the head, never "the newest created". ``commit`` moves the head in the same
transaction that records the version, under the dataset's lock row: to a new version
(``published``), or back to an older one when the lake returned to its content (``returned``).
Every move is appended to ``dataset_head_moves``.

A reader without a store resolves ``latest`` from ``DATA_ROOT/datasets/<dataset>/HEAD``, a
mirror of the store's head, with ``head_history.jsonl`` mirroring the moves. Order of writes:

1. the version folder is published (renamed into place, synced);
2. the store transaction commits the version row and the head move (the source of truth);
3. ``sync_head_file`` copies the store's head into the files.

A crash after 1 leaves an unrecorded folder that the next commit records (same content, same
id). A crash between 2 and 3 leaves HEAD one move behind, on the previous head: a complete,
published version, which gc keeps too (``kept_heads`` reads the HEAD files), so a store-less
reader gets consistent data, only not the newest; the next commit of the dataset, "no change"
included, syncs the files again. Writing the files first would be worse: HEAD could name a
version the store never recorded, which gc would collect as a leftover under the reader.

Two commits that finish close together each sync under a file lock and write what the STORE
says at that moment (not what they committed), so the last sync always leaves the newest head.
"""

from __future__ import annotations

import fcntl
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from pipeline.datasets import manifest as mf
from pipeline.datasets.crash_points import pause_hook
from pipeline.metadata.base import utcnow
from pipeline.metadata.datasets import (
    HEAD_PUBLISHED,
    HEAD_RETURNED,
    VERSION_COMMITTED,
    DatasetHead,
    DatasetHeadMove,
    DatasetVersion,
)
from pipeline.metadata.store import MetadataStore

log = logging.getLogger(__name__)

__all__ = [
    "HEAD_PUBLISHED",
    "HEAD_RETURNED",
    "head_version",
    "kept_heads",
    "move_head",
    "sync_head_file",
    "synced_after",
]


def head_version(session: Session, dataset: str) -> DatasetVersion | None:
    """The committed version the dataset's head names; None when it has none.

    A dataset with committed versions but no head row (rows written by hand, without
    ``commit``; migration 0004 backfills every other) falls back to the newest committed one.
    A head on a version that is no longer committed gives None rather than some other version:
    the next build then publishes the lake's content afresh."""
    head = session.get(DatasetHead, dataset)
    if head is None:
        return session.scalars(
            select(DatasetVersion)
            .where(DatasetVersion.dataset == dataset, DatasetVersion.status == VERSION_COMMITTED)
            .order_by(DatasetVersion.created_at.desc(), DatasetVersion.version_id)
            .limit(1)
        ).first()
    row = session.get(DatasetVersion, head.version_id)
    return row if row is not None and row.status == VERSION_COMMITTED else None


def move_head(session: Session, dataset: str, version_id: str, reason: str) -> bool:
    """Point the dataset's head at ``version_id`` and record the move; False when it is
    already there. The caller holds the dataset's lock row, so moves of one dataset serialise,
    and commits ``session``: the move lands with the version's recording or not at all."""
    target = session.get(DatasetVersion, version_id)
    # Only a committed version can be the head: this is where a version that is not (a
    # quarantined one, until approved) is kept out.
    if target is None or target.dataset != dataset or target.status != VERSION_COMMITTED:
        raise ValueError(f"version {version_id} is not a committed version of {dataset!r}")
    now = utcnow()
    head = session.get(DatasetHead, dataset)
    if head is not None and head.version_id == version_id:
        return False
    previous = head.version_id if head is not None else None
    if head is None:
        session.add(DatasetHead(dataset=dataset, version_id=version_id, moved_at=now))
    else:
        head.version_id, head.moved_at = version_id, now
    session.add(
        DatasetHeadMove(
            dataset=dataset,
            from_version_id=previous,
            to_version_id=version_id,
            moved_at=now,
            reason=reason,
        )
    )
    session.flush()
    return True


def kept_heads(session: Session, data_root: Path) -> set[str]:
    """Version ids gc must keep whatever else it drops: every head in the store, and every
    version a HEAD file names (one move behind the store after a crash, still read)."""
    kept = set(session.scalars(select(DatasetHead.version_id)))
    root = mf.datasets_root(data_root)
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder.is_dir():
            try:
                head = mf.read_head(data_root, folder.name)
            except mf.ManifestError:
                continue  # unreadable: it names nothing gc could keep
            if head is not None:
                kept.add(head["version_id"])
    return kept


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def sync_head_file(store: MetadataStore, data_root: Path, dataset: str) -> bool:
    """Make the dataset's HEAD file and history mirror the store; True when HEAD was written.
    Idempotent: appends only the moves the history file lacks (by move id), rewrites HEAD only
    when it names another version (or is unreadable)."""
    folder = mf.datasets_root(data_root) / dataset
    if not folder.is_dir():
        return False  # nothing published under this DATA_ROOT
    with _file_lock(folder / ".head.lock"):
        with store.session() as session:
            want = head_record(session, dataset)
            if want is None:
                return False
            seen = [e.get("id") for e in mf.read_head_history(data_root, dataset)]
            last = max((i for i in seen if isinstance(i, int)), default=0)
            moves = _moves(session, dataset, after_id=last)
        mf.append_head_history(data_root, dataset, moves)
        try:
            current = mf.read_head(data_root, dataset)
        except mf.ManifestError:
            current = None  # a damaged HEAD is replaced by the store's
        if current is not None and all(current.get(k) == v for k, v in want.items()):
            return False
        mf.write_head(data_root, dataset, want)
        return True


def head_record(session: Session, dataset: str) -> dict | None:
    """The dataset's head as the HEAD file (or object) states it; None when it has none."""
    head = session.get(DatasetHead, dataset)
    if head is None:
        return None
    tag = session.scalar(
        select(DatasetVersion.tag).where(DatasetVersion.version_id == head.version_id)
    )
    return {
        "dataset": dataset,
        "version_id": head.version_id,
        "tag": tag,
        "moved_at": head.moved_at.isoformat(),
    }


def _moves(session: Session, dataset: str, *, after_id: int) -> list[dict]:
    rows = session.scalars(
        select(DatasetHeadMove)
        .where(DatasetHeadMove.dataset == dataset, DatasetHeadMove.id > after_id)
        .order_by(DatasetHeadMove.id)
    )
    return [
        {
            "id": m.id,
            "dataset": m.dataset,
            "from_version_id": m.from_version_id,
            "to_version_id": m.to_version_id,
            "moved_at": m.moved_at.isoformat(),
            "reason": m.reason,
        }
        for m in rows
    ]


@contextmanager
def synced_after(
    store: MetadataStore, data_root: Path, dataset: str, *, remote: str | None = None
) -> Iterator[None]:
    """Sync the HEAD file when the block ends without an error. Entered BEFORE the store
    session (``with synced_after(...), store.session() as s:``), it runs after the session
    has committed, which is the order the module docstring explains.

    A failed sync is logged, not raised: the version and the head are committed by then, and
    a commit that failed now would be retried as "no change", losing the dataset event of a
    move that did happen. The files stay one move behind (a complete version) until the next
    commit of the dataset syncs them.

    ``remote``: the ``s3://`` data root whose work root ``data_root`` is; its HEAD objects are
    synced too (``pipeline.datasets.publish.sync_head_remote``), under the same rule."""
    yield
    pause_hook("head_committed")  # store committed, HEAD file not yet synced (crash tests)
    try:
        sync_head_file(store, data_root, dataset)
        if remote is not None:
            from pipeline.datasets.publish import sync_head_remote

            sync_head_remote(store, remote, dataset)
    except (OSError, SQLAlchemyError) as exc:
        log.warning(
            "dataset %s: the head is committed in the store, but %s could not be updated "
            "(%s); a reader without a store sees the previous head until the next build",
            dataset,
            mf.head_path(data_root, dataset),
            exc,
        )

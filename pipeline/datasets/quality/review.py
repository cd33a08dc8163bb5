"""Quarantined versions and the decisions that release or keep them (``version_reviews``).

A version the gate holds (pipeline/datasets/quality/gate.py) is published with status
``quarantined``: its folder, rows and report exist, so it can be listed, shown, diffed and
exported; it is not the head (``head.move_head`` takes committed versions only), the train
DAG refuses it even when pinned, and ``lake_ingest`` fires no dataset event for it.

``version_reviews`` is the version's history, append-only, newest last:

- ``quarantine`` (who = the gate): written by ``commit`` each time a build's result is this
  version, with the gate's reasons. It also marks the version as the lake's content at that
  moment: a head move of the dataset after it means the lake has moved on.
- ``approve`` (a person): the version becomes ``committed``. It becomes the head only if it is
  still the lake's content (no head move since its last ``quarantine`` record): approving an
  older quarantined version makes it trainable when pinned, never ``latest``, since ``latest``
  must name what the lake holds.
- ``reject`` (a person, with a reason): the version stays quarantined; the lake must change
  (or someone approve it later: the newest decision stands).
- ``superseded`` (the gate): a later build found the head's content again (the lake went
  back), so the held version is no longer the lake's content.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from pipeline.datasets import head
from pipeline.datasets.manifest import VersionNotFound
from pipeline.metadata.base import utcnow
from pipeline.metadata.datasets import (
    REVIEW_APPROVE,
    REVIEW_REJECT,
    VERSION_COMMITTED,
    DatasetHeadMove,
    DatasetLock,
    DatasetVersion,
    VersionReview,
)
from pipeline.metadata.locks import ensure_lock_row, take_lock_row
from pipeline.metadata.store import MetadataStore, open_store

VERSION_QUARANTINED = "quarantined"
REVIEW_QUARANTINE = "quarantine"
REVIEW_SUPERSEDED = "superseded"  # by the gate: a later build went back to the head
GATE_WHO = "quality gate"
HEAD_APPROVED = "approved"  # dataset_head_moves.reason of a move made by an approval
# Statuses of versions that exist (listed, shown, diffed, exported); "deleted" is gc'd.
LIVE_STATUSES = (VERSION_COMMITTED, VERSION_QUARANTINED)

__all__ = [
    "GATE_WHO",
    "HEAD_APPROVED",
    "LIVE_STATUSES",
    "REVIEW_QUARANTINE",
    "VERSION_QUARANTINED",
    "ReviewError",
    "ReviewOutcome",
    "approve",
    "current_user",
    "history",
    "record_quarantine",
    "reject",
    "standing",
]


class ReviewError(ValueError):
    """An approve/reject that cannot apply (the version is not quarantined, no reason...)."""


@dataclass(frozen=True)
class ReviewOutcome:
    dataset: str
    version_id: str
    tag: str
    decision: str  # approve | reject | none (already committed: nothing to do)
    status: str  # the version's status afterwards
    head_moved: bool  # the version became the head (latest)
    who: str
    message: str
    samples: int = 0
    added: int = 0
    removed: int = 0

    def event_extra(self) -> dict[str, Any] | None:
        """The dataset event's extra when the approval made the version ``latest``."""
        if not self.head_moved:
            return None
        return {
            "dataset": self.dataset,
            "version_id": self.version_id,
            "tag": self.tag,
            "samples": self.samples,
            "added": self.added,
            "removed": self.removed,
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def current_user() -> str:
    """Who runs the command: the OS user (``--by`` overrides it)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container with a bare uid)
        return f"uid {os.getuid()}"


def history(session: Session, version_id: str) -> list[dict[str, Any]]:
    rows = session.scalars(
        select(VersionReview)
        .where(VersionReview.version_id == version_id)
        .order_by(VersionReview.at, VersionReview.id)
    )
    return [
        {"decision": r.decision, "reason": r.reason, "who": r.who, "at": r.at.isoformat()}
        for r in rows
    ]


def standing(session: Session, version_id: str) -> str | None:
    """The newest decision a person took on the version (approve | reject), None if none."""
    return session.scalar(
        select(VersionReview.decision)
        .where(
            VersionReview.version_id == version_id,
            VersionReview.decision.in_((REVIEW_APPROVE, REVIEW_REJECT)),
        )
        .order_by(VersionReview.at.desc(), VersionReview.id.desc())
        .limit(1)
    )


def _last_at(session: Session, version_id: str, decision: str):
    return session.scalar(
        select(func.max(VersionReview.at)).where(
            VersionReview.version_id == version_id, VersionReview.decision == decision
        )
    )


def _last_move_at(session: Session, dataset: str):
    return session.scalar(
        select(func.max(DatasetHeadMove.moved_at)).where(DatasetHeadMove.dataset == dataset)
    )


def is_lake_content(session: Session, version: DatasetVersion) -> bool:
    """Whether the dataset's newest build gave this (quarantined) version: since its last
    ``quarantine`` record, no head move of the dataset, no other version quarantined, and no
    build that found the head again (``superseded``)."""
    held = _last_at(session, version.version_id, REVIEW_QUARANTINE)
    if held is None:
        return False
    superseded = _last_at(session, version.version_id, REVIEW_SUPERSEDED)
    if superseded is not None and superseded >= held:
        return False
    moved = _last_move_at(session, version.dataset)
    if moved is not None and moved > held:
        return False
    other = session.scalar(
        select(func.max(VersionReview.at))
        .join(DatasetVersion, DatasetVersion.version_id == VersionReview.version_id)
        .where(
            DatasetVersion.dataset == version.dataset,
            VersionReview.version_id != version.version_id,
            VersionReview.decision == REVIEW_QUARANTINE,
        )
    )
    return other is None or other <= held


def mark_superseded(session: Session, dataset: str, head_tag: str) -> int:
    """A build found the head's content again: a quarantined version that was the lake's
    content no longer is (approving it later must not move ``latest`` off what the lake holds).
    Returns how many were marked."""
    n = 0
    held = session.scalars(
        select(DatasetVersion).where(
            DatasetVersion.dataset == dataset, DatasetVersion.status == VERSION_QUARANTINED
        )
    ).all()
    for v in held:
        if is_lake_content(session, v):
            session.add(
                VersionReview(
                    version_id=v.version_id,
                    decision=REVIEW_SUPERSEDED,
                    reason=f"the lake went back to the content of {head_tag}",
                    who=GATE_WHO,
                    at=utcnow(),
                )
            )
            n += 1
    session.flush()
    return n


def record_quarantine(
    session: Session, version: DatasetVersion, reasons: list[str], *, again: bool = False
) -> bool:
    """Record that a build's result is the quarantined ``version``, with the gate's reasons.
    With ``again`` (a later build found the same content), only when the lake had moved away
    from it in between: an unchanged lake rebuilt every hour adds no row. True if written."""
    if again and is_lake_content(session, version):
        return False
    session.add(
        VersionReview(
            version_id=version.version_id,
            decision=REVIEW_QUARANTINE,
            reason="; ".join(reasons) or None,
            who=GATE_WHO,
            at=utcnow(),
        )
    )
    session.flush()
    return True


def _resolve(session: Session, ref: str, dataset: str | None) -> DatasetVersion:
    from pipeline.datasets.refs import resolve_row

    return resolve_row(session, ref, dataset)


def _outcome(v: DatasetVersion, decision: str, moved: bool, who: str, msg: str) -> ReviewOutcome:
    return ReviewOutcome(
        dataset=v.dataset,
        version_id=v.version_id,
        tag=v.tag,
        decision=decision,
        status=v.status,
        head_moved=moved,
        who=who,
        message=msg,
        samples=v.samples,
        added=v.added,
        removed=v.removed,
    )


def approve(
    ref: str,
    *,
    who: str,
    reason: str | None = None,
    dataset: str | None = None,
    store: MetadataStore | None = None,
    data_root: Path | None = None,
) -> ReviewOutcome:
    """Release a quarantined version: it becomes ``committed``, and the head when it is still
    the lake's content. Approving a version that is committed already does nothing (so a
    retried task or a second click is harmless)."""
    store = store or open_store()
    with store.session() as session:
        v = _resolve(session, ref, dataset)
        name = v.dataset
    ensure_lock_row(store, DatasetLock, name)
    from pipeline.datasets import dataroot

    local, remote = dataroot.resolve(data_root)  # an s3:// DATA_ROOT: its HEAD objects too
    # The dataset's lock row: an approval and a commit of the same dataset never interleave
    # (the commit reads the head; the approval may move it). The HEAD file follows the store.
    with head.synced_after(store, local, name, remote=remote), store.session() as session:
        take_lock_row(session, DatasetLock, name)
        v = session.get(DatasetVersion, v.version_id)
        if v.status == VERSION_COMMITTED:
            return _outcome(v, "none", False, who, f"{v.tag} is committed already")
        if v.status != VERSION_QUARANTINED:
            raise ReviewError(f"version {v.tag} is {v.status}, not quarantined: cannot approve")
        moves = is_lake_content(session, v)
        v.status = VERSION_COMMITTED
        session.add(
            VersionReview(
                version_id=v.version_id,
                decision=REVIEW_APPROVE,
                reason=reason,
                who=who,
                at=utcnow(),
            )
        )
        session.flush()
        if moves:
            head.move_head(session, name, v.version_id, HEAD_APPROVED)
            msg = f"approved {v.tag}: it is now latest of {name}"
        else:
            msg = (
                f"approved {v.tag}: committed, but not latest (the lake of {name} has moved on "
                "since it was built; train on it by its tag)"
            )
        return _outcome(v, REVIEW_APPROVE, moves, who, msg)


def reject(
    ref: str,
    *,
    who: str,
    reason: str,
    dataset: str | None = None,
    store: MetadataStore | None = None,
) -> ReviewOutcome:
    """Keep a quarantined version quarantined, recording why."""
    reason = (reason or "").strip()
    if not reason:
        raise ReviewError("reason: a rejection needs a reason (--reason '...')")
    store = store or open_store()
    with store.session() as session:
        v = _resolve(session, ref, dataset)
        if v.status != VERSION_QUARANTINED:
            raise ReviewError(
                f"version {v.tag} is {v.status}, not quarantined: only a quarantined version "
                "can be rejected"
            )
        session.add(
            VersionReview(
                version_id=v.version_id, decision=REVIEW_REJECT, reason=reason, who=who, at=utcnow()
            )
        )
        session.flush()
        return _outcome(v, REVIEW_REJECT, False, who, f"rejected {v.tag}: it stays quarantined")


def resolve_any(ref: str, dataset: str | None = None, *, store: MetadataStore | None = None):
    """The version row ``ref`` names, quarantined ones included (for ``quality``)."""
    store = store or open_store()
    with store.session() as session:
        v = _resolve(session, ref, dataset)
        session.expunge(v)
        return v


__all__ += ["REVIEW_SUPERSEDED", "is_lake_content", "mark_superseded", "resolve_any"]
_ = VersionNotFound  # re-exported for the CLI

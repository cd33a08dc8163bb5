"""Recording a published segment and its processed samples in the store (idempotent)."""

from __future__ import annotations

import json

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.datasets.segments import (
    segment_relpath,
)
from pipeline.metadata.base import utcnow
from pipeline.metadata.datasets import (
    SAMPLE_INVALID,
    SAMPLE_OK,
    ProcessedSample,
    Segment,
)
from pipeline.metadata.driver import driver_rows
from pipeline.metadata.ledger import STATUS_INVALID, STATUS_OK, LedgerFile
from pipeline.metadata.store import MetadataStore


def _record_segment(store: MetadataStore, dataset: str, info: dict) -> None:
    """Record a published segment and its processed samples (idempotent), and mark the
    ledger rows of invalid files. Safe to call again after a crash, or concurrently."""
    rh = info["recipe_hash"]
    seg_id = info["segment_id"]
    for attempt in range(3):
        try:
            with store.session() as session:
                if session.get(Segment, seg_id) is None:
                    session.add(
                        Segment(
                            segment_id=seg_id,
                            recipe_hash=rh,
                            format=info["format"],
                            path=segment_relpath(rh, seg_id),
                            n_rows=info["n_rows"],
                            size_bytes=info["size_bytes"],
                            sha256=info["sha256"],
                        )
                    )
                    session.flush()
                md5s = [e["md5"] for e in info["entries"]] + [e["md5"] for e in info["invalid"]]
                have = _existing_md5s(session, rh, md5s)
                rows = []
                for e in info["entries"]:
                    if e["md5"] not in have:
                        rows.append(
                            {
                                "md5": e["md5"],
                                "recipe_hash": rh,
                                "segment_id": seg_id,
                                "row": e["row"],
                                "n_rows": e["n_rows"],
                                "status": SAMPLE_OK,
                                "reason": None,
                                "labels": json.dumps(e["labels"])
                                if e["labels"] is not None
                                else None,
                                "lines": json.dumps(e["lines"]) if e["lines"] is not None else None,
                                "invalid_rows": json.dumps(e["invalid_rows"])
                                if e["invalid_rows"]
                                else None,
                                "stats": json.dumps(
                                    {
                                        **(e["stats"] or {}),
                                        "per_sample": e.get("per_sample", 1),
                                        # per-row splits (tables), read by commit's _assemble
                                        **({"splits": e["splits"]} if e.get("splits") else {}),
                                    }
                                ),
                                "created_at": utcnow(),
                            }
                        )
                for e in info["invalid"]:
                    if e["md5"] not in have:
                        rows.append(
                            {
                                "md5": e["md5"],
                                "recipe_hash": rh,
                                "segment_id": seg_id,
                                "row": 0,
                                "n_rows": 0,
                                "status": SAMPLE_INVALID,
                                "reason": e["reason"],
                                "labels": None,
                                "lines": None,
                                "invalid_rows": None,
                                "stats": None,
                                "created_at": utcnow(),
                            }
                        )
                if rows:
                    session.execute(insert(ProcessedSample), rows)
                ok_md5s = [e["md5"] for e in info["entries"]]
                # An older recipe's verdict no longer holds: this one decoded the file.
                stale = _live_rows(session, dataset, ok_md5s, STATUS_INVALID)
                _set_status(session, [i for ids in stale.values() for i in ids], STATUS_OK, None)
                bad = _live_rows(session, dataset, [e["md5"] for e in info["invalid"]])
                for e in info["invalid"]:
                    # The scanner keeps this verdict until the file's md5 changes.
                    _set_status(session, bad.get(e["md5"], []), STATUS_INVALID, e["reason"])
            return
        except IntegrityError:
            if attempt == 2:
                raise  # a concurrent writer recorded the same keys; the retry sees them


def _live_rows(
    session: Session, dataset: str, md5s: list[str], status: str | None = None
) -> dict[str, list[int]]:
    """md5 -> ids of the dataset's present ledger rows with that content (and ``status``).
    Looked up by md5 alone, the rest checked here: with the dataset and deletion in the WHERE,
    SQLite without statistics walks the dataset's index, every row of the lake per batch, and
    this runs for every shard."""
    out: dict[str, list[int]] = {}
    unique = sorted(set(md5s))
    for i in range(0, len(unique), 500):
        part = unique[i : i + 500]
        rows = driver_rows(
            session,
            "SELECT id, md5, dataset, status, deleted_at FROM ledger_files "
            f"WHERE md5 IN ({', '.join('?' * len(part))})",
            part,
        )
        for row_id, md5, ds, st, deleted in rows:
            if ds == dataset and deleted is None and (status is None or st == status):
                out.setdefault(md5, []).append(row_id)
    return out


def _set_status(session: Session, ids: list[int], status: str, error: str | None) -> None:
    for i in range(0, len(ids), 500):
        session.execute(
            update(LedgerFile)
            .where(LedgerFile.id.in_(ids[i : i + 500]))
            .values(status=status, error=error)
        )


def _existing_md5s(session: Session, recipe_hash: str, md5s: list[str]) -> set[str]:
    have: set[str] = set()
    for i in range(0, len(md5s), 1000):
        chunk = md5s[i : i + 1000]
        have.update(
            session.scalars(
                select(ProcessedSample.md5).where(
                    ProcessedSample.recipe_hash == recipe_hash, ProcessedSample.md5.in_(chunk)
                )
            )
        )
    return have


def delete_processed_for_segments(session: Session, segment_ids: list[str]) -> None:
    """Forget the processed samples stored in segments that gc removes, so a later build
    decodes those files again instead of pointing at missing rows."""
    for i in range(0, len(segment_ids), 500):
        chunk = segment_ids[i : i + 500]
        session.execute(delete(ProcessedSample).where(ProcessedSample.segment_id.in_(chunk)))
        session.execute(delete(Segment).where(Segment.segment_id.in_(chunk)))

"""The store's index over leaf contents, written and dropped: ``chunk_samples`` (each distinct
sample once) and ``leaf_entries`` (a leaf's samples as integers), read through the
``chunk_entries`` view (migration 0013).

A leaf cut again around a new file holds ~127 samples the store already has under the leaf it
replaces: they are referred to, so the new leaf costs three integers a sample and a sample row
per NEW sample only. A delta commit knows which head leaf and position each kept sample comes
from, and reads their ids from those leaves' entries (``leaf_sample_ids``); any other sample is
searched for by path (the index contains searches anyway). At a million samples, 1,000 files at
random places re-cut ~900 leaves holding ~215,000 samples (a longer leaf is more likely to be
hit), each entry ~26 bytes with its index instead of ~370 for a full row (SQLite's dbstat on a
store of bench/scale.py's lake; the drop's bytes, old and new, in bench/RESULTS.md).

An id freed by gc may be given again: nothing refers to it any more (a sample goes only once
no leaf entry names it, a leaf's entries go with it).

Ids are allocated here, not by the database, so a batch's rows are inserted with
``executemany`` (no driver returns an id per row from it): on SQLite the next ids after the
largest, safe because the commit's transaction has already written (SQLite has one writer at a
time and the lock is held to the commit); on PostgreSQL from the table's sequence, which
concurrent commits of other datasets share without a collision.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice

from sqlalchemy.orm import Session

from pipeline.metadata.driver import driver_executemany, driver_rows

# The sample columns of chunk_samples, in the order a leaf row (chunks.ENTRY_COLUMNS) has them
# after its position.
SAMPLE_COLUMNS = ("path", "md5", "label", "split", "segment_id", "row", "line", "copy", "duplicate")
_BATCH = 5000  # leaf rows taken at a time: a first version's million are never held at once
_IN_BATCH = 500  # paths per IN (...) list

_SEQUENCE = {"chunks": "chunks_id_seq", "chunk_samples": "chunk_samples_id_seq"}


def allocate_ids(session: Session, table: str, n: int) -> list[int]:
    """``n`` fresh ids for ``table`` (chunks or chunk_samples), in the caller's write
    transaction."""
    if n <= 0:
        return []
    if session.connection().dialect.name == "sqlite":
        (top,) = driver_rows(session, f"SELECT COALESCE(MAX(id), 0) FROM {table}")[0]
        return list(range(int(top) + 1, int(top) + 1 + n))
    rows = driver_rows(
        session, f"SELECT nextval('{_SEQUENCE[table]}') FROM generate_series(1, {int(n)})"
    )
    return [int(r[0]) for r in rows]


def _key(row: Sequence[object]) -> tuple:
    """A sample's identity as a tuple both drivers' rows compare equal to: a stored sample
    read back (duplicate as 0/1 or a bool, row as an int) or a leaf row's columns."""
    path, md5, label, split, segment_id, row_, line, copy, duplicate = row
    return (
        path,
        md5,
        label,
        split,
        segment_id,
        int(row_),  # type: ignore[call-overload]
        None if line is None else int(line),  # type: ignore[call-overload]
        int(copy or 0),  # type: ignore[call-overload]
        bool(duplicate),
    )


def leaf_sample_ids(session: Session, leaves: Mapping[str, int]) -> dict[str, list[int]]:
    """The sample ids of recorded leaves (hash -> count), in position order; a leaf whose
    entries are not all there (none should be) is left out."""
    out: dict[str, list[int]] = {}
    hashes = sorted(leaves)
    for part in _slices(hashes):
        rows = driver_rows(
            session,
            "SELECT c.hash, le.pos, le.sample_id FROM chunks c "
            "JOIN leaf_entries le ON le.chunk_id = c.id "
            f"WHERE c.hash IN ({', '.join('?' * len(part))}) ORDER BY c.hash, le.pos",
            tuple(part),
        )
        got: dict[str, list[int]] = {}
        for h, pos, sid in rows:
            ids = got.setdefault(h, [])
            if pos == len(ids):
                ids.append(int(sid))
        out.update((h, ids) for h, ids in got.items() if len(ids) == leaves[h])
    return out


def _stored_ids(session: Session, paths: list[str]) -> dict[tuple, int]:
    cols = ", ".join(f'"{c}"' for c in SAMPLE_COLUMNS)
    out: dict[tuple, int] = {}
    for i in range(0, len(paths), _IN_BATCH):
        part = paths[i : i + _IN_BATCH]
        for sid, *sample in driver_rows(
            session,
            f"SELECT id, {cols} FROM chunk_samples WHERE path IN ({', '.join('?' * len(part))})",
            tuple(part),
        ):
            out.setdefault(_key(sample), int(sid))
    return out


def _batch_ids(session: Session, paths: list[str]) -> dict[tuple, int]:
    """The stored samples at ``paths``, searched for in full only when a spread sample of 64 of
    them finds one: a first version's samples are all new, and a batch's paths (a run of the
    version's path order) are mostly all new or mostly all known. A known sample missed in a
    batch of new ones is stored again under a new id, which costs its row and nothing else."""
    probe = paths[:: max(1, len(paths) // 64)]
    ids = _stored_ids(session, probe)
    if ids:
        taken = set(probe)
        ids.update(_stored_ids(session, [p for p in paths if p not in taken]))
    return ids


def record_entries(
    session: Session, rows: Iterable[tuple], kept: Mapping[tuple, int] | None = None
) -> None:
    """Record leaf entries: ``rows`` are ``(chunk_id, pos, *SAMPLE_COLUMNS)``, drawn a batch
    at a time. Each sample is stored once: one the store already holds is referred to.
    ``kept`` (``place_of`` -> id): samples the caller knows the store holds, row for row (a
    delta commit's, kept unchanged from the head leaves it cuts again: no other sample of the
    version is at their place); only the other rows are searched for, by path."""
    it = iter(rows)
    add_entries = "INSERT INTO leaf_entries (chunk_id, pos, sample_id) VALUES (?, ?, ?)"
    while batch := list(islice(it, _BATCH)):
        if kept:
            # A row is (chunk_id, pos, path, md5, label, split, segment_id, row, line, copy,
            # duplicate).
            sids: list = [kept.get(place_of(r[2], r[8], r[9])) for r in batch]
            rest = [i for i, sid in enumerate(sids) if sid is None]
            for i, sid in zip(rest, _sample_ids(session, [batch[i] for i in rest]), strict=True):
                sids[i] = sid
        else:
            sids = _sample_ids(session, batch)
        driver_executemany(
            session, add_entries, [(r[0], r[1], sid) for r, sid in zip(batch, sids, strict=True)]
        )


def place_of(path: str, line: int | None, copy: int | None) -> tuple[str, int | None, int]:
    """Where a sample is in its version: its path, table line and augmented copy."""
    return (path, None if line is None else int(line), int(copy or 0))


def _sample_ids(session: Session, rows: list[tuple]) -> list[int]:
    """The chunk_samples ids of leaf rows, each stored first where the store lacks it."""
    if not rows:
        return []
    cols = ", ".join(f'"{c}"' for c in ("id", *SAMPLE_COLUMNS))
    add_samples = (
        f"INSERT INTO chunk_samples ({cols}) VALUES ({', '.join('?' * (len(SAMPLE_COLUMNS) + 1))})"
    )
    ids = _batch_ids(session, sorted({r[2] for r in rows}))
    if not ids:
        # None stored (a first version's run): each row is a new sample, as the rows of one
        # commit's leaves are one version's samples, never one twice.
        fresh = allocate_ids(session, "chunk_samples", len(rows))
        driver_executemany(
            session, add_samples, [(sid, *r[2:]) for sid, r in zip(fresh, rows, strict=True)]
        )
        return fresh
    keys = [_key(r[2:]) for r in rows]
    new = dict.fromkeys(k for k in keys if k not in ids)
    for sid, k in zip(allocate_ids(session, "chunk_samples", len(new)), new, strict=True):
        ids[k] = sid
    driver_executemany(session, add_samples, [(ids[k], *k) for k in new])
    return [ids[k] for k in keys]


def drop_entries(session: Session, hashes: Sequence[str]) -> None:
    """Drop the entries of the chunks ``hashes`` (before their ``chunks`` rows), and the
    samples no other leaf refers to."""
    for part in _slices(list(hashes)):
        marks = ", ".join("?" * len(part))
        chunk_ids = [r[0] for r in driver_rows(
            session, f"SELECT id FROM chunks WHERE hash IN ({marks}) AND id IS NOT NULL", part
        )]  # fmt: skip
        if not chunk_ids:
            continue
        id_marks = ", ".join("?" * len(chunk_ids))
        samples = [r[0] for r in driver_rows(
            session, f"SELECT DISTINCT sample_id FROM leaf_entries WHERE chunk_id IN ({id_marks})",
            chunk_ids,
        )]  # fmt: skip
        driver_executemany(
            session, f"DELETE FROM leaf_entries WHERE chunk_id IN ({id_marks})", [chunk_ids]
        )
        for sids in _slices(samples):
            driver_executemany(
                session,
                f"DELETE FROM chunk_samples WHERE id IN ({', '.join('?' * len(sids))}) AND NOT "
                "EXISTS (SELECT 1 FROM leaf_entries le WHERE le.sample_id = chunk_samples.id)",
                [sids],
            )


def _slices(values: list) -> Iterator[list]:
    for i in range(0, len(values), _IN_BATCH):
        yield values[i : i + _IN_BATCH]

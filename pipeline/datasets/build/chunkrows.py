"""The store's record of a chunked version: ``chunks`` rows and leaf entries
(pipeline/datasets/leaf_index.py) for the leaves (and nodes) the store does not hold yet, and
the version's ``version_chunks`` (its leaves in order). A leaf shared with an older version
costs one ``version_chunks`` row here, nothing else: its entries are already recorded."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from itertools import chain
from pathlib import Path
from typing import NamedTuple

from sqlalchemy import delete
from sqlalchemy.orm import Session

from pipeline.datasets.build.windows import sample_of
from pipeline.datasets.chunkread import read_entries, walk_leaves
from pipeline.datasets.chunks import (
    LeafRef,
    NodeRef,
    Tree,
    entry_rows,
    sample_key,
)
from pipeline.datasets.leaf_index import allocate_ids, record_entries
from pipeline.metadata.base import utcnow
from pipeline.metadata.datasets import CHUNK_LEAF, CHUNK_NODE, VersionChunk
from pipeline.metadata.driver import driver_executemany, driver_rows

_IN_BATCH = 1000
_INSERT_BATCH = 5000


def _stored(session: Session, kind: str, hashes: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i in range(0, len(hashes), _IN_BATCH):
        part = hashes[i : i + _IN_BATCH]
        out.update(
            driver_rows(
                session,
                f"SELECT hash, sha256 FROM chunks WHERE kind = ? AND hash IN ({', '.join('?' * len(part))})",
                (kind, *part),
            )
        )
    return out


def known_leaves(session: Session) -> Callable[[list[str]], dict[str, str]]:
    """For chunkwrite.write_tree: the leaves the store already holds, with their .idx checksum."""

    def lookup(hashes: list[str]) -> dict[str, str]:
        return {h: sha for h, sha in _stored(session, CHUNK_LEAF, hashes).items() if sha}

    return lookup


class _Key(NamedTuple):
    path: str
    line: int | None
    copy: int


def leaf_keys(session: Session, data_root: Path, manifest: dict) -> list[tuple[LeafRef, bytes]]:
    """For chunkwrite.write_tree's ``parent``: a chunked version's leaves, each with the key of its
    first sample (one chunk_entries row per leaf, not per sample)."""
    leaves = walk_leaves(data_root, manifest["chunks"])
    first: dict[str, bytes] = {}
    unique = sorted({leaf.hash for leaf in leaves})
    for i in range(0, len(unique), _IN_BATCH):
        part = unique[i : i + _IN_BATCH]
        for h, path, line, copy in driver_rows(
            session,
            f'SELECT chunk_hash, path, line, "copy" FROM chunk_entries WHERE pos = 0 '
            f"AND chunk_hash IN ({', '.join('?' * len(part))})",
            tuple(part),
        ):
            first[h] = sample_key(_Key(path, line, int(copy or 0)))
    return [(leaf, first[leaf.hash]) for leaf in leaves if leaf.hash in first]


def leaf_edges(session: Session, leaves: list[LeafRef]) -> dict[str, tuple[tuple, tuple]]:
    """hash -> the (path, line, copy) of each leaf's first and last sample (two chunk_entries
    rows per leaf); a leaf the store does not hold is left out."""
    unique = sorted({leaf.hash for leaf in leaves})
    rows: dict[str, dict[int, tuple]] = {}
    for i in range(0, len(unique), _IN_BATCH):
        part = unique[i : i + _IN_BATCH]
        for h, pos, path, line, copy in driver_rows(
            session,
            'SELECT ce.chunk_hash, ce.pos, ce.path, ce.line, ce."copy" FROM chunk_entries ce '
            "JOIN chunks c ON c.hash = ce.chunk_hash AND c.kind = ? "
            'WHERE (ce.pos = 0 OR ce.pos = c."count" - 1) '
            f"AND ce.chunk_hash IN ({', '.join('?' * len(part))})",
            (CHUNK_LEAF, *part),
        ):
            rows.setdefault(h, {})[int(pos)] = (path, line, int(copy or 0))
    out: dict[str, tuple[tuple, tuple]] = {}
    for leaf in leaves:
        first, last = rows.get(leaf.hash, {}).get(0), rows.get(leaf.hash, {}).get(leaf.count - 1)
        if first is not None and last is not None:
            out[leaf.hash] = (first, last)
    return out


def settled_leaves(
    session: Session, leaves: list[LeafRef], affected: list[str]
) -> dict[str, bytes]:
    """For chunkwrite.write_tree's ``settled``: the parent's leaves whose path range (first sample's
    path to last's) holds none of the sorted ``affected`` paths, each with its last sample's key."""
    out: dict[str, bytes] = {}
    for h, (first, last) in leaf_edges(session, leaves).items():
        k = bisect_left(affected, first[0])
        if k == len(affected) or affected[k] > last[0]:
            out[h] = sample_key(_Key(*last))
    return out


def _entries_from_disk(data_root: Path, leaf: LeafRef) -> Iterable[tuple]:
    """A leaf's rows (ENTRY_COLUMNS) from its metadata part (a version published before a crash
    lost its store record: the chunk files are the truth)."""
    return entry_rows([sample_of(r) for r in read_entries(data_root, leaf.hash)])


def record_tree(
    session: Session,
    version_id: str,
    data_root: Path,
    manifest: dict,
    tree: Tree | None,
    summaries: dict[str, str] | None = None,
    known_samples: Mapping[tuple, int] | None = None,
) -> set[str]:
    """Record the version's chunks. ``tree`` is what this commit wrote; None when the version
    was found published on disk (then its leaves are walked from the manifest). ``summaries``
    (hash -> summary JSON) go into the new leaves' rows as they are inserted; the hashes of the
    leaves inserted come back (the others' summaries are the caller's to update).
    ``known_samples``: the stored samples the new leaves are known to hold (record_entries)."""
    section = manifest["chunks"]
    if tree is None:
        leaves = walk_leaves(data_root, section)
        nodes = [NodeRef(n["hash"], n["count"], n["bytes"]) for n in section["nodes"]]
        have = _stored(session, CHUNK_LEAF, [leaf.hash for leaf in leaves])
        new_leaves = [
            (leaf, _entries_from_disk(data_root, leaf)) for leaf in leaves if leaf.hash not in have
        ]
    else:
        leaves, nodes = tree.leaves, tree.nodes
        # write_tree reported the leaves the store lacked when it looked, in this transaction.
        new_leaves = [(leaf, entry_rows(part)) for leaf, part in tree.new_leaves]
    now = utcnow()
    have_nodes = _stored(session, CHUNK_NODE, [n.hash for n in nodes])
    summary_of = (summaries or {}).get
    chunk_rows = [
        (leaf.hash, CHUNK_LEAF, leaf.count, leaf.bytes, leaf.sha256_idx, summary_of(leaf.hash), now)
        for leaf, _ in new_leaves
    ]
    chunk_rows += [
        (n.hash, CHUNK_NODE, n.count, n.bytes, None, None, now)
        for n in dict.fromkeys(nodes)
        if n.hash not in have_nodes
    ]
    ids = allocate_ids(session, "chunks", len(chunk_rows))
    driver_executemany(
        session,
        'INSERT INTO chunks (id, hash, kind, "count", bytes, sha256, summary, created_at) '
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(cid, *row) for cid, row in zip(ids, chunk_rows, strict=True)],
        batch=_INSERT_BATCH,
    )
    # Made as they are recorded, a batch at a time: a first version's million rows are never
    # held at once. The new leaves are chunk_rows' first rows, so their ids come first.
    leaf_ids = ids[: len(new_leaves)]
    record_entries(
        session,
        chain.from_iterable(
            ((cid, *row) for row in rows)
            for cid, (_leaf, rows) in zip(leaf_ids, new_leaves, strict=True)
        ),
        kept=known_samples,
    )
    # A gc'd version published again: its old leaf list goes first.
    session.execute(delete(VersionChunk).where(VersionChunk.version_id == version_id))
    rows = []
    start = 0
    for ordinal, leaf in enumerate(leaves):
        rows.append((version_id, ordinal, leaf.hash, start))
        start += leaf.count
    driver_executemany(
        session,
        'INSERT INTO version_chunks (version_id, ordinal, chunk_hash, "start") VALUES (?, ?, ?, ?)',
        rows,
        batch=_INSERT_BATCH,
    )
    return {leaf.hash for leaf, _ in new_leaves}

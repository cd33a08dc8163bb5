"""A version's samples as the store holds them, whatever the version's format, and the diff of
two versions by lake path.

A chunked version (manifest format 2) lists its leaves in ``version_chunks``; their samples are
``chunk_entries`` rows, one per sample per DISTINCT leaf, shared by every version holding the
leaf. A version published before chunks (format 1) keeps a ``version_samples`` row per sample.
Everything here reads both, so queries, the UI and gc need not care which one a version is.

The diff of two chunked versions compares their leaf lists first: a leaf in both holds the
same samples in both, so only the leaves that differ are read, plus every row of the paths on
their edges (a path whose rows a cut split over two leaves may also lie in a shared one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import exists, select, union_all
from sqlalchemy.orm import Session
from sqlalchemy.sql import Subquery

from pipeline.metadata.datasets import ChunkEntry, VersionChunk, VersionSample
from pipeline.metadata.driver import driver_rows

# Rows per IN (...) list: well under SQLite's 32,766 bound variables and PostgreSQL's 65,535.
_BATCH = 500
_PATHS_BATCH = 450  # two IN lists of it and two ids stay under SQLite's 999 bound values

# The FROM and the first WHERE terms of a query for one version's entries (the version id the
# first parameter), for lookups by ``ce.path`` or ``ce.md5`` ANDed after it. CROSS JOIN makes
# SQLite loop over the entries found by their path or md5 index, then check the version by
# chunk: with an inner join and no statistics, it walks the version's every leaf instead, all
# of its samples per lookup batch. (PostgreSQL plans a CROSS JOIN with a WHERE as the join.)
ENTRIES_OF_VERSION = (
    "FROM chunk_entries ce CROSS JOIN version_chunks vc "
    "WHERE vc.chunk_hash = ce.chunk_hash AND vc.version_id = ?"
)

# path -> (md5, label, split) of the path's FIRST sample in version order: the rule the
# build's own diff counts with (a table file or augmented copies give a path several samples).
PathMap = dict[str, tuple[str, str | None, str]]


def path_diff(old: dict[str, tuple], new: dict[str, tuple]) -> dict[str, list[str]]:
    """added / removed / changed lake paths between two {path: (md5, label, ...)} maps;
    "changed" compares md5 and label only (a path's split follows its md5)."""
    return {
        "added": sorted(new.keys() - old.keys()),
        "removed": sorted(old.keys() - new.keys()),
        "changed": sorted(p for p in old.keys() & new.keys() if old[p][:2] != new[p][:2]),
    }


def is_chunked(session: Session, version_id: str) -> bool:
    return bool(session.scalar(select(exists().where(VersionChunk.version_id == version_id))))


def leaf_hashes(session: Session, version_id: str) -> list[str]:
    """The version's leaves in order (empty for a format-1 or an empty version)."""
    return list(
        session.scalars(
            select(VersionChunk.chunk_hash)
            .where(VersionChunk.version_id == version_id)
            .order_by(VersionChunk.ordinal)
        )
    )


def sample_rows(
    version_id: str | None = None,
    *,
    path: str | None = None,
    md5: str | None = None,
    paths: list[str] | None = None,
) -> Subquery:
    """Every sample of every version (or of ``version_id``; only those of ``path`` / ``md5``),
    both formats: columns version_id, idx (the sample's index in its version), path, md5,
    label, split, duplicate. The filters sit inside each branch, where the indexes are."""
    ce, vc, vs = ChunkEntry, VersionChunk, VersionSample
    chunked = select(
        vc.version_id.label("version_id"),
        (vc.start + ce.pos).label("idx"),
        ce.path.label("path"),
        ce.md5.label("md5"),
        ce.label.label("label"),
        ce.split.label("split"),
        ce.duplicate.label("duplicate"),
    ).join(vc, vc.chunk_hash == ce.chunk_hash)
    flat = select(
        vs.version_id.label("version_id"),
        vs.idx.label("idx"),
        vs.path.label("path"),
        vs.md5.label("md5"),
        vs.label.label("label"),
        vs.split.label("split"),
        vs.duplicate.label("duplicate"),
    )
    if version_id is not None:
        chunked = chunked.where(vc.version_id == version_id)
        flat = flat.where(vs.version_id == version_id)
    if path is not None:
        chunked = chunked.where(ce.path == path)
        flat = flat.where(vs.path == path)
    if md5 is not None:
        chunked = chunked.where(ce.md5 == md5)
        flat = flat.where(vs.md5 == md5)
    if paths is not None:
        chunked = chunked.where(ce.path.in_(paths))
        flat = flat.where(vs.path.in_(paths))
    return union_all(chunked, flat).subquery("samples")


def _first_of(rows: Iterable[Any]) -> PathMap:
    out: PathMap = {}
    for path, md5, label, split in rows:
        if path not in out:
            out[path] = (md5, label, split)
    return out


def first_rows(session: Session, version_id: str) -> PathMap:
    """Each path of the version with its first sample, in version order."""
    t = sample_rows(version_id)
    return _first_of(
        session.execute(
            select(t.c.path, t.c.md5, t.c.label, t.c.split)
            .order_by(t.c.idx)
            .execution_options(yield_per=5000)
        )
    )


def leaf_entries(session: Session, hashes: list[str]) -> dict[str, list[tuple]]:
    """(path, md5, label, split) of each leaf's samples, in leaf order."""
    out: dict[str, list[tuple]] = {h: [] for h in hashes}
    unique = sorted(out)
    for i in range(0, len(unique), _BATCH):
        rows = session.execute(
            select(
                ChunkEntry.chunk_hash,
                ChunkEntry.path,
                ChunkEntry.md5,
                ChunkEntry.label,
                ChunkEntry.split,
            )
            .where(ChunkEntry.chunk_hash.in_(unique[i : i + _BATCH]))
            .order_by(ChunkEntry.chunk_hash, ChunkEntry.pos)
        )
        for h, *rest in rows:
            out[h].append(tuple(rest))
    return out


def paths_in(session: Session, version_id: str, paths: list[str]) -> PathMap:
    """The first sample of each of ``paths`` in the version (absent: not in it)."""
    # Plain SQL, both formats: building sample_rows' union around a long IN list cost
    # SQLAlchemy ~15 ms a call (expression comparison), more than the query (a commit's diff
    # runs this on every publish).
    rows: list[tuple] = []
    for i in range(0, len(paths), _PATHS_BATCH):
        part = tuple(paths[i : i + _PATHS_BATCH])
        marks = ", ".join("?" * len(part))
        rows.extend(
            driver_rows(
                session,
                "SELECT vc.start + ce.pos, ce.path, ce.md5, ce.label, ce.split "
                f"{ENTRIES_OF_VERSION} AND ce.path IN ({marks}) UNION ALL "
                "SELECT idx, path, md5, label, split FROM version_samples "
                f"WHERE version_id = ? AND path IN ({marks})",
                (version_id, *part, version_id, *part),
            )
        )
    rows.sort(key=lambda r: r[0])
    return _first_of(r[1:] for r in rows)


def diff_maps(session: Session, a: str, b: str) -> tuple[PathMap, PathMap]:
    """Two path maps, of ``a`` and of ``b``, that hold every path that differs between them
    (with its first sample), so ``path_diff`` of the two is the diff of the versions.

    Two chunked versions: only the paths of the leaves that are not in both. A format-1
    version on either side: all of both."""
    la, lb = leaf_hashes(session, a), leaf_hashes(session, b)
    if not la or not lb:  # format 1 (or empty): no leaves to compare
        return first_rows(session, a), first_rows(session, b)
    shared = set(la) & set(lb)
    da = [h for h in la if h not in shared]
    db = [h for h in lb if h not in shared]
    entries = leaf_entries(session, da + db)
    edges: set[str] = set()
    maps: list[PathMap] = []
    for leaves in (da, db):
        rows: list[tuple] = []
        for h in leaves:
            part = entries[h]
            if part:
                # Only an edge path may have rows in another leaf (leaves are in path order).
                edges.update((part[0][0], part[-1][0]))
            rows.extend(part)
        maps.append(_first_of(rows))
    exact = sorted(edges)
    for version_id, m in ((a, maps[0]), (b, maps[1])):
        for p in exact:
            m.pop(p, None)
        m.update(paths_in(session, version_id, exact))
    return maps[0], maps[1]


__all__ = [
    "PathMap",
    "diff_maps",
    "first_rows",
    "is_chunked",
    "leaf_entries",
    "leaf_hashes",
    "path_diff",
    "paths_in",
    "sample_rows",
]

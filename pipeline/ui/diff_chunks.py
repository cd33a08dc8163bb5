"""The diff of two chunked versions (manifest format 2): only the leaves that differ are read,
counted and paged by SQLite itself when each path has one row (``diff_chunks_sql``), else
classified in Python (``diff_chunks``). Both answer as ``pipeline.ui.diff.diff_versions``
does: all counts, one page of each kind, in path order."""

from __future__ import annotations

from bisect import bisect_left

from sqlalchemy.orm import Session

from pipeline.datasets.version_rows import diff_maps, leaf_hashes, path_diff
from pipeline.metadata.driver import driver_rows

# Differing leaves beyond which the SQL form leaves the work to diff_chunks: each query binds
# every hash up to twice, under SQLite's 32,766 bound values.
_SQL_DIFF_LEAVES = 8000


def diff_chunks_sql(
    s: Session, a: str, b: str, limit: int, offset: int
) -> tuple[dict, dict] | None:
    """SQLite, two chunked versions with one row per path: the leaves that differ, counted and
    paged in SQL. With one row per path a path of ``b``'s differing leaves is either in ``a``'s
    differing leaves or not in ``a`` at all (in a shared leaf it would be in both versions
    there), so the diff is that of the two sets of differing leaves' rows. And since a leaf
    holds a run of paths in order, a path can only be in a leaf whose first and last paths
    enclose it: a differing leaf whose range meets no differing leaf of the other side is all
    added (or all removed), counted from its ``chunks.count`` without reading its rows. Only the
    leaves whose ranges meet are joined on the path index (distant versions of a dataset that
    drops old files and gains new ones share few: bench/ui.py, first vs last of 100). Pages in
    path order. None when the lists differ too much to bind, or a leaf's edges are missing."""
    la, lb = leaf_hashes(s, a), leaf_hashes(s, b)
    if not la or not lb:
        return None  # a format-1 side
    shared = set(la) & set(lb)
    da = [h for h in la if h not in shared]
    db = [h for h in lb if h not in shared]
    if len(da) + len(db) > _SQL_DIFF_LEAVES:
        return None
    edges = _leaf_edges(s, da + db)
    if len(edges) < len(set(da) | set(db)):
        return None
    oa, ob = _meeting(da, db, edges), _meeting(db, da, edges)
    in_both = n_changed = 0
    ma, mb = ", ".join("?" * len(oa)) or "NULL", ", ".join("?" * len(ob)) or "NULL"
    differs = "(a.md5 <> b.md5 OR a.label IS NOT b.label)"
    if oa and ob:
        ((in_both, n_changed),) = driver_rows(
            s,
            f"SELECT count(*), coalesce(sum(CASE WHEN {differs} THEN 1 ELSE 0 END), 0) "
            f"FROM chunk_entries b JOIN chunk_entries a ON a.path = b.path "
            f"AND a.chunk_hash IN ({ma}) WHERE b.chunk_hash IN ({mb})",
            (*oa, *ob),
        )
    counts = {
        "added": sum(edges[h][0] for h in db) - in_both,
        "removed": sum(edges[h][0] for h in da) - in_both,
        "changed": n_changed,
    }

    pages = {
        "added": _page(s, db, f"LEFT JOIN chunk_entries o ON o.path = r.path AND o.chunk_hash IN ({ma})",
                       "o.path IS NULL", oa, "r.path, r.md5, r.label, r.split", counts["added"], limit, offset),
        "removed": _page(s, da, f"LEFT JOIN chunk_entries o ON o.path = r.path AND o.chunk_hash IN ({mb})",
                         "o.path IS NULL", ob, "r.path, r.md5, r.label, r.split", counts["removed"], limit, offset),
        "changed": _page(s, ob, f"JOIN chunk_entries o ON o.path = r.path AND o.chunk_hash IN ({ma})",
                         "(o.md5 <> r.md5 OR o.label IS NOT r.label)", oa,
                         "r.path, o.md5, r.md5, o.label, r.label, r.split", counts["changed"], limit, offset),
    }  # fmt: skip
    for kind, keys in _PAGE_KEYS.items():
        pages[kind] = [dict(zip(keys, row, strict=True)) for row in pages[kind]]
    return counts, pages


def _leaf_edges(s: Session, leaves: list[str]) -> dict[str, tuple[int, str, str]]:
    """``hash -> (count, first path, last path)`` of each leaf: its ``chunks`` row and its first
    and last entries, three probes of unique indexes a leaf."""
    if not leaves:
        return {}
    rows = driver_rows(
        s,
        "SELECT c.hash, c.count, f.path, l.path FROM chunks c "
        "JOIN chunk_entries f ON f.chunk_hash = c.hash AND f.pos = 0 "
        "JOIN chunk_entries l ON l.chunk_hash = c.hash AND l.pos = c.count - 1 "
        f"WHERE c.hash IN ({', '.join('?' * len(leaves))})",
        leaves,
    )
    return {h: (n, first, last) for h, n, first, last in rows}


def _meeting(leaves: list[str], others: list[str], edges: dict) -> list[str]:
    """The leaves (in order) whose path range meets the range of one of ``others``. Each list
    is a version's leaves in order, so its ranges follow one another; were they ever out of
    order, every leaf is taken as meeting (the join then decides, as without this step)."""
    firsts = [edges[h][1] for h in others]
    lasts = [edges[h][2] for h in others]
    if any(lasts[i] >= firsts[i + 1] for i in range(len(others) - 1)):
        return list(leaves)
    out = []
    for h in leaves:
        _, first, last = edges[h]
        j = bisect_left(lasts, first)  # the first other leaf that does not end before this one
        if j < len(others) and firsts[j] <= last:
            out.append(h)
    return out


_PAGE_KEYS = {
    "added": ("path", "md5", "label", "split"),
    "removed": ("path", "md5", "label", "split"),
    "changed": ("path", "old_md5", "md5", "old_label", "label", "split"),
}
_PAGE_LEAVES = 16  # leaves read per query while a page fills
_SORT_AT_MOST = 5000  # matching rows up to which a page is one sorted query


def _page(
    s: Session,
    leaves: list[str],
    join: str,
    keep: str,
    other: list[str],
    cols: str,
    total: int,
    limit: int,
    offset: int,
) -> list[tuple]:
    """One page of the rows of ``leaves`` (in version order) that ``join``/``keep`` select
    against the other side's leaves ``other``. Leaves are in path order and a leaf's rows by
    position, so reading the leaves in order, a few at a time, gives the rows in path order
    with no sort, and stops once the page is full."""
    if total <= offset:
        return []
    want = offset + limit
    if total <= _SORT_AT_MOST:
        # Few rows match (a handful of changed paths among many leaves): one query sorting
        # only them beats reading the leaves a few at a time until the last match.
        return driver_rows(
            s,
            f"SELECT {cols} FROM chunk_entries r {join} WHERE r.chunk_hash IN "
            f"({', '.join('?' * len(leaves))}) AND {keep} ORDER BY +r.path LIMIT ? OFFSET ?",
            (*other, *leaves, limit, offset),
        )
    out: list[tuple] = []
    for i in range(0, len(leaves), _PAGE_LEAVES):
        batch = leaves[i : i + _PAGE_LEAVES]
        rank = {h: k for k, h in enumerate(batch)}
        rows = driver_rows(
            s,
            f"SELECT r.chunk_hash, r.pos, {cols} FROM chunk_entries r {join} "
            f"WHERE r.chunk_hash IN ({', '.join('?' * len(batch))}) AND {keep}",
            (*other, *batch),
        )
        rows.sort(key=lambda row: (rank[row[0]], row[1]))
        out.extend(row[2:] for row in rows)
        if len(out) >= want:
            break
    return out[offset:want]


def diff_chunks(s: Session, a: str, b: str, limit: int, offset: int) -> tuple[dict, dict]:
    """Chunked versions: the paths of the leaves that differ, classified and paged here (in
    Python's order, as the merge)."""
    old, new = diff_maps(s, a, b)
    d = path_diff(old, new)
    window = slice(offset, offset + limit)
    counts = {kind: len(paths) for kind, paths in d.items()}
    pages = {
        "added": [
            {"path": p, "md5": new[p][0], "label": new[p][1], "split": new[p][2]}
            for p in d["added"][window]
        ],
        "removed": [
            {"path": p, "md5": old[p][0], "label": old[p][1], "split": old[p][2]}
            for p in d["removed"][window]
        ],
        "changed": [
            {
                "path": p,
                "old_md5": old[p][0],
                "md5": new[p][0],
                "old_label": old[p][1],
                "label": new[p][1],
                "split": new[p][2],
            }
            for p in d["changed"][window]
        ],
    }
    return counts, pages

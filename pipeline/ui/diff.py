"""The diff of two versions by lake path, for the Datasets page and its API: all counts, one
page of each kind, at a cost that does not grow with the page number (bench/ui.py)."""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session, aliased

from pipeline.datasets.queries import version_summary
from pipeline.datasets.version_rows import diff_maps, is_chunked, leaf_hashes, path_diff
from pipeline.metadata.datasets import VersionSample
from pipeline.metadata.driver import driver_rows
from pipeline.metadata.store import MetadataStore
from pipeline.ui.params import clamp
from pipeline.ui.refs import resolve_pair


def diff_versions(
    store: MetadataStore,
    a: str,
    b: str,
    *,
    dataset: str | None = None,
    limit: int = 100,
    offset: int = 0,
    method: str | None = None,
) -> dict[str, Any]:
    """What changed from version ``a`` to ``b``, by path: counts of all, one page of each kind.

    A path's md5/label are those of its first sample row (as the build's own diff). When each
    path has one row on both sides (``samples == files``: images without augmented copies) the
    database does the work — SQLite by index probes on (version_id, path) that page straight off
    the index, PostgreSQL by one FULL OUTER JOIN returning only the differing rows (each is
    slow on the other: see bench/ui.py). Otherwise (table files, augmented copies) both sides
    are streamed in path order and merged in Python, which stays linear where a join would
    multiply the rows of a path. ``method`` forces "sql" or "merge", for tests.

    When either side is chunked (manifest format 2, no ``version_samples`` rows), the leaf
    lists are compared and only the leaves that differ are read: on SQLite with one row per
    path, counted and paged by SQLite itself (``_diff_chunks_sql``), else classified here
    (version_rows.diff_maps). ``method="chunks"`` forces the second, for tests.
    """
    limit, offset = clamp(limit, offset)
    with store.session() as s:
        va, vb = resolve_pair(store, s, a, b, dataset)
        if is_chunked(s, va.version_id) or is_chunked(s, vb.version_id):
            one_row_per_path = va.samples == va.files and vb.samples == vb.files
            if method != "chunks" and one_row_per_path and s.get_bind().dialect.name == "sqlite":
                method = "chunks_sql"
            else:
                method = "chunks"
        elif method is None:
            one_row_per_path = va.samples == va.files and vb.samples == vb.files
            method = "sql" if one_row_per_path else "merge"
        got = None
        if method == "chunks_sql":
            got = _diff_chunks_sql(s, va.version_id, vb.version_id, limit, offset)
            method = "chunks" if got is None else method
        if got is not None:
            counts, pages = got
        elif method == "chunks":
            counts, pages = _diff_chunks(s, va.version_id, vb.version_id, limit, offset)
        elif method == "sql":
            if s.get_bind().dialect.name == "sqlite":
                # Against its parent, the build already counted this diff (same rule, same rows).
                known = None
                if vb.parent_id == va.version_id:
                    known = {"added": vb.added, "removed": vb.removed, "changed": vb.changed}
                counts, pages = _diff_indexed(s, va.version_id, vb.version_id, limit, offset, known)
            else:
                counts, pages = _diff_joined(s, va.version_id, vb.version_id, limit, offset)
        elif method == "merge":
            counts, pages = _diff_merge(s, va.version_id, vb.version_id, limit, offset)
        else:
            raise ValueError(f"method must be 'sql' or 'merge', got {method!r}")
    return {
        "a": version_summary(va),
        "b": version_summary(vb),
        "limit": limit,
        "offset": offset,
        "counts": counts,
        **pages,
    }


def _diff_indexed(
    s: Session, a: str, b: str, limit: int, offset: int, known: dict[str, int] | None = None
) -> tuple[dict, dict]:
    """SQLite: counts in one pass (or the build's own, against the parent), then each kind's
    page in path order straight off the (version_id, path) index, stopping at the page's end."""
    A, B = aliased(VersionSample), aliased(VersionSample)
    only_b = (
        select(B.path, B.md5, B.label, B.split)
        .outerjoin(A, and_(A.version_id == a, A.path == B.path))
        .where(B.version_id == b, A.id.is_(None))
    )
    only_a = (
        select(A.path, A.md5, A.label, A.split)
        .outerjoin(B, and_(B.version_id == b, B.path == A.path))
        .where(A.version_id == a, B.id.is_(None))
    )
    changed = (
        select(B.path, A.md5.label("old_md5"), B.md5, A.label.label("old_label"), B.label, B.split)
        .join(A, and_(A.version_id == a, A.path == B.path))
        .where(B.version_id == b, or_(A.md5 != B.md5, A.label.is_distinct_from(B.label)))
    )
    counts = known if known is not None else _count_diff(s, a, b)
    pages = {}
    for kind, q in {"added": only_b, "removed": only_a, "changed": changed}.items():
        # A kind with nothing left to show costs no query (a "changed" page scans every path).
        if counts[kind] <= offset:
            pages[kind] = []
            continue
        rows = s.execute(q.order_by(q.selected_columns[0]).limit(limit).offset(offset))
        pages[kind] = [dict(r._mapping) for r in rows]
    return counts, pages


def _count_diff(s: Session, a: str, b: str) -> dict[str, int]:
    """All three counts in ONE pass over b's rows with an index probe into a: with one row per
    path on each side, removed = a's rows minus the matched ones."""
    A, B = aliased(VersionSample), aliased(VersionSample)
    differs = or_(A.md5 != B.md5, A.label.is_distinct_from(B.label))
    added, matched, n_changed = s.execute(
        select(
            func.coalesce(func.sum(case((A.id.is_(None), 1), else_=0)), 0),
            func.count(A.id),
            func.coalesce(func.sum(case((and_(A.id.is_not(None), differs), 1), else_=0)), 0),
        )
        .select_from(B)
        .outerjoin(A, and_(A.version_id == a, A.path == B.path))
        .where(B.version_id == b)
    ).one()
    a_rows = s.scalar(
        select(func.count()).select_from(VersionSample).where(VersionSample.version_id == a)
    )
    return {
        "added": int(added),
        "removed": int(a_rows or 0) - int(matched),
        "changed": int(n_changed),
    }


def _differing_rows(s: Session, a: str, b: str) -> Any:
    """(a.path, a.md5, a.label, a.split, b.path, b.md5, b.label, b.split) of every path that
    differs: on one side only (the other side's columns None) or with another md5/label, in one
    FULL OUTER JOIN (a single hash-join pass on PostgreSQL; SQLite would rescan a materialised
    side per row, hence its own indexed path above)."""
    cols = (VersionSample.path, VersionSample.md5, VersionSample.label, VersionSample.split)
    A = select(*cols).where(VersionSample.version_id == a).subquery("a")
    B = select(*cols).where(VersionSample.version_id == b).subquery("b")
    return s.execute(
        select(A.c.path, A.c.md5, A.c.label, A.c.split, B.c.path, B.c.md5, B.c.label, B.c.split)
        .select_from(B)
        .join(A, A.c.path == B.c.path, full=True)
        .where(
            or_(
                A.c.path.is_(None),
                B.c.path.is_(None),
                A.c.md5 != B.c.md5,
                A.c.label.is_distinct_from(B.c.label),
            )
        )
    )


def _diff_joined(s: Session, a: str, b: str, limit: int, offset: int) -> tuple[dict, dict]:
    """Only the rows that differ come out of the database; counting, ordering and paging them
    happens here, so the cost is the join plus the size of the difference — not a pass per
    kind or per page."""
    # Tuples until the page is cut: a diff of 200,000 paths must not build 200,000 dicts.
    added, removed, changed = [], [], []
    for row in _differing_rows(s, a, b):
        (added if row[0] is None else removed if row[4] is None else changed).append(tuple(row))
    window = slice(offset, offset + limit)
    added.sort(key=itemgetter(4))
    removed.sort(key=itemgetter(0))
    changed.sort(key=itemgetter(4))
    counts = {"added": len(added), "removed": len(removed), "changed": len(changed)}
    pages = {
        "added": [
            {"path": p, "md5": m, "label": la, "split": sp} for *_, p, m, la, sp in added[window]
        ],
        "removed": [
            {"path": p, "md5": m, "label": la, "split": sp} for p, m, la, sp, *_ in removed[window]
        ],
        "changed": [
            {"path": pb, "old_md5": ma, "md5": mb, "old_label": la, "label": lb, "split": sb}
            for _pa, ma, la, _sa, pb, mb, lb, sb in changed[window]
        ],
    }
    return counts, pages


def _first_rows(s: Session, version_id: str) -> Iterator[tuple[str, str, str | None, str]]:
    """(path, md5, label, split) of each path's first row, in path order, streamed."""
    rows = s.execute(
        select(VersionSample.path, VersionSample.md5, VersionSample.label, VersionSample.split)
        .where(VersionSample.version_id == version_id)
        .order_by(VersionSample.path, VersionSample.idx)
        .execution_options(yield_per=5000)
    )
    last = None
    for row in rows:
        if row[0] != last:
            last = row[0]
            yield tuple(row)


def _diff_merge(s: Session, a: str, b: str, limit: int, offset: int) -> tuple[dict, dict]:
    counts = {"added": 0, "removed": 0, "changed": 0}
    pages: dict[str, list] = {"added": [], "removed": [], "changed": []}

    def keep(kind: str, item: dict) -> None:
        n = counts[kind]
        counts[kind] = n + 1
        if offset <= n < offset + limit:
            pages[kind].append(item)

    # Both sides are sorted by path in Python's order (the database's collation may differ).
    old = sorted(_first_rows(s, a))
    new = sorted(_first_rows(s, b))
    i = j = 0
    while i < len(old) or j < len(new):
        if j >= len(new) or (i < len(old) and old[i][0] < new[j][0]):
            p, m, lab, sp = old[i]
            keep("removed", {"path": p, "md5": m, "label": lab, "split": sp})
            i += 1
        elif i >= len(old) or new[j][0] < old[i][0]:
            p, m, lab, sp = new[j]
            keep("added", {"path": p, "md5": m, "label": lab, "split": sp})
            j += 1
        else:
            (p, m0, l0, _), (_, m1, l1, sp) = old[i], new[j]
            if m0 != m1 or l0 != l1:
                keep(
                    "changed",
                    {
                        "path": p,
                        "old_md5": m0,
                        "md5": m1,
                        "old_label": l0,
                        "label": l1,
                        "split": sp,
                    },
                )
            i += 1
            j += 1
    return counts, pages


# Differing leaves beyond which the SQL form leaves the work to _diff_chunks: each query binds
# every hash up to twice, under SQLite's 32,766 bound values.
_SQL_DIFF_LEAVES = 8000


def _diff_chunks_sql(
    s: Session, a: str, b: str, limit: int, offset: int
) -> tuple[dict, dict] | None:
    """SQLite, two chunked versions with one row per path: the leaves that differ, counted and
    paged in SQL. With one row per path a path of ``b``'s differing leaves is either in ``a``'s
    differing leaves or not in ``a`` at all (in a shared leaf it would be in both versions
    there), so the diff is that of the two sets of differing leaves' rows: counts from one scan
    and one join, pages in path order. Reading their rows into Python was most of the diff of
    distant versions (bench/ui.py, first vs last of 100: 0.77 s). None when the lists differ
    too much to bind."""
    la, lb = leaf_hashes(s, a), leaf_hashes(s, b)
    if not la or not lb:
        return None  # a format-1 side
    shared = set(la) & set(lb)
    da = [h for h in la if h not in shared]
    db = [h for h in lb if h not in shared]
    if len(da) + len(db) > _SQL_DIFF_LEAVES:
        return None
    ma, mb = ", ".join("?" * len(da)) or "NULL", ", ".join("?" * len(db)) or "NULL"
    ((in_a, in_either),) = driver_rows(
        s,
        f"SELECT coalesce(sum(CASE WHEN chunk_hash IN ({ma}) THEN 1 ELSE 0 END), 0), count(*) "
        f"FROM chunk_entries WHERE chunk_hash IN ({ma}) OR chunk_hash IN ({mb})",
        (*da, *da, *db),
    )
    pair = (
        f"FROM chunk_entries b JOIN chunk_entries a ON a.path = b.path AND a.chunk_hash IN ({ma}) "
        f"WHERE b.chunk_hash IN ({mb})"
    )
    differs = "(a.md5 <> b.md5 OR a.label IS NOT b.label)"
    ((in_both, n_changed),) = driver_rows(
        s,
        f"SELECT count(*), coalesce(sum(CASE WHEN {differs} THEN 1 ELSE 0 END), 0) {pair}",
        (*da, *db),
    )
    counts = {
        "added": in_either - in_a - in_both,
        "removed": in_a - in_both,
        "changed": n_changed,
    }

    pages = {
        "added": _page(s, db, f"LEFT JOIN chunk_entries o ON o.path = r.path AND o.chunk_hash IN ({ma})",
                       "o.path IS NULL", da, "r.path, r.md5, r.label, r.split", counts["added"], limit, offset),
        "removed": _page(s, da, f"LEFT JOIN chunk_entries o ON o.path = r.path AND o.chunk_hash IN ({mb})",
                         "o.path IS NULL", db, "r.path, r.md5, r.label, r.split", counts["removed"], limit, offset),
        "changed": _page(s, db, f"JOIN chunk_entries o ON o.path = r.path AND o.chunk_hash IN ({ma})",
                         "(o.md5 <> r.md5 OR o.label IS NOT r.label)", da,
                         "r.path, o.md5, r.md5, o.label, r.label, r.split", counts["changed"], limit, offset),
    }  # fmt: skip
    for kind, keys in _PAGE_KEYS.items():
        pages[kind] = [dict(zip(keys, row, strict=True)) for row in pages[kind]]
    return counts, pages


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


def _diff_chunks(s: Session, a: str, b: str, limit: int, offset: int) -> tuple[dict, dict]:
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

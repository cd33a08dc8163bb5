"""The diff of two versions by lake path, for the Datasets page and its API: all counts, one
page of each kind, at a cost that does not grow with the page number (bench/ui.py)."""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session, aliased

from pipeline.datasets.queries import version_summary
from pipeline.datasets.version_rows import is_chunked
from pipeline.metadata.datasets import VersionSample
from pipeline.metadata.store import MetadataStore
from pipeline.ui.diff_chunks import diff_chunks, diff_chunks_sql
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
    lists are compared and only the leaves that differ are read (``pipeline.ui.diff_chunks``):
    on SQLite with one row per path, counted and paged by SQLite itself, else classified in
    Python (version_rows.diff_maps). ``method="chunks"`` forces the second, for tests.
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
            got = diff_chunks_sql(s, va.version_id, vb.version_id, limit, offset)
            method = "chunks" if got is None else method
        if got is not None:
            counts, pages = got
        elif method == "chunks":
            counts, pages = diff_chunks(s, va.version_id, vb.version_id, limit, offset)
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

"""The version page's Quality section: the report's counts and listed groups, the gate's
reasons, the review history; and a PNG of one listed group's samples (images only).

Reads the report from the store (``dataset_versions.quality``, else the manifest) through
``pipeline.datasets.quality.view``; a group's thumbnails read only that group's rows.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Path, Response

from pipeline.ui.params import VersionRef
from pipeline.ui.thumbnails import NoThumbnails

# The report's listings a page shows, in this order: (report key, title).
GROUPS = (
    ("label_conflicts", "Label conflicts (same content, different labels)"),
    ("leaks", "Cross-split leaks"),
    ("near_duplicates", "Near-duplicate groups"),
    ("exact_duplicates", "Exact duplicates"),
)
MAX_THUMBS = 8  # samples drawn per group
REQUIRED_ACTIONS = "/required_actions"  # Airflow's page of pending human-in-the-loop steps


def quality_section(store: Any, version_id: str) -> dict[str, Any]:
    """What the Quality section shows for one version."""
    from pipeline.datasets.quality.view import version_quality
    from pipeline.metadata.datasets import DatasetVersion

    with store.session() as session:
        row = session.get(DatasetVersion, version_id)
        q = version_quality(session, row)
    report = q["report"] or {}
    q["groups"] = [
        {"key": key, "title": title, "items": (report.get(key) or {}).get("listed") or []}
        for key, title in GROUPS
    ]
    q["required_actions"] = REQUIRED_ACTIONS
    return q


def group_png(store: Any, ref: str, kind: str, n: int) -> bytes:
    """The samples of listed group ``n`` of ``kind``, one row each (label and split beside)."""
    import numpy as np
    from sqlalchemy import select

    from pipeline.datasets.quality.view import stored_report
    from pipeline.datasets.reader import open_version
    from pipeline.datasets.refs import resolve_row
    from pipeline.datasets.version_rows import sample_rows
    from pipeline.ui.thumbnails import render_grid

    if kind not in dict(GROUPS):
        raise NoThumbnails(f"no such listing {kind!r}: one of {', '.join(dict(GROUPS))}")
    with store.session() as session:
        v = resolve_row(session, ref)
        listed = ((stored_report(v) or {}).get(kind) or {}).get("listed") or []
        if not 0 <= n < len(listed):
            raise NoThumbnails(f"{v.tag} lists {len(listed)} {kind} group(s), not #{n}")
        paths = list(listed[n].get("paths") or [])[:MAX_THUMBS]
        t = sample_rows(v.version_id, paths=paths)
        picks = session.execute(
            select(t.c.idx, t.c.path, t.c.label, t.c.split).order_by(t.c.idx)
        ).all()
        dataset, version_id = v.dataset, v.version_id
    if not picks:
        raise NoThumbnails("none of the group's paths is a sample of this version")
    reader = open_version(dataset, version_id, store=store)
    if getattr(reader, "modality", "image") not in (None, "image"):
        raise NoThumbnails(f"a {reader.modality} dataset has no thumbnails")
    seen: set[str] = set()
    rows = []
    for idx, path, label, split in picks:
        if path in seen:  # augmented copies: the first row of a path is enough
            continue
        seen.add(path)
        x, _ = reader[int(idx)]
        rows.append((f"{label} · {split} · {path.rsplit('/', 1)[-1]}", [np.asarray(x)]))
    return render_grid(rows)


def build_quality_router(get_store: Any) -> APIRouter:
    router = APIRouter()

    @router.get("/versions/{ref}/quality", response_model=None)
    def quality(ref: VersionRef) -> dict[str, Any]:
        """The version's quality report, the gate's verdict and its review history."""
        from pipeline.datasets.quality.view import quality_of

        return quality_of(ref, store=get_store())

    @router.get("/versions/{ref}/quality/{kind}/{n}.png", response_class=Response)
    def group_thumbnails(
        ref: VersionRef, kind: str = Path(max_length=32), n: int = Path(ge=0, le=10_000)
    ) -> Response:
        """A PNG of one listed group's samples (label conflicts, leaks, near-duplicates)."""
        try:
            png = group_png(get_store(), ref, kind, n)
        except NoThumbnails as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        return Response(png, media_type="image/png", headers={"Cache-Control": "private"})

    return router

"""The JSON API behind the Datasets page (mounted under the plugin prefix, e.g. /laketrain/api).

Every route is read-only and reads the metadata store; only ``thumbnails.png`` reads the
stored arrays. The app's auth dependency guards the whole router.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Response

from pipeline.metadata.store import MetadataStore
from pipeline.ui import data
from pipeline.ui.thumbnails import NoThumbnails


def build_router(get_store: Callable[[], MetadataStore]) -> APIRouter:
    router = APIRouter()

    def found(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except data.NotFound as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None

    @router.get("/datasets")
    def datasets() -> dict[str, Any]:
        """Every dataset with its version count and newest committed version."""
        items = data.list_datasets(get_store())
        return {"total": len(items), "items": items}

    @router.get("/versions")
    def versions(
        dataset: str | None = None,
        limit: int = Query(25, ge=1, le=data.MAX_LIMIT),
        offset: int = Query(0, ge=0),
    ) -> dict[str, Any]:
        """Versions newest first, paginated, each with the runs that used it."""
        return data.list_versions(get_store(), dataset or None, limit=limit, offset=offset)

    @router.get("/versions/{ref}")
    def version(ref: str, dataset: str | None = None) -> dict[str, Any]:
        """One version by id, unique id prefix, tag, or ``latest`` (with ``?dataset=``)."""
        return found(lambda: data.get_version(get_store(), ref, dataset or None))

    @router.get("/versions/{ref}/invalid")
    def invalid(
        ref: str, limit: int = Query(100, ge=1, le=data.MAX_LIMIT), offset: int = Query(0, ge=0)
    ) -> dict[str, Any]:
        """Files (or table lines) left out of the version, with the reason."""
        return found(lambda: data.invalid_files(get_store(), ref, limit=limit, offset=offset))

    @router.get("/versions/{a}/diff/{b}")
    def diff(
        a: str,
        b: str,
        limit: int = Query(100, ge=1, le=data.MAX_LIMIT),
        offset: int = Query(0, ge=0),
    ) -> dict[str, Any]:
        """Added / removed / changed paths from ``a`` to ``b``: all counts, one page of each."""
        return found(lambda: data.diff_versions(get_store(), a, b, limit=limit, offset=offset))

    @router.get("/contains")
    def contains(
        q: str = Query(..., min_length=1, max_length=4096),
        limit: int = Query(200, ge=1, le=data.MAX_LIMIT),
    ) -> dict[str, Any]:
        """Which versions contain a file, by md5 or by lake path."""
        return data.versions_containing(get_store(), q, limit=limit)

    @router.get("/versions/{ref}/thumbnails.png", response_class=Response)
    def thumbnails(ref: str, per_class: int = Query(6, ge=1, le=32)) -> Response:
        """A PNG grid of the first samples of each class, from the stored arrays."""
        from pipeline.ui.thumbnails import version_grid

        try:
            png = found(lambda: version_grid(get_store(), ref, per_class=per_class))
        except NoThumbnails as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        # Versions are immutable: the grid of one id never changes.
        return Response(
            png, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"}
        )

    return router

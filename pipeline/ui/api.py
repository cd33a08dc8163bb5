"""The JSON API behind the Datasets page (mounted under the plugin prefix, e.g. /laketrain/api).

Every route is read-only and reads the metadata store; only ``thumbnails.png`` reads the
stored arrays. The app's auth dependency guards the whole router. Parameters are bounded and
validated in ``params`` (a bad one is a 422 naming it); errors become JSON in ``errors``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request, Response

from pipeline.metadata.store import MetadataStore
from pipeline.ui import data, search
from pipeline.ui.errors import DamagedData
from pipeline.ui.params import DatasetPath, DatasetQuery, Offset, SearchQuery, VersionRef, limit
from pipeline.ui.thumbnails import NoThumbnails


def build_router(get_store: Callable[[], MetadataStore]) -> APIRouter:
    router = APIRouter()

    @router.get("/datasets")
    def datasets() -> dict[str, Any]:
        """Every dataset with its version count, newest committed version and rejected files."""
        items = data.list_datasets(get_store())
        return {"total": len(items), "items": items}

    @router.get("/datasets/{name:path}/rejected")
    def rejected(name: DatasetPath, limit: int = limit(100), offset: Offset = 0) -> dict[str, Any]:
        """The dataset's lake files that are in no version because they were rejected
        (invalid, unreadable, refused), with the reason, by path."""
        from pipeline.lake.rejected import rejected_files

        return rejected_files(name, limit=limit, offset=offset, store=get_store())

    @router.get("/versions")
    def versions(
        dataset: DatasetQuery = None, limit: int = limit(25), offset: Offset = 0
    ) -> dict[str, Any]:
        """Versions newest first, paginated, each with the runs that used it."""
        return data.list_versions(get_store(), dataset, limit=limit, offset=offset)

    @router.get("/versions/{ref}")
    def version(ref: VersionRef, dataset: DatasetQuery = None) -> dict[str, Any]:
        """One version by id, unique id prefix, tag, or ``latest`` (with ``?dataset=``)."""
        return data.get_version(get_store(), ref, dataset)

    @router.get("/versions/{ref}/invalid")
    def invalid(
        ref: VersionRef, dataset: DatasetQuery = None, limit: int = limit(100), offset: Offset = 0
    ) -> dict[str, Any]:
        """Files (or table lines) left out of the version, with the reason."""
        return data.invalid_files(get_store(), ref, dataset=dataset, limit=limit, offset=offset)

    @router.get("/versions/{a}/diff/{b}")
    def diff(
        a: VersionRef,
        b: VersionRef,
        dataset: DatasetQuery = None,
        limit: int = limit(100),
        offset: Offset = 0,
    ) -> dict[str, Any]:
        """Added / removed / changed paths from ``a`` to ``b``: all counts, one page of each."""
        return data.diff_versions(get_store(), a, b, dataset=dataset, limit=limit, offset=offset)

    @router.get("/contains")
    def contains(q: SearchQuery, limit: int = limit(200)) -> dict[str, Any]:
        """Which versions contain a file, by md5 or by lake path; and whether it was rejected."""
        return search.versions_containing(get_store(), q, limit=limit)

    @router.get("/versions/{ref}/thumbnails.png", response_class=Response)
    def thumbnails(
        request: Request,
        ref: VersionRef,
        dataset: DatasetQuery = None,
        per_class: int = Query(6, ge=1, le=32),
    ) -> Response:
        """A PNG grid of the first samples of each class, from the stored arrays. Damaged
        arrays: 500 with the message as JSON, or drawn in a PNG for an <img> (which asks for
        images, not JSON) so the page shows why instead of a broken image."""
        from pipeline.ui.thumbnails import message_png, version_grid

        try:
            png = version_grid(get_store(), ref, dataset=dataset, per_class=per_class)
        except NoThumbnails as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        except DamagedData as exc:
            accept = request.headers.get("accept", "")
            if "image/" in accept and "json" not in accept:
                return Response(
                    message_png(str(exc)),
                    status_code=500,
                    media_type="image/png",
                    headers={"Cache-Control": "no-store"},
                )
            raise
        # Versions are immutable: the grid of one id never changes; ``latest`` moves.
        moving = ref.strip() == "latest"
        cache = "private, no-cache" if moving else "private, max-age=3600"
        return Response(png, media_type="image/png", headers={"Cache-Control": cache})

    return router

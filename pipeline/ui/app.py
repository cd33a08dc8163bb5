"""The FastAPI app of the Datasets page: HTML pages at its root, the JSON API under /api.

It has no Airflow import: the plugin passes Airflow's auth dependency in, and that dependency
guards every route (pages, API, stylesheet). The interactive docs and the OpenAPI schema are
switched off — they would be public otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse, Response

from pipeline.metadata.store import MetadataStore
from pipeline.ui import errors, pages
from pipeline.ui.api import build_router
from pipeline.ui.quality import build_quality_router
from pipeline.ui.runs_api import build_runs_router
from pipeline.ui.runs_pages import add_run_routes

STATIC = Path(__file__).parent / "static"
STATIC_FILES = {"style.css": "text/css", "icon.svg": "image/svg+xml"}


def default_store() -> MetadataStore:
    """The settings' metadata store, opened on first use (never at import: Airflow's scheduler
    and workers import the plugin too, and have no business opening our store)."""
    from pipeline.metadata.store import open_store

    return open_store()


def create_app(
    auth: Callable[..., Any],
    *,
    get_store: Callable[[], MetadataStore] = default_store,
    editor: Callable[..., str] | None = None,
) -> FastAPI:
    """The app; ``auth`` is a FastAPI dependency that raises 401/403 for a bad caller.
    ``editor`` (optional) guards promotion: a dependency that raises 403 for a caller without
    edit rights and returns the caller's name; without it, promoting is refused."""
    app = FastAPI(
        title="laketrain datasets",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(auth)],
    )
    app.include_router(build_router(get_store), prefix="/api")
    app.include_router(build_runs_router(get_store, editor), prefix="/api")
    app.include_router(build_quality_router(get_store), prefix="/api")
    # Bad requests, unknown refs and damaged data: JSON under /api, an error page elsewhere.
    errors.install(app)

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        # A fixed list, not a folder mount: nothing else can be read through this route.
        if name not in STATIC_FILES:
            return JSONResponse({"detail": "not found"}, status_code=404)
        return Response(
            (STATIC / name).read_bytes(),
            media_type=STATIC_FILES[name],
            headers={"Cache-Control": "private, max-age=300"},
        )

    pages.add_routes(app, get_store)
    add_run_routes(app, get_store, editor)
    return app

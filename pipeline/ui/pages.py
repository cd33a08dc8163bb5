"""HTML pages of the Datasets view, rendered server-side with Jinja2.

Autoescape is on for every template, so any string that came from the lake (file names,
folder-derived class names, invalid-file reasons) renders as text, never as markup. Nothing on
the page loads from the internet: the chart is inline SVG, the stylesheet is served by the app.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from pipeline.metadata.store import MetadataStore
from pipeline.ui import data
from pipeline.ui.params import DatasetQuery, Page, RefQuery, SearchBox, VersionRef

TEMPLATES = Path(__file__).parent / "templates"
PAGE_SIZE = 25

_env = Environment(
    loader=FileSystemLoader(str(TEMPLATES)),
    autoescape=True,  # every template, whatever its file extension
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["short"] = lambda vid: (vid or "")[:12]
_env.filters["when"] = lambda iso: (iso or "")[:19].replace("T", " ")
_env.filters["metric"] = lambda x: (
    "" if x is None else (f"{x:.4f}" if isinstance(x, float) else str(x))
)
_env.filters["tojson_pretty"] = lambda obj: json.dumps(obj, indent=2, sort_keys=True)


def prefix(request: Request) -> str:
    """Where the app is mounted (e.g. /laketrain), for links that work inside the iframe."""
    return request.scope.get("root_path", "").rstrip("/")


def render(request: Request, template: str, *, status_code: int = 200, **ctx: Any) -> HTMLResponse:
    html = _env.get_template(template).render(prefix=prefix(request), **ctx)
    return HTMLResponse(html, status_code=status_code)


def bar_chart(classes: list[dict[str, Any]], *, width: int = 420, row: int = 22) -> dict[str, Any]:
    """Geometry of a horizontal stacked bar chart (train | val per class) for inline SVG."""
    top = max((c["total"] for c in classes), default=0) or 1
    bars = []
    for i, c in enumerate(classes):
        w_train = c["train"] / top * width
        w_val = c["val"] / top * width
        bars.append({**c, "y": i * row, "w_train": round(w_train, 1), "w_val": round(w_val, 1)})
    return {
        "bars": bars,
        "width": width,
        "height": max(1, len(classes)) * row,
        "row": row,
        "max": top,
    }


REJECTED_PAGE = 50


def add_routes(app: FastAPI, get_store: Callable[[], MetadataStore]) -> None:
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index(
        request: Request, dataset: DatasetQuery = None, page: Page = 1, rpage: Page = 1
    ) -> HTMLResponse:
        from pipeline.lake.rejected import rejected_files

        store = get_store()
        datasets = data.list_datasets(store)
        listing = data.list_versions(store, dataset, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
        pages = max(1, math.ceil(listing["total"] / PAGE_SIZE))
        # The dataset's page also lists its rejected lake files: they are in no version, so
        # no version page can show them.
        rejected = (
            rejected_files(
                dataset, limit=REJECTED_PAGE, offset=(rpage - 1) * REJECTED_PAGE, store=store
            )
            if dataset
            else None
        )
        rpages = max(1, math.ceil(rejected["total"] / REJECTED_PAGE)) if rejected else 1
        return render(
            request,
            "index.html",
            datasets=datasets,
            listing=listing,
            dataset=dataset or "",
            page=page,
            pages=pages,
            rejected=rejected,
            rpage=rpage,
            rpages=rpages,
        )

    @app.get("/versions/{ref}", response_class=HTMLResponse, include_in_schema=False)
    def version(request: Request, ref: VersionRef, dataset: DatasetQuery = None) -> HTMLResponse:
        from pipeline.ui.quality import quality_section

        v = data.get_version(get_store(), ref, dataset)
        q = quality_section(get_store(), v["version_id"])  # the Quality section (_quality.html)
        return render(request, "version.html", v=v, chart=bar_chart(v["classes"]), q=q)

    @app.get("/diff", response_class=HTMLResponse, include_in_schema=False)
    def diff(
        request: Request, a: RefQuery, b: RefQuery, dataset: DatasetQuery = None, page: Page = 1
    ) -> HTMLResponse:
        d = data.diff_versions(
            get_store(), a, b, dataset=dataset, limit=100, offset=(page - 1) * 100
        )
        most = max(d["counts"].values())
        pages = max(1, math.ceil(most / 100))
        return render(request, "diff.html", d=d, page=page, pages=pages)

    @app.get("/search", response_class=HTMLResponse, include_in_schema=False)
    def search(request: Request, q: SearchBox = "") -> HTMLResponse:
        from pipeline.ui.search import versions_containing

        result = versions_containing(get_store(), q) if q.strip() else None
        return render(request, "search.html", q=q, result=result)

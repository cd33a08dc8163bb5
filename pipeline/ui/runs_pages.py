"""HTML pages of the Runs view: the list (filters by dataset and status), one run (curves,
params, attempts, error, checkpoints, diagnosis, Airflow links) and two runs compared (both
curves on one chart, the params that differ, the data diff of their versions).

The charts are inline SVG drawn here (``pipeline.ui.charts``): nothing loads from the
internet. Rendering goes through ``pages.render`` (autoescape on: run ids, dag_run ids, params
and error texts render as text).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from urllib.parse import quote

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from pipeline.metadata.store import MetadataStore
from pipeline.ui import runs_data
from pipeline.ui.pages import _env, render
from pipeline.ui.params import DatasetQuery, Page
from pipeline.ui.runs_api import RunRef, RunRefQuery, StatusQuery, no_editor

PAGE_SIZE = 50


def duration(seconds: float | None) -> str:
    """``4.2 s``, ``3 min 05 s``, ``2 h 01 min``: what a person compares at a glance."""
    if seconds is None:
        return ""
    s = float(seconds)
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


_env.filters["duration"] = duration


def add_run_routes(
    app: FastAPI,
    get_store: Callable[[], MetadataStore],
    editor: Callable[..., str] | None = None,
) -> None:
    # A Depends() default, not an Annotated alias: annotations are strings here (future
    # import), resolved in the module globals, where this local alias is not.
    guard = Depends(editor or no_editor)

    @app.get("/runs", response_class=HTMLResponse, include_in_schema=False)
    def runs(
        request: Request, dataset: DatasetQuery = None, status: StatusQuery = None, page: Page = 1
    ) -> HTMLResponse:
        from pipeline.metadata.runs import RUN_STATUSES
        from pipeline.ui import data

        store = get_store()
        listing = runs_data.list_runs(
            store, dataset, status, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE
        )
        return render(
            request,
            "runs.html",
            listing=listing,
            datasets=[d["name"] for d in data.list_datasets(store)],
            statuses=RUN_STATUSES,
            dataset=dataset or "",
            status=status or "",
            page=page,
            pages=max(1, math.ceil(listing["total"] / PAGE_SIZE)),
        )

    # Before /runs/{ref}: "compare" is not a run.
    @app.get("/runs/compare", response_class=HTMLResponse, include_in_schema=False)
    def compare(request: Request, a: RunRefQuery, b: RunRefQuery) -> HTMLResponse:
        c = runs_data.compare_page(get_store(), a, b)
        return render(request, "run_compare.html", c=c)

    @app.get("/runs/{ref}", response_class=HTMLResponse, include_in_schema=False)
    def run(request: Request, ref: RunRef, promoted: bool = False) -> HTMLResponse:
        store = get_store()
        r = runs_data.run_page(store, ref)
        # The other runs of the dataset, to compare this one with (the newest 50).
        others = runs_data.list_runs(store, r["dataset"], None, limit=50, offset=0)["runs"]
        others = [o for o in others if o["run_id"] != r["run_id"]]
        return render(
            request,
            "run.html",
            r=r,
            others=others,
            can_promote=editor is not None,
            promoted=promoted,
        )

    @app.post("/runs/{ref}/promote", include_in_schema=False)
    def promote(request: Request, ref: RunRef, by: str = guard) -> RedirectResponse:
        done = runs_data.promote(get_store(), ref, by)
        root = request.scope.get("root_path", "").rstrip("/")
        # 303: the browser follows with a GET, so a reload does not promote again.
        return RedirectResponse(
            f"{root}/runs/{quote(done['run_id'], safe='')}?promoted=true", status_code=303
        )

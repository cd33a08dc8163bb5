"""The runs part of the JSON API (mounted under /laketrain/api with the datasets routes):
``runs``, ``runs/{ref}``, ``runs/{a}/compare/{b}``, ``models``, ``models/{dataset}/champion``
and ``POST runs/{ref}/promote``.

Reads need what every route needs (Airflow's login, the app's dependency). Promoting needs
more: the ``editor`` dependency the plugin passes in asks Airflow's auth manager for edit
rights and returns who is promoting (recorded on the promotion); without one, promotion is
refused (403), so an app built without it can never be used to promote.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import AfterValidator

from pipeline.metadata.store import MetadataStore
from pipeline.ui import runs_data
from pipeline.ui.params import DatasetPath, DatasetQuery, Offset, _no_nul, limit


def _status(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    from pipeline.metadata.runs import RUN_STATUSES

    if value not in RUN_STATUSES:
        raise ValueError(f"must be one of {', '.join(RUN_STATUSES)}, got {value!r}")
    return value


# A run_id is at most 255 characters (training_runs.run_id); a name or prefix is shorter.
RunRef = Annotated[str, Path(min_length=1, max_length=255), AfterValidator(_no_nul)]
RunRefQuery = Annotated[str, Query(min_length=1, max_length=255), AfterValidator(_no_nul)]
StatusQuery = Annotated[
    str | None, Query(max_length=16, description="run status"), AfterValidator(_status)
]


def no_editor() -> str:
    raise HTTPException(status_code=403, detail="promoting is not enabled in this app")


def build_runs_router(
    get_store: Callable[[], MetadataStore], editor: Callable[..., str] | None = None
) -> APIRouter:
    router = APIRouter()
    # A Depends() default, not an Annotated alias: annotations are strings here (future
    # import), resolved in the module globals, where this local alias is not.
    guard = Depends(editor or no_editor)

    @router.get("/runs")
    def runs(
        dataset: DatasetQuery = None,
        status: StatusQuery = None,
        limit: int = limit(50),
        offset: Offset = 0,
    ) -> dict[str, Any]:
        """Runs newest first, by dataset and status: readable name, version tag, status,
        best metric, duration, start."""
        return runs_data.list_runs(get_store(), dataset, status, limit=limit, offset=offset)

    @router.get("/runs/{a}/compare/{b}")
    def compare(a: RunRef, b: RunRef, limit: int = limit(20)) -> dict[str, Any]:
        """Two runs: the params that differ, the metrics side by side, the data diff of their
        versions (at most ``limit`` paths per list)."""
        return runs_data.compare(get_store(), a, b, limit=limit)

    @router.get("/runs/{ref}")
    def run(ref: RunRef) -> dict[str, Any]:
        """One run by RUN_ID, readable name or unique RUN_ID prefix: params, version,
        attempts, error, checkpoints, events, per-epoch metrics and the diagnosis."""
        return runs_data.get_run(get_store(), ref)

    @router.post("/runs/{ref}/promote")
    def promote(ref: RunRef, by: str = guard) -> dict[str, Any]:
        """Make the run its dataset's champion (needs edit rights in Airflow)."""
        return runs_data.promote(get_store(), ref, by)

    @router.get("/models")
    def models(dataset: DatasetQuery = None) -> dict[str, Any]:
        """The runs that produced models, with version, metric, best checkpoint, aliases."""
        return runs_data.models(get_store(), dataset)

    @router.get("/models/{dataset}/champion")
    def champion(dataset: DatasetPath) -> dict[str, Any]:
        """The dataset's champion: the run, who promoted it and when."""
        return runs_data.champion(get_store(), dataset)

    return router

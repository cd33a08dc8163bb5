"""The Airflow plugin: mounts the Datasets app in the api-server and adds "Datasets" and "Runs"
to the nav.

Found through the ``airflow.plugins`` entry point in pyproject.toml (no plugins folder). Every
Airflow process imports this module — the scheduler, the dag-processor and each task process
too — so it stays cheap: the app (FastAPI, Airflow's API security module, numpy, Pillow: ~0.9 s
of imports) is built only when something asks for ``fastapi_apps``, which is the api-server.
The metadata store is opened later still, by the first request.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/laketrain"
URL_ROUTE = "datasets"
RUNS_ROUTE = "runs"  # the Runs page: /plugin/runs inside the UI


@cache
def build_app() -> Any:
    """The one app of this process, guarded by Airflow's own dependency: the same login as the
    UI (the `_token` cookie the browser got at /auth/login, or `Authorization: Bearer <token>`
    from POST /auth/token). No token → 401, a bad one → 403."""
    from airflow.api_fastapi.core_api.security import requires_authenticated

    from pipeline.ui.app import create_app

    return create_app(requires_authenticated(), editor=asset_editor())


def asset_editor() -> Any:
    """The dependency that guards promotion: a champion alias moves the model asset
    (``laketrain://models/<dataset>``), so the caller needs Airflow's edit rights on assets
    (``is_authorized_asset(method="PUT")``; with the simple auth manager: role op or admin, a
    viewer gets 403). Returns the caller's name, which the promotion records."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import Depends, HTTPException

    # Depends() as a default, not an Annotated alias: this module's annotations are strings
    # (future import) and FastAPI resolves them in the module globals, where a local import
    # is not.
    def editor(user: Any = Depends(get_user)) -> str:  # noqa: B008
        if not get_auth_manager().is_authorized_asset(method="PUT", user=user):
            raise HTTPException(
                status_code=403,
                detail="promoting a model needs edit rights on assets in Airflow",
            )
        return str(user.get_name())

    return editor


class LaketrainPlugin(AirflowPlugin):
    name = "laketrain"
    # url_route makes the UI embed the page in an iframe under /plugin/datasets, keeping
    # Airflow's sidebar; without it the nav entry is a dead button. nav_top_level: with two
    # nav views the UI would fold both into a "Plugins" menu; each stays a link of its own.
    external_views = [
        {
            "name": "Datasets",
            "href": URL_PREFIX + "/",
            "destination": "nav",
            "url_route": URL_ROUTE,
            "nav_top_level": True,
            "icon": URL_PREFIX + "/static/icon.svg",
        },
        {
            "name": "Runs",
            "href": URL_PREFIX + "/runs",
            "destination": "nav",
            "url_route": RUNS_ROUTE,
            "nav_top_level": True,
            "icon": URL_PREFIX + "/static/icon.svg",
        },
    ]

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [{"app": build_app(), "url_prefix": URL_PREFIX, "name": "laketrain datasets"}]

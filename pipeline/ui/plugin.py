"""The Airflow plugin: mounts the Datasets app in the api-server and adds "Datasets" to the nav.

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


@cache
def build_app() -> Any:
    """The one app of this process, guarded by Airflow's own dependency: the same login as the
    UI (the `_token` cookie the browser got at /auth/login, or `Authorization: Bearer <token>`
    from POST /auth/token). No token → 401, a bad one → 403."""
    from airflow.api_fastapi.core_api.security import requires_authenticated

    from pipeline.ui.app import create_app

    return create_app(requires_authenticated())


class LaketrainPlugin(AirflowPlugin):
    name = "laketrain"
    # url_route makes the UI embed the page in an iframe under /plugin/datasets, keeping
    # Airflow's sidebar; without it the nav entry is a dead button.
    external_views = [
        {
            "name": "Datasets",
            "href": URL_PREFIX + "/",
            "destination": "nav",
            "url_route": URL_ROUTE,
            "icon": URL_PREFIX + "/static/icon.svg",
        }
    ]

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [{"app": build_app(), "url_prefix": URL_PREFIX, "name": "laketrain datasets"}]

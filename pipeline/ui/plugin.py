"""The Airflow plugin: mounts the Datasets app in the api-server and adds "Datasets" to the nav.

Found through the ``airflow.plugins`` entry point in pyproject.toml (no plugins folder). Every
Airflow process imports this module, so it only builds the app object; the metadata store is
opened by the first request.
"""

from __future__ import annotations

from airflow.api_fastapi.core_api.security import requires_authenticated
from airflow.plugins_manager import AirflowPlugin

from pipeline.ui.app import create_app

URL_PREFIX = "/laketrain"
URL_ROUTE = "datasets"

# Airflow's own dependency: the same login as the UI (the `_token` cookie the browser got at
# /auth/login, or `Authorization: Bearer <token>` from POST /auth/token). No token -> 401.
app = create_app(requires_authenticated())


class LaketrainPlugin(AirflowPlugin):
    name = "laketrain"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "laketrain datasets"}]
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

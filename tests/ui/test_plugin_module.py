"""The plugin module is imported by every Airflow process (scheduler, dag-processor, each task):
importing it must not build the app; asking for ``fastapi_apps`` builds one app, once, guarded
by Airflow's auth dependency. Run in a subprocess with its own AIRFLOW_HOME."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
import pipeline.ui.plugin as p
heavy = [m for m in ("pipeline.ui.app", "fastapi", "airflow.api_fastapi.core_api.security") if m in sys.modules]
plugin = p.LaketrainPlugin()
(entry,) = plugin.fastapi_apps
app = entry["app"]
deps = [d.dependency.__qualname__ for d in app.router.dependencies]
print(json.dumps({
    "heavy_at_import": heavy,
    "same_app": plugin.fastapi_apps[0]["app"] is app and p.LaketrainPlugin().fastapi_apps[0]["app"] is app,
    "prefix": entry["url_prefix"],
    "deps": deps,
    "docs": [app.docs_url, app.redoc_url, app.openapi_url],
    "views": plugin.external_views,
}))
"""


def test_import_is_light_and_the_app_is_built_once_with_airflow_auth(tmp_path):
    env = {
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PATH": "/usr/bin:/bin",
    }
    # airflow.plugins_manager first, as Airflow itself has it imported before loading plugins.
    code = "import airflow.plugins_manager\n" + SCRIPT
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["heavy_at_import"] == []
    assert got["same_app"] is True
    assert got["prefix"] == "/laketrain"
    assert got["deps"] == ["requires_authenticated.<locals>.inner"]
    assert got["docs"] == [None, None, None]
    assert [(v["name"], v["url_route"], v["href"]) for v in got["views"]] == [
        ("Datasets", "datasets", "/laketrain/"),
        ("Runs", "runs", "/laketrain/runs"),
    ]

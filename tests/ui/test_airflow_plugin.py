"""The plugin inside a real Airflow api-server: loaded from the entry point, guarded by
Airflow's own auth (401 without login, 403 with a forged token), no public docs, and the JSON
API answering over the versions the real pipeline built."""

from __future__ import annotations

import io

import httpx
import pytest
from PIL import Image

from tests.ui.lakedata import EVIL_LABEL, EVIL_PATH

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def api(ui_stack) -> httpx.Client:
    token = ui_stack.stack.token("viewer")  # reading needs no more than the viewer role
    with httpx.Client(
        base_url=ui_stack.stack.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as c:
        yield c


def test_plugin_is_loaded_from_the_entry_point_without_errors(api):
    plugins = {p["name"]: p for p in api.get("/api/v2/plugins").json()["plugins"]}
    lt = plugins["laketrain"]
    assert lt["fastapi_apps"] == [
        {
            "app": "fastapi.applications.FastAPI",
            "url_prefix": "/laketrain",
            "name": "laketrain datasets",
        }
    ]
    view = next(v for v in lt["external_views"] if v["name"] == "Datasets")
    assert (view["name"], view["href"], view["url_route"], view["destination"]) == (
        "Datasets",
        "/laketrain/",
        "datasets",
        "nav",
    )
    errors = api.get("/api/v2/plugins/importErrors").json()["import_errors"]
    assert [e for e in errors if "laketrain" in e["source"]] == []


def test_every_route_needs_the_airflow_login(ui_stack):
    v = ui_stack.built.v2["version_id"]
    paths = [
        "/laketrain/",
        f"/laketrain/versions/{v}",
        "/laketrain/search?q=x",
        "/laketrain/static/style.css",
        "/laketrain/api/datasets",
        "/laketrain/api/versions",
        f"/laketrain/api/versions/{v}",
        f"/laketrain/api/versions/{v}/diff/{v}",
        "/laketrain/api/contains?q=x",
        f"/laketrain/api/versions/{v}/thumbnails.png",
        "/laketrain/api/datasets/digits/rejected",
        "/laketrain/api/versions/latest/invalid?dataset=digits",
        "/laketrain/?dataset=..%2Fetc",
    ]
    forged = ui_stack.stack.token("admin")[:-4] + "AAAA"
    with httpx.Client(base_url=ui_stack.stack.url, timeout=60) as anon:
        for path in paths:
            assert anon.get(path).status_code == 401, path
            assert (
                anon.get(path, headers={"Authorization": f"Bearer {forged}"}).status_code == 403
            ), path
        # The browser's login cookie is the same credential.
        anon.cookies.set("_token", ui_stack.stack.token("admin"))
        assert anon.get("/laketrain/api/versions").status_code == 200


def test_docs_and_openapi_are_not_served(api):
    for path in ("/laketrain/docs", "/laketrain/redoc", "/laketrain/openapi.json"):
        assert api.get(path).status_code == 404, path


def test_json_api_over_built_versions(api, ui_stack):
    b = ui_stack.built
    v1, v2 = b.v1["version_id"], b.v2["version_id"]
    datasets = api.get("/laketrain/api/datasets").json()["items"]
    assert [(d["name"], d["versions"], d["latest"]["version_id"]) for d in datasets] == [
        ("digits", 2, v2)
    ]
    listing = api.get("/laketrain/api/versions", params={"dataset": "digits", "limit": 1}).json()
    assert (listing["total"], [i["version_id"] for i in listing["items"]]) == (2, [v2])
    assert api.get("/laketrain/api/versions", params={"limit": 0}).status_code == 422
    detail = api.get(f"/laketrain/api/versions/{v2[:10]}").json()
    assert detail["version_id"] == v2 and detail["parent"]["version_id"] == v1
    assert (
        detail["samples"] == b.v2["samples"]
        and detail["train"] + detail["val"] == detail["samples"]
    )
    diff = api.get(f"/laketrain/api/versions/{b.v1['tag']}/diff/{v2}").json()
    assert diff["counts"] == {"added": len(b.added), "removed": len(b.removed), "changed": 1}
    found = api.get("/laketrain/api/contains", params={"q": EVIL_PATH}).json()["matches"]
    assert [(m["version_id"], m["label"]) for m in found] == [(v2, EVIL_LABEL)]
    assert api.get("/laketrain/api/versions/deadbeef00").status_code == 404
    png = api.get(f"/laketrain/api/versions/{v2}/thumbnails.png")
    assert png.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(png.content)).size[0] > 0
    # Behind Airflow's mount too: latest?dataset= on thumbnails, bounds and names as 4xx JSON,
    # the rejected file of v2 listed (the mount's root_path must not break the /api/ check).
    latest = api.get("/laketrain/api/versions/latest/thumbnails.png", params={"dataset": "digits"})
    assert latest.status_code == 200 and latest.content == png.content
    huge = api.get("/laketrain/api/versions", params={"offset": str(2**63)})
    assert huge.status_code == 422 and huge.json()["detail"].startswith("offset: ")
    bad = api.get("/laketrain/api/versions", params={"dataset": "../etc"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("dataset: ")
    page = api.get("/laketrain/", params={"page": str(2**63)})
    assert page.status_code == 422 and "page: " in page.text and 'role="search"' in page.text
    rejected = api.get("/laketrain/api/datasets/digits/rejected").json()
    assert [f["path"] for f in rejected["items"]] == [b.invalid]

"""The Runs pages and API inside a real Airflow api-server: the same login as the rest of the
UI (401 without a token, 403 with a forged one), readable by a viewer, and promotion asks
Airflow's auth manager for edit rights: the viewer gets 403 and nothing moves, the admin
promotes and the promotion records the admin's name."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.slow

RUN = "train-manual__promote-me"


@pytest.fixture(scope="module")
def recorded(ui_stack) -> str:
    """A succeeded run with a checkpoint on v2, recorded in the stack's store."""
    from pipeline.metadata.store import MetadataStore
    from pipeline.runs import record_checkpoint, record_run_finished, record_run_started

    store = MetadataStore(ui_stack.store_url)
    try:
        vid = ui_stack.built.v2["version_id"]
        record_run_started(RUN, "digits", vid, {"lr": 0.1}, launcher="local", store=store)
        url = (ui_stack.home / "objects" / RUN / "step-5").as_uri()
        record_checkpoint(RUN, 5, 1, url, metric=0.5, is_best=True, store=store)
        record_run_finished(
            RUN,
            "succeeded",
            best_metric=0.5,
            metric_name="val_accuracy",
            checkpoint_url=url,
            store=store,
        )
    finally:
        store.dispose()
    return RUN


def _client(ui_stack, user: str) -> httpx.Client:
    token = ui_stack.stack.token(user)
    return httpx.Client(
        base_url=ui_stack.stack.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


def test_the_runs_view_is_in_the_nav(ui_stack):
    with _client(ui_stack, "viewer") as api:
        plugins = {p["name"]: p for p in api.get("/api/v2/plugins").json()["plugins"]}
    views = [(v["name"], v["href"], v["url_route"]) for v in plugins["laketrain"]["external_views"]]
    assert ("Runs", "/laketrain/runs", "runs") in views


def test_every_runs_route_needs_the_airflow_login(ui_stack, recorded):
    paths = [
        "/laketrain/runs",
        f"/laketrain/runs/{recorded}",
        f"/laketrain/runs/compare?a={recorded}&b={recorded}",
        "/laketrain/api/runs",
        f"/laketrain/api/runs/{recorded}",
        f"/laketrain/api/runs/{recorded}/compare/{recorded}",
        "/laketrain/api/models",
        "/laketrain/api/models/digits/champion",
    ]
    forged = ui_stack.stack.token("admin")[:-4] + "AAAA"
    with httpx.Client(base_url=ui_stack.stack.url, timeout=60) as anon:
        for path in paths:
            assert anon.get(path).status_code == 401, path
            assert anon.get(path, headers={"Authorization": f"Bearer {forged}"}).status_code == 403
        assert anon.post(f"/laketrain/api/runs/{recorded}/promote").status_code == 401
    with _client(ui_stack, "viewer") as viewer:
        listing = viewer.get("/laketrain/api/runs", params={"status": "succeeded"}).json()
        assert recorded in {r["run_id"] for r in listing["runs"]}
        page = viewer.get(f"/laketrain/runs/{recorded}")
        assert page.status_code == 200 and 'class="chart line-chart chart-loss"' in page.text


def test_promote_needs_edit_rights_viewer_403_admin_recorded(ui_stack, recorded):
    with _client(ui_stack, "viewer") as viewer:
        refused = viewer.post(f"/laketrain/api/runs/{recorded}/promote")
        assert refused.status_code == 403, refused.text
        assert "edit rights" in refused.json()["detail"]
        assert viewer.get("/laketrain/api/models/digits/champion").status_code == 404
        # The page's form posts to a route with the same guard.
        assert viewer.post(f"/laketrain/runs/{recorded}/promote").status_code == 403
    with _client(ui_stack, "admin") as admin:
        done = admin.post(f"/laketrain/api/runs/{recorded}/promote")
        assert done.status_code == 200, done.text
        champ = admin.get("/laketrain/api/models/digits/champion").json()
        assert (champ["run_id"], champ["by"]) == (recorded, "admin")

"""The API on versions built by the real pipeline (scan → build), on SQLite and PostgreSQL:
diff by path, contains, invalid files, runs with their best metric, and thumbnails drawn from
the stored arrays. Auth is a stand-in here; test_airflow_plugin.py checks Airflow's own."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from pipeline.ui import thumbnails
from pipeline.ui.app import create_app
from tests.ui.lakedata import EVIL_LABEL, EVIL_PATH, build_two_versions


@pytest.fixture
def built(store, lt_env, monkeypatch):
    from tests.ui.lakedata import REPO

    monkeypatch.setenv("RECIPES_DIR", str(REPO / "recipes"))
    from pipeline.settings import get_settings

    get_settings.cache_clear()
    return build_two_versions(lt_env / "lake", store)


@pytest.fixture
def client(store, built) -> TestClient:
    return TestClient(create_app(lambda: None, get_store=lambda: store))


def test_diff_contains_and_invalid_files_of_real_versions(client, built, lt_env):
    v1, v2 = built.v1["version_id"], built.v2["version_id"]
    d = client.get(f"/api/versions/{v1}/diff/{v2}").json()
    assert [r["path"] for r in d["added"]] == sorted(built.added)
    assert [r["path"] for r in d["removed"]] == sorted(built.removed)
    assert [r["path"] for r in d["changed"]] == [built.changed]
    old_md5 = d["changed"][0]["old_md5"]
    assert (
        d["changed"][0]["md5"]
        == hashlib.md5((lt_env / "lake" / built.changed).read_bytes()).hexdigest()
    )

    listing = client.get("/api/versions", params={"dataset": "digits"}).json()
    assert [v["version_id"] for v in listing["items"]] == [v2, v1]
    assert listing["items"][0]["added"] == len(built.added) and listing["items"][0]["removed"] == 2

    # The rewritten file's old content is only in v1; its path is in both.
    assert [
        m["version_id"]
        for m in client.get("/api/contains", params={"q": old_md5}).json()["matches"]
    ] == [v1]
    by_path = client.get("/api/contains", params={"q": built.changed}).json()["matches"]
    assert [m["version_id"] for m in by_path] == [v2, v1]
    evil = client.get("/api/contains", params={"q": EVIL_PATH}).json()["matches"]
    assert [(m["version_id"], m["label"]) for m in evil] == [(v2, EVIL_LABEL)]

    page = client.get(f"/api/versions/{v2}").json()
    assert page["parent"]["version_id"] == v1
    assert [f["path"] for f in page["invalid_files"]["items"]] == [built.invalid]
    assert page["invalid_files"]["items"][0]["reason"]
    assert {c["label"] for c in page["classes"]} == {str(i) for i in range(10)} | {EVIL_LABEL}
    assert sum(c["total"] for c in page["classes"]) == page["samples"]

    html = client.get(f"/versions/{v2}").text
    assert "&lt;script&gt;alert(1)&lt;" in html and "<script>" not in html
    assert built.invalid in html


def test_runs_of_a_version_show_with_their_best_metric(client, built, store):
    from pipeline.runs import record_run_finished, record_run_started

    v2 = built.v2["version_id"]
    for run_id, acc in [("train__a", 0.71), ("train__b", 0.93)]:
        record_run_started(
            run_id, "digits", v2, {"epochs": 1}, dag_id="train", dag_run_id=run_id, store=store
        )
        record_run_finished(
            run_id, "succeeded", best_metric=acc, metric_name="val_accuracy", store=store
        )
    record_run_started(
        "train__c", "digits", v2, {"epochs": 1}, dag_id="train", dag_run_id="train__c", store=store
    )

    item = client.get("/api/versions", params={"dataset": "digits", "limit": 1}).json()["items"][0]
    assert item["version_id"] == v2
    assert {r["run_id"]: r["status"] for r in item["runs"]} == {
        "train__a": "succeeded",
        "train__b": "succeeded",
        "train__c": "running",
    }
    assert item["best_metric"] == {
        "run_id": "train__b",
        "value": 0.93,
        "metric_name": "val_accuracy",
    }
    older = client.get("/api/versions", params={"dataset": "digits", "offset": 1}).json()["items"][
        0
    ]
    assert older["runs"] == [] and older["best_metric"] is None
    page = client.get(f"/api/versions/{v2}").json()
    assert {r["run_id"] for r in page["runs"]} == {"train__a", "train__b", "train__c"}
    html = client.get("/").text
    assert "train__b" in html and "val_accuracy 0.9300" in html


def test_thumbnails_are_the_stored_arrays(client, built, store):
    from pipeline.datasets.reader import open_version

    v2 = built.v2["version_id"]
    r = client.get(f"/api/versions/{v2}/thumbnails.png", params={"per_class": 3})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    grid = np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"))
    reader = open_version("digits", v2, store=store)
    labels = reader.labels()
    classes = reader.classes
    # Rows are the classes in label order; cell (row 0, col 0) is the first sample of class "0".
    first = int(np.flatnonzero(labels == classes.index(sorted(classes)[0]))[0])
    x, _ = reader[first]
    expected = np.asarray(thumbnails.fit(thumbnails.to_image(np.asarray(x)), thumbnails.CELL))
    top, left = thumbnails.PAD, thumbnails.LABEL_W + thumbnails.PAD
    h, w = expected.shape[:2]
    oy, ox = (thumbnails.CELL - h) // 2, (thumbnails.CELL - w) // 2
    assert np.array_equal(grid[top + oy : top + oy + h, left + ox : left + ox + w], expected)
    n_rows = (grid.shape[0] - thumbnails.PAD) // (thumbnails.CELL + thumbnails.PAD)
    assert n_rows == len(classes)
    assert client.get("/api/versions/0000000000/thumbnails.png").status_code == 404

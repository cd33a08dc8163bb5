"""The Runs pages and their JSON API over REAL runs: two versions of digits built by the real
pipeline, a `python -m training` run on each (recording into the store, writing metrics.jsonl,
diagnosis.json and checkpoints), and a failed run retried once. The app is the real one with a
stand-in auth dependency (Airflow's own login is tested against a running api-server in
test_runs_airflow.py); the charts are checked as SVG, the pages by their content.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest
from fastapi import Header, HTTPException
from fastapi.testclient import TestClient

from pipeline.ui.app import create_app
from tests.ui.lakedata import Built, build_two_versions, lake_env
from tests.ui.runs_support import train_run

SVG = "{http://www.w3.org/2000/svg}"
DAG_RUN_A = "manual__2026-12-01T07:22:34.088447+00:00_hXsUOZOp"


@dataclass
class Runs:
    built: Built
    store: object
    a: str  # on v1, started by "Airflow" (AIRFLOW_CTX_*), lr 0.05
    b: str  # on v2, lr 0.01
    failed: str  # on v2, two attempts, the second one failed with an error text


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    from pipeline.metadata.store import MetadataStore
    from pipeline.runs import record_run_finished, record_run_started
    from pipeline.settings import get_settings

    home = tmp_path_factory.mktemp("runs_home")
    (home / "lake").mkdir()
    url = f"sqlite:///{home / 'metadata.db'}"
    env = lake_env(home)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {**env, "METADATA_DB_URL": url}.items():
            mp.setenv(k, v)
        get_settings.cache_clear()
        store = MetadataStore(url)
        built = build_two_versions(home / "lake", store)
        a, b, failed = "train-" + DAG_RUN_A.replace(":", "-").replace("+", "-"), "run-b", "run-oom"
        train_run(env, url, a, built.v1["version_id"], dag_run_id=DAG_RUN_A, lr=0.05)
        train_run(env, url, b, built.v2["version_id"], lr=0.01)
        vid = built.v2["version_id"]
        record_run_started(failed, "digits", vid, {"lr": 0.1}, launcher="local", store=store)
        record_run_finished(failed, "preempted", exit_code=75, store=store)
        record_run_started(failed, "digits", vid, {"lr": 0.1}, launcher="local", store=store)
        record_run_finished(
            failed,
            "failed",
            error="RuntimeError: <b>CUDA</b> out of memory",
            exit_code=1,
            store=store,
        )
        yield Runs(built, store, a, b, failed)
        store.dispose()
    get_settings.cache_clear()


def _editor(x_test_user: str | None = Header(default=None)) -> str:
    """Stand-in for the plugin's Airflow check: only "admin" may edit."""
    if x_test_user != "admin":
        raise HTTPException(status_code=403, detail="promoting a model needs edit rights")
    return x_test_user


@pytest.fixture(scope="module")
def client(runs: Runs) -> TestClient:
    return TestClient(create_app(lambda: None, get_store=lambda: runs.store, editor=_editor))


def _svg(html: str, css_class: str) -> ET.Element:
    m = re.search(rf'<svg class="chart line-chart {css_class}".*?</svg>', html, re.S)
    assert m, f"no {css_class} chart on the page"
    return ET.fromstring(m.group(0))


def _series(svg: ET.Element) -> dict[str, list[str]]:
    return {
        g.get("data-series"): [p.get("d") for p in g.findall(f"{SVG}path")]
        for g in svg.findall(f"{SVG}g[@class='series']")
    }


def test_runs_list_filters_by_dataset_and_status(client, runs):
    body = client.get("/api/runs").json()
    assert body["total"] == 3
    assert {r["run_id"] for r in body["runs"]} == {runs.a, runs.b, runs.failed}
    ok = client.get("/api/runs", params={"status": "succeeded"}).json()
    assert {r["run_id"] for r in ok["runs"]} == {runs.a, runs.b}
    bad = client.get("/api/runs", params={"status": "failed", "dataset": "digits"}).json()
    assert [r["run_id"] for r in bad["runs"]] == [runs.failed]
    assert client.get("/api/runs", params={"dataset": "other"}).json()["total"] == 0
    wrong = client.get("/api/runs", params={"status": "done"})
    assert wrong.status_code == 422 and wrong.json()["detail"].startswith("status: ")
    # The page: readable names link to the run pages, the filters keep their choice.
    page = client.get("/runs", params={"status": "succeeded"}).text
    name_a = client.get(f"/api/runs/{runs.a}").json()["name"]
    assert re.fullmatch(r"digits-[0-9a-f]{8}-1", name_a)
    assert f'href="/runs/{runs.a}">{name_a}</a>' in page
    assert runs.failed not in page
    assert '<option value="succeeded" selected>' in page
    assert DAG_RUN_A in page  # the dag_run id beside the readable name


def test_run_page_draws_loss_lr_and_accuracy_from_metrics_jsonl(client, runs):
    r = client.get(f"/api/runs/{runs.a}").json()
    epochs = r["metrics"]["epochs"]
    assert len(epochs) == 3 and r["metrics"]["error"] is None
    html = client.get(f"/runs/{runs.a}").text
    loss = _series(_svg(html, "chart-loss"))
    assert set(loss) == {"train loss (step)", "train loss", "val loss"}
    assert all(d and d[0].startswith("M") for d in loss.values())
    # One marker per epoch on the val series.
    val = _svg(html, "chart-loss").find(f"{SVG}g[@data-series='val loss']")
    assert len(val.findall(f"{SVG}circle")) == 3
    lr = _series(_svg(html, "chart-learning-rate"))
    assert list(lr) == ["lr"] and lr["lr"][0].count("L") >= 2
    acc = _series(_svg(html, "chart-accuracy"))
    assert set(acc) == {"train accuracy", "val accuracy"}
    # The per-epoch table, the checkpoints with URLs, the params and the diagnosis section.
    assert html.count('<tr><td class="num">') >= 3
    for c in r["checkpoints"]:
        assert c["url"] in html
    assert '<td class="mono">lr</td><td class="mono">0.05</td>' in html
    assert "Diagnosis" in html and ("no findings" in html or 'class="finding' in html)


def test_run_page_links_to_airflow_and_to_its_version(client, runs):
    html = client.get(f"/runs/{runs.a}").text
    dag_run = "/dags/train/runs/" + DAG_RUN_A.replace(":", "%3A").replace("+", "%2B")
    assert f'href="{dag_run}" target="_top">DAG run</a>' in html
    assert f'href="{dag_run}/tasks/launch" target="_top">trainer log' in html
    assert f'href="/versions/{runs.built.v1["version_id"]}">{runs.built.v1["tag"]}</a>' in html
    # A run Airflow did not start has no Airflow links.
    assert "DAG run</a>" not in client.get(f"/runs/{runs.b}").text


def test_the_diagnosis_lines_the_trainer_wrote_are_on_the_page(client, runs):
    """The findings come from diagnosis.json beside the checkpoints: rewrite it with a finding
    and the page shows it (the trainer's own file, read back, not recomputed)."""
    import json

    from pipeline.storage import store_for

    r = client.get(f"/api/runs/{runs.b}").json()
    url = r["run_url"] + "/diagnosis.json"
    objects = store_for(url)
    original = objects.read_bytes(url)
    finding = {
        "rule": "plateau",
        "severity": "warning",
        "message": "train loss stopped improving <at> 0.9",
        "step": 10,
        "epoch": 1,
    }
    objects.write_bytes(url, json.dumps({"findings": [finding], "text": ""}).encode())
    try:
        html = client.get(f"/runs/{runs.b}").text
        assert "[warning] plateau</b>: train loss stopped improving &lt;at&gt; 0.9" in html
    finally:
        objects.write_bytes(url, original)


def test_failed_run_shows_its_error_and_both_attempts(client, runs):
    r = client.get(f"/api/runs/{runs.failed}").json()
    assert r["attempts"] == 2 and [a["exit_code"] for a in r["attempt_log"]] == [75, 1]
    html = client.get(f"/runs/{runs.failed}").text
    assert (
        '<pre class="run-error">RuntimeError: &lt;b&gt;CUDA&lt;/b&gt; out of memory</pre>' in html
    )
    assert 'Attempts <span class="muted">(2)</span>' in html
    # No metrics were written: the page says so and still renders empty charts.
    assert "does not exist" in html and "no data" in html


def test_a_run_is_found_by_its_readable_name_and_unknown_runs_are_404(client, runs):
    name = client.get(f"/api/runs/{runs.b}").json()["name"]
    assert client.get(f"/api/runs/{name}").json()["run_id"] == runs.b
    assert client.get(f"/runs/{name}").status_code == 200
    missing = client.get("/api/runs/nope-nope")
    assert missing.status_code == 404 and "nope-nope" in missing.json()["detail"]
    page = client.get("/runs/nope-nope")
    assert page.status_code == 404 and 'role="search"' in page.text


def test_compare_shows_both_curves_on_one_chart_and_the_data_diff(client, runs):
    b = runs.built
    api = client.get(f"/api/runs/{runs.a}/compare/{runs.b}").json()
    assert {"name": "lr", "a": 0.05, "b": 0.01} in api["params"]
    assert api["data"]["diff"]["counts"] == {
        "added": len(b.added),
        "removed": len(b.removed),
        "changed": 1,
    }
    html = client.get("/runs/compare", params={"a": runs.a, "b": runs.b}).text
    na = client.get(f"/api/runs/{runs.a}").json()["name"]
    nb = client.get(f"/api/runs/{runs.b}").json()["name"]
    loss = _series(_svg(html, "chart-loss"))
    assert set(loss) == {
        f"A {na} train loss",
        f"B {nb} train loss",
        f"A {na} val loss",
        f"B {nb} val loss",
    }
    acc = _series(_svg(html, "chart-accuracy"))
    assert set(acc) == {f"A {na} val accuracy", f"B {nb} val accuracy"}
    assert f'+{len(b.added)} added</span> · <span class="removed">−{len(b.removed)} removed' in html
    assert f'href="/diff?a={b.v1["version_id"]}&amp;b={b.v2["version_id"]}">the full diff' in html
    # The hostile class name of v2 is text in the class-count table.
    assert "&lt;script&gt;alert(1)&lt;" in html and "<script>alert(1)<" not in html
    same = client.get("/runs/compare", params={"a": runs.b, "b": runs.failed}).text
    assert "Both runs trained on the same version" in same
    assert client.get("/api/runs/run-b/compare/run-b").status_code == 400


def test_version_page_links_each_of_its_runs(client, runs):
    html = client.get(f"/versions/{runs.built.v1['version_id']}").text
    name = client.get(f"/api/runs/{runs.a}").json()["name"]
    assert f'<a class="run-page" href="/runs/{runs.a}">{name}</a>' in html


def test_models_and_champion_and_promote_needs_edit_rights(client, runs):
    models = client.get("/api/models", params={"dataset": "digits"}).json()
    assert {m["run_id"] for m in models["models"]} == {runs.a, runs.b}
    assert client.get("/api/models/digits/champion").status_code == 404
    # A read-only caller is refused, and nothing moved.
    assert client.post(f"/api/runs/{runs.b}/promote").status_code == 403
    assert client.get("/api/models/digits/champion").status_code == 404
    # A failed run is no model.
    bad = client.post(f"/api/runs/{runs.failed}/promote", headers={"X-Test-User": "admin"})
    assert bad.status_code == 400 and "succeeded" in bad.json()["detail"]
    # The page's form: POST, then 303 back to the run page, which shows the badge.
    done = client.post(
        f"/runs/{runs.b}/promote", headers={"X-Test-User": "admin"}, follow_redirects=False
    )
    assert done.status_code == 303 and done.headers["location"] == f"/runs/{runs.b}?promoted=true"
    champ = client.get("/api/models/digits/champion").json()
    assert (champ["run_id"], champ["by"]) == (runs.b, "admin")
    assert 'class="pill champion">champion' in client.get(f"/runs/{runs.b}").text


def test_an_app_without_an_editor_never_promotes(runs):
    plain = TestClient(create_app(lambda: None, get_store=lambda: runs.store))
    assert plain.post(f"/api/runs/{runs.a}/promote").status_code == 403
    assert "Promote to champion" not in plain.get(f"/runs/{runs.a}").text


def test_run_pages_need_the_apps_auth():
    def deny() -> None:
        raise HTTPException(status_code=401, detail="not authenticated")

    guarded = TestClient(create_app(deny, get_store=lambda: None))
    for path in (
        "/runs",
        "/runs/x",
        "/runs/compare?a=x&b=y",
        "/api/runs",
        "/api/runs/x",
        "/api/runs/x/compare/y",
        "/api/models",
        "/api/models/digits/champion",
    ):
        assert guarded.get(path).status_code == 401, path
    assert guarded.post("/api/runs/x/promote").status_code == 401


def test_run_ids_are_bounded_and_named_in_errors(client):
    long = "x" * 256
    r = client.get(f"/api/runs/{long}")
    assert r.status_code == 422 and r.json()["detail"].startswith("ref: ")
    assert client.get("/runs/compare", params={"a": "x"}).status_code == 422

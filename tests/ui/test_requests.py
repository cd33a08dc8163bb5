"""Wrong requests to the Datasets app get a 4xx naming the parameter (JSON under /api, an error
page inside the layout elsewhere); ``latest?dataset=`` works on every route that takes a version
ref; a version with no classes is not offered for training. Both store backends, synthetic
version rows (tests/ui/synth.py)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from pipeline.ui.app import create_app
from tests.ui.synth import SynthVersion, add_versions, md5_of, three_versions

HUGE = str(2**63)


@pytest.fixture
def versions(store):
    vs = three_versions()
    add_versions(store, vs)
    return vs


@pytest.fixture
def client(store, versions) -> TestClient:
    return TestClient(create_app(lambda: None, get_store=lambda: store))


def _is_error_page(r, status: int) -> bool:
    """An HTML page of the app's own layout (header and search box), not a bare JSON body."""
    return (
        r.status_code == status
        and r.headers["content-type"].startswith("text/html")
        and 'role="search"' in r.text
    )


def test_integers_past_their_bound_are_a_422_naming_the_parameter(client, versions):
    v = versions[1].version_id
    api = [
        ("/api/versions", {"offset": HUGE}, "offset"),
        ("/api/versions", {"limit": HUGE}, "limit"),
        (f"/api/versions/{v}/invalid", {"offset": HUGE}, "offset"),
        (f"/api/versions/{v}/diff/{v}", {"offset": HUGE}, "offset"),
        (f"/api/versions/{v}/diff/{v}", {"limit": "-1"}, "limit"),
        ("/api/datasets/pets/rejected", {"offset": HUGE}, "offset"),
        (f"/api/versions/{v}/thumbnails.png", {"per_class": HUGE}, "per_class"),
        ("/api/contains", {"q": "x", "limit": HUGE}, "limit"),
    ]
    for path, params, name in api:
        r = client.get(path, params=params)
        assert r.status_code == 422, (path, params, r.text)
        body = r.json()
        assert body["detail"].startswith(f"{name}: "), body
        assert [e["parameter"] for e in body["errors"]] == [name]
    pages = [
        ("/", {"page": HUGE}, "page"),
        ("/", {"dataset": "pets", "rpage": HUGE}, "rpage"),
        ("/diff", {"a": v, "b": v, "page": HUGE}, "page"),
        ("/diff", {"a": v, "page": "1"}, "b"),  # a missing parameter is named too
        ("/", {"page": "abc"}, "page"),
    ]
    for path, params, name in pages:
        r = client.get(path, params=params)
        assert _is_error_page(r, 422), (path, params, r.status_code, r.text[:300])
        assert f"{name}: " in r.text and "Bad request" in r.text


def test_the_last_page_within_bounds_is_an_empty_page_not_an_error(client):
    from pipeline.ui.params import MAX_OFFSET, MAX_PAGE

    body = client.get("/api/versions", params={"offset": MAX_OFFSET}).json()
    assert body["total"] == 3 and body["items"] == []
    assert client.get("/", params={"page": MAX_PAGE}).status_code == 200


def test_latest_with_a_dataset_works_on_invalid_files_and_diff(client, versions):
    v1, v2, v3 = versions
    invalid = client.get("/api/versions/latest/invalid", params={"dataset": "pets"})
    assert invalid.status_code == 200, invalid.text
    assert invalid.json()["total"] == len(v3.invalid)
    inv2 = client.get(f"/api/versions/{v2.tag}/invalid", params={"dataset": "pets"}).json()
    assert inv2["total"] == 1

    d = client.get(f"/api/versions/{v1.version_id}/diff/latest", params={"dataset": "pets"})
    assert d.status_code == 200, d.text
    assert d.json()["b"]["version_id"] == v3.version_id
    assert d.json()["counts"]["added"] == len(v3.files.keys() - v1.files.keys())
    # The other end names the dataset: ``diff <id> latest`` needs no ?dataset=.
    inferred = client.get(f"/api/versions/latest/diff/{v1.version_id}").json()
    assert inferred["a"]["version_id"] == v3.version_id
    # Both ends ``latest``: the dataset cannot be guessed, and the message says what to add.
    both = client.get("/api/versions/latest/diff/latest")
    assert both.status_code == 400 and "?dataset=" in both.json()["detail"]

    page = client.get("/diff", params={"a": v1.version_id, "b": "latest", "dataset": "pets"})
    assert page.status_code == 200 and v3.tag in page.text
    assert v3.tag in client.get("/versions/latest", params={"dataset": "pets"}).text
    # A dataset with no versions: latest is not found (404), named.
    none = client.get("/api/versions/latest/invalid", params={"dataset": "cats"})
    assert none.status_code == 404 and "cats" in none.json()["detail"]


def test_latest_of_another_dataset_is_not_this_one(store, client, versions):
    other = SynthVersion("birds", {"birds/a/1.png": (md5_of("b1"), "a")})
    add_versions(store, [other])
    d = client.get("/api/versions/latest/diff/latest", params={"dataset": "birds"}).json()
    assert d["a"]["version_id"] == d["b"]["version_id"] == other.version_id
    # A ref of pets scoped to birds matches nothing.
    r = client.get(f"/api/versions/{versions[0].version_id}/invalid", params={"dataset": "birds"})
    assert r.status_code == 404


BAD_NAMES = ["../etc", "a/b", "..", ".hidden", "_private", "x\x00y"]


def test_bad_dataset_names_are_refused_for_their_name_on_every_route(client, versions):
    v = versions[0].version_id
    for name in BAD_NAMES:
        api = [
            ("/api/versions", {"dataset": name}),
            ("/api/versions/latest", {"dataset": name}),
            (f"/api/versions/{v}", {"dataset": name}),
            ("/api/versions/latest/invalid", {"dataset": name}),
            (f"/api/versions/{v}/diff/latest", {"dataset": name}),
            ("/api/versions/latest/thumbnails.png", {"dataset": name}),
        ]
        for path, params in api:
            r = client.get(path, params=params)
            assert r.status_code == 422, (path, name, r.text)
            assert r.json()["detail"].startswith("dataset: dataset name "), r.json()
        for path, params in [
            ("/", {"dataset": name}),
            ("/versions/latest", {"dataset": name}),
            ("/diff", {"a": v, "b": "latest", "dataset": name}),
        ]:
            r = client.get(path, params=params)
            assert _is_error_page(r, 422), (path, name, r.status_code)
            assert "dataset: dataset name" in r.text
    # In the path of the rejected-files route: ``a/b`` reaches the check instead of a bare 404.
    for raw in ["a/b", "..%2Fetc", ".hidden", "_x"]:
        r = client.get(f"/api/datasets/{raw}/rejected")
        assert r.status_code == 422, (raw, r.text)
        assert r.json()["detail"].startswith("name: dataset name "), r.json()


def test_nul_in_a_ref_or_a_search_is_a_422_not_a_database_error(client):
    # PostgreSQL refuses NUL in a string literal: it used to surface as a 500.
    for path, params, name in [
        ("/api/versions/a%00b", {}, "ref"),
        ("/api/versions/a%00b/invalid", {}, "ref"),
        ("/api/contains", {"q": "pets/\x00.png"}, "q"),
    ]:
        r = client.get(path, params=params)
        assert r.status_code == 422, (path, r.text)
        assert r.json()["detail"].startswith(f"{name}: ")
    r = client.get("/search", params={"q": "x\x00"})
    assert _is_error_page(r, 422) and "q: must not contain a NUL" in r.text


def _set_manifest(store, version_id: str, **changes) -> None:
    from pipeline.metadata.datasets import DatasetVersion

    with store.session() as s:
        row = s.get(DatasetVersion, version_id)
        row.manifest = json.dumps({**json.loads(row.manifest), **changes})


def test_a_version_without_classes_is_not_offered_for_training(store, client, versions):
    flat = SynthVersion(
        "photos", {"photos/a.jpg": (md5_of("pa"), None), "photos/b.jpg": (md5_of("pb"), None)}
    )
    add_versions(store, [flat])
    _set_manifest(store, flat.version_id, recipe={"labels": {"rule": "none"}})
    body = client.get(f"/api/versions/{flat.version_id}").json()
    assert body["train_command"] is None
    assert "labels.rule = 'none'" in body["untrainable"]
    html = client.get("/versions/latest", params={"dataset": "photos"}).text
    assert "Train on this version" not in html and "python -m training" not in html
    assert "This version cannot be trained on: it is unlabelled" in html

    # Images directly in the dataset folder under the folder rule: no class either, said so.
    _set_manifest(store, flat.version_id, recipe={"labels": {"rule": "parent_dir"}})
    reason = client.get(f"/api/versions/{flat.version_id}").json()["untrainable"]
    assert "files directly in lake/photos/ have none" in reason

    # A labelled version keeps its offer.
    v = client.get(f"/api/versions/{versions[2].version_id}").json()
    assert v["untrainable"] is None and v["train_command"]["dag_conf"]["dataset"] == "pets"
    assert "Train on this version" in client.get(f"/versions/{versions[2].version_id}").text

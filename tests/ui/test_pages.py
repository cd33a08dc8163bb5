"""The Datasets app's pages and JSON API on both store backends, with synthetic version rows.

Auth here is a stand-in dependency passed to the app factory (these are rendering/shape tests);
Airflow's real auth is tested against a running api-server in test_airflow_plugin.py.
"""

from __future__ import annotations

import re

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient

from pipeline.ui.app import create_app
from tests.ui.synth import SynthVersion, add_versions, md5_of, three_versions


def _allow() -> None:
    return None


@pytest.fixture
def versions(store):
    vs = three_versions()
    add_versions(store, vs)
    return vs


@pytest.fixture
def client(store, versions) -> TestClient:
    return TestClient(create_app(_allow, get_store=lambda: store))


def test_versions_listed_newest_first_with_counts(client, versions):
    body = client.get("/api/versions", params={"limit": 2}).json()
    assert body["total"] == 3
    assert [v["version_id"] for v in body["items"]] == [
        versions[2].version_id,
        versions[1].version_id,
    ]
    v2 = body["items"][1]
    assert (v2["added"], v2["removed"], v2["changed"]) == (6, 2, 1)
    assert v2["samples"] == len(versions[1].files) == v2["train"] + v2["val"]
    assert v2["runs"] == []
    page2 = client.get("/api/versions", params={"limit": 2, "offset": 2}).json()
    assert [v["version_id"] for v in page2["items"]] == [versions[0].version_id]
    assert client.get("/api/versions", params={"dataset": "nope"}).json()["total"] == 0


def test_datasets_name_their_latest_version(client, versions):
    body = client.get("/api/datasets").json()
    assert body["total"] == 1
    (item,) = body["items"]
    assert (item["name"], item["versions"]) == ("pets", 3)
    assert item["latest"]["version_id"] == versions[2].version_id
    assert item["latest"]["tag"] == versions[2].tag


def test_version_resolves_by_id_prefix_tag_and_latest(client, versions):
    v2 = versions[1]
    for ref, extra in [(v2.version_id, {}), (v2.version_id[:10], {}), (v2.tag, {})]:
        assert (
            client.get(f"/api/versions/{ref}", params=extra).json()["version_id"] == v2.version_id
        )
    latest = client.get("/api/versions/latest", params={"dataset": "pets"}).json()
    assert latest["version_id"] == versions[2].version_id
    assert client.get("/api/versions/ffffffffffff").status_code == 404
    # A request error, not "not found": the message says what to add.
    no_dataset = client.get("/api/versions/latest")
    assert no_dataset.status_code == 400 and "?dataset=" in no_dataset.json()["detail"]


def test_version_detail_shape(client, versions):
    v = client.get(f"/api/versions/{versions[1].version_id}").json()
    assert v["parent"] == {"version_id": versions[0].version_id, "tag": versions[0].tag}
    assert v["children"] == [{"version_id": versions[2].version_id, "tag": versions[2].tag}]
    counts = {c["label"]: c["total"] for c in v["classes"]}
    expected: dict[str, int] = {}
    for _md5, label in versions[1].files.values():
        expected[label] = expected.get(label, 0) + 1
    assert counts == expected
    assert sum(c["train"] for c in v["classes"]) == v["train"]
    assert v["invalid_files"]["total"] == 1
    assert v["invalid_files"]["items"][0]["reason"].startswith("cannot identify image file")
    assert v["train_command"]["env"] == {
        "DATASET_NAME": "pets",
        "DATASET_VERSION": versions[1].version_id,
        "TRAIN_EPOCHS": "3",
    }
    assert f"--version {versions[1].version_id}" in v["train_command"]["cli"]
    assert f"DATASET_VERSION={versions[1].version_id}" in v["train_command"]["shell"]
    assert v["train_command"]["dag_conf"]["dataset_version"] == versions[1].version_id
    assert {o["version_id"] for o in v["others"]} == {
        versions[0].version_id,
        versions[2].version_id,
    }


def test_diff_matches_a_set_computation(client, versions):
    a, b = versions[0], versions[2]
    d = client.get(f"/api/versions/{a.version_id}/diff/{b.version_id}").json()
    added = sorted(b.files.keys() - a.files.keys())
    removed = sorted(a.files.keys() - b.files.keys())
    changed = sorted(p for p in a.files.keys() & b.files.keys() if a.files[p] != b.files[p])
    assert d["counts"] == {"added": len(added), "removed": len(removed), "changed": len(changed)}
    assert [r["path"] for r in d["added"]] == added
    assert [r["path"] for r in d["removed"]] == removed
    assert [(r["path"], r["old_md5"], r["md5"]) for r in d["changed"]] == [
        (p, a.files[p][0], b.files[p][0]) for p in changed
    ]
    # Paged: the second page of size 3 continues the first.
    p2 = client.get(
        f"/api/versions/{a.version_id}/diff/{b.version_id}", params={"limit": 3, "offset": 3}
    ).json()
    assert [r["path"] for r in p2["added"]] == added[3:6]
    # Reversed direction swaps added and removed.
    r = client.get(f"/api/versions/{b.version_id}/diff/{a.version_id}").json()
    assert r["counts"] == {"added": len(removed), "removed": len(added), "changed": len(changed)}


def test_contains_by_md5_and_by_path(client, versions):
    md5 = md5_of("cat1")  # in all three versions
    by_md5 = client.get("/api/contains", params={"q": md5.upper()}).json()
    assert by_md5["kind"] == "md5"
    assert [m["version_id"] for m in by_md5["matches"]] == [
        v.version_id for v in reversed(versions)
    ]
    by_path = client.get("/api/contains", params={"q": "pets/cat/img_000.png"}).json()
    assert by_path["kind"] == "path"
    assert [m["version_id"] for m in by_path["matches"]] == [versions[0].version_id]
    without_dataset = client.get("/api/contains", params={"q": "bird/img_020.png"}).json()
    assert [m["version_id"] for m in without_dataset["matches"]] == [versions[2].version_id]
    assert client.get("/api/contains", params={"q": "pets/none.png"}).json()["matches"] == []


def test_file_names_render_as_text_never_markup(client, versions):
    v2 = versions[1]
    pages = [
        client.get(f"/versions/{v2.version_id}").text,
        client.get("/diff", params={"a": versions[0].version_id, "b": v2.version_id}).text,
        client.get("/search", params={"q": "pets/<script>alert(1)</script>.png"}).text,
    ]
    for html in pages:
        assert "<script>" not in html and "<img src=x" not in html and "<b>bold" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.png" in pages[1]
    assert "&lt;b&gt;bold&lt;/b&gt;" in pages[0]  # the class name, in the chart and the table
    assert "onerror=alert(3)&gt;" in pages[0]  # the invalid file's reason
    assert "2 match(es)" in pages[2]  # v2 and v3 hold it


def test_index_page_lists_and_paginates(store, client, versions):
    from pipeline.ui import pages

    html = client.get("/").text
    ids = re.findall(r'data-version="([0-9a-f]+)"', html)
    assert ids == [v.version_id for v in reversed(versions)]
    assert "page 1 of 1" in html
    old = pages.PAGE_SIZE
    pages.PAGE_SIZE = 2
    try:
        html = client.get("/", params={"page": 2}).text
        assert re.findall(r'data-version="([0-9a-f]+)"', html) == [versions[0].version_id]
        assert "page 2 of 2" in html and 'rel="prev"' in html
    finally:
        pages.PAGE_SIZE = old


def test_unknown_version_page_is_404_with_the_ref_escaped(client):
    r = client.get("/versions/<i>x")
    assert r.status_code == 404
    assert "&lt;i&gt;x" in r.text and "<i>" not in r.text


def test_docs_and_schema_are_off(client):
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert client.get(path).status_code == 404


def test_auth_dependency_guards_every_route(store, versions):
    def deny() -> None:
        raise HTTPException(status_code=401, detail="Not authenticated")

    client = TestClient(create_app(deny, get_store=lambda: store))
    v = versions[0].version_id
    for path in [
        "/",
        f"/versions/{v}",
        f"/diff?a={v}&b={v}",
        "/search?q=x",
        "/static/style.css",
        "/api/datasets",
        "/api/versions",
        f"/api/versions/{v}",
        f"/api/versions/{v}/diff/{v}",
        "/api/contains?q=x",
        f"/api/versions/{v}/thumbnails.png",
        f"/api/versions/{v}/invalid",
        "/api/datasets/pets/rejected",
        "/?dataset=pets",
        "/versions/latest?dataset=pets",
        "/api/versions/latest/thumbnails.png?dataset=pets",
        # Auth runs before parameter validation: a bad request from a stranger is still a 401.
        "/api/versions?offset=-1",
        "/api/datasets/..%2Fetc/rejected",
    ]:
        assert client.get(path).status_code == 401, path


def _as_sets(d: dict) -> dict:
    return {
        k: sorted(tuple(sorted(r.items())) for r in d[k]) for k in ("added", "removed", "changed")
    }


def test_diff_in_sql_and_by_merge_agree(store, versions):
    from pipeline.ui import data

    # (v0, v1) and (v1, v2) are parent diffs: their counts come from the build's stored ones.
    for a, b in [
        (versions[0], versions[1]),
        (versions[1], versions[2]),
        (versions[0], versions[2]),
        (versions[2], versions[0]),
        (versions[1], versions[1]),
    ]:
        sql = data.diff_versions(store, a.version_id, b.version_id, method="sql")
        merge = data.diff_versions(store, a.version_id, b.version_id, method="merge")
        assert sql["counts"] == merge["counts"]
        assert _as_sets(sql) == _as_sets(merge)
    same = data.diff_versions(store, versions[1].version_id, versions[1].version_id)
    assert same["counts"] == {"added": 0, "removed": 0, "changed": 0}


def test_diff_of_paths_with_many_rows_counts_each_path_once(store):
    """A table file is many sample rows under one path: the diff is still by path."""
    from pipeline.metadata.datasets import DatasetVersion
    from pipeline.ui import data
    from tests.ui.synth import SynthVersion, add_versions

    t1 = SynthVersion("tab", {"tab/a.csv": (md5_of("a"), "x"), "tab/b.csv": (md5_of("b"), "x")})
    t2 = SynthVersion(
        "tab", {"tab/a.csv": (md5_of("a2"), "x"), "tab/c.csv": (md5_of("c"), "y")}, parent=t1
    )
    add_versions(store, [t1, t2])
    from pipeline.metadata.datasets import VersionSample

    with store.session() as s:  # 50 more rows under each path, as a table's lines would be
        for v in (t1, t2):
            for path, (md5, label) in v.files.items():
                for k in range(50):
                    s.add(
                        VersionSample(
                            version_id=v.version_id,
                            idx=1000 + k,
                            path=path,
                            md5=md5,
                            label=label,
                            split="train",
                            duplicate=False,
                        )
                    )
                row = s.get(DatasetVersion, v.version_id)
                row.samples = 2 + 100
    d = data.diff_versions(store, t1.version_id, t2.version_id)
    assert d["counts"] == {"added": 1, "removed": 1, "changed": 1}
    assert [r["path"] for r in d["added"]] == ["tab/c.csv"]
    assert [(r["path"], r["old_md5"], r["md5"]) for r in d["changed"]] == [
        ("tab/a.csv", md5_of("a"), md5_of("a2"))
    ]


def test_table_versions_show_no_thumbnail_grid(store, client, versions):
    import json as _json

    from pipeline.metadata.datasets import DatasetVersion

    v = versions[0].version_id
    assert 'class="thumbnails"' in client.get(f"/versions/{v}").text
    with store.session() as s:
        row = s.get(DatasetVersion, v)
        row.manifest = _json.dumps({**_json.loads(row.manifest), "modality": "table"})
    html = client.get(f"/versions/{v}").text
    assert 'class="thumbnails"' not in html and "table" in html


def test_unlabelled_samples_are_counted_not_dropped(store):
    from pipeline.ui.data import class_split_counts

    manifest = {
        "counts": {
            "per_split": {
                "train": {"samples": 7, "classes": {"a": 3}},
                "val": {"samples": 2, "classes": {}},
            }
        }
    }
    assert class_split_counts(None, "unused", manifest) == [
        {"label": "a", "train": 3, "val": 0, "total": 3},
        {"label": None, "train": 4, "val": 2, "total": 6},
    ]
    # Without per-split counts in the manifest, SQL groups the rows: None stays None, last.
    v = SynthVersion("raw", {"raw/x.jpg": (md5_of("x"), None), "raw/y.jpg": (md5_of("y"), "b")})
    add_versions(store, [v])
    rows = class_split_counts_via_store(store, v.version_id)
    assert [r["label"] for r in rows] == ["b", None] and sum(r["total"] for r in rows) == 2


def class_split_counts_via_store(store, version_id):
    from pipeline.ui.data import class_split_counts

    with store.session() as s:
        return class_split_counts(s, version_id, {})

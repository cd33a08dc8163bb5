"""Versions built by the real pipeline (tests/ui/lakedata.py), then damaged on disk or followed
by a drop of files the build rejects: thumbnails answer damage with a clear error naming the
version and segment (never a traceback), ``latest?dataset=`` draws the head's grid, and the
rejected files reach the dataset's page, the JSON API and the search. Both store backends."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from pipeline.ui.app import create_app
from tests.ui.lakedata import build_two_versions


@pytest.fixture
def built(store, lt_env, monkeypatch):
    return _build(store, lt_env, monkeypatch)


def _build(store, lt_env, monkeypatch):
    from pipeline.settings import get_settings
    from tests.ui.lakedata import REPO

    monkeypatch.setenv("RECIPES_DIR", str(REPO / "recipes"))
    get_settings.cache_clear()
    return build_two_versions(lt_env / "lake", store)


@pytest.fixture
def client(store, built) -> TestClient:
    # raise_server_exceptions=False: a handler that let an error through would show as the bare
    # 500 a browser gets, not as a test crash that hides the status.
    return TestClient(
        create_app(lambda: None, get_store=lambda: store), raise_server_exceptions=False
    )


def _segments(lt_env: Path, version: dict) -> list[Path]:
    import json

    manifest = json.loads((lt_env / "data" / version["path"] / "manifest.json").read_text())
    return [lt_env / "data" / s["path"] for s in manifest["segments"]]


def _assert_damage_named(r, version: dict, *needles: str) -> None:
    assert r.status_code == 500, r.text
    assert r.headers["content-type"].startswith("application/json")
    detail = r.json()["detail"]
    assert version["tag"] in detail, detail
    for n in needles:
        assert n in detail, (n, detail)
    assert "Traceback" not in detail and str(Path.cwd()) not in detail


def test_latest_with_a_dataset_draws_the_thumbnails_of_the_head(client, built):
    r = client.get("/api/versions/latest/thumbnails.png", params={"dataset": "digits"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png", r.text
    by_id = client.get(f"/api/versions/{built.v2['version_id']}/thumbnails.png")
    assert r.content == by_id.content
    # ``latest`` moves, an id does not: only the id's grid may be cached.
    assert "no-cache" in r.headers["cache-control"]
    assert "max-age=3600" in by_id.headers["cache-control"]
    assert Image.open(io.BytesIO(r.content)).size[0] > 0


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_segment_is_a_clear_error_naming_version_and_segment(
    client, built, lt_env, damage
):
    v2 = built.v2
    for seg in _segments(lt_env, v2):
        x = seg / "x.npy"
        if damage == "truncated":
            x.write_bytes(x.read_bytes()[:200])
        else:
            x.write_bytes(b"not a numpy file at all" * 10)
    r = client.get(f"/api/versions/{v2['version_id']}/thumbnails.png")
    _assert_damage_named(r, v2, "segments/", "row ", "cannot be read")
    # The version page itself reads no arrays: it still renders; its <img> (a browser asks for
    # images, not JSON) gets a picture of the message instead of a broken image.
    assert client.get(f"/versions/{v2['version_id']}").status_code == 200
    img = client.get(
        f"/api/versions/{v2['version_id']}/thumbnails.png",
        headers={"accept": "image/avif,image/webp,image/apng,image/*,*/*;q=0.8"},
    )
    assert img.status_code == 500 and img.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(img.content)).size[0] > 0


@pytest.fixture
def built_format_1(store, lt_env, monkeypatch):
    """Versions as published before chunks (self-contained folders, an index_row.npy)."""
    from pipeline.datasets.build import committing

    monkeypatch.setattr(committing, "WRITE_FORMAT", 1, raising=False)
    return _build(store, lt_env, monkeypatch)


def test_an_index_past_a_segments_rows_is_a_clear_error(store, built_format_1, lt_env):
    client = TestClient(
        create_app(lambda: None, get_store=lambda: store), raise_server_exceptions=False
    )
    v2 = built_format_1.v2
    index_row = lt_env / "data" / v2["path"] / "index_row.npy"
    rows = np.load(index_row)
    np.save(index_row, rows + 10_000)
    r = client.get(f"/api/versions/{v2['version_id']}/thumbnails.png")
    _assert_damage_named(r, v2, "segments/", "out of bounds")


def test_a_store_row_past_the_version_folder_is_a_clear_error(client, built, store):
    from sqlalchemy import update

    from pipeline.metadata.datasets import VersionChunk, VersionSample

    v2 = built.v2
    with store.session() as s:  # whichever the version has: format-1 rows or chunked leaves
        s.execute(
            update(VersionSample)
            .where(VersionSample.version_id == v2["version_id"])
            .values(idx=VersionSample.idx + 1_000_000)
        )
        s.execute(
            update(VersionChunk)
            .where(VersionChunk.version_id == v2["version_id"])
            .values(start=VersionChunk.start + 1_000_000)
        )
    r = client.get(f"/api/versions/{v2['version_id']}/thumbnails.png")
    _assert_damage_named(r, v2, "the store and the folder disagree")


def test_a_missing_version_folder_is_damage_not_a_missing_thumbnail(client, built, lt_env):
    import shutil

    v2 = built.v2
    shutil.rmtree(lt_env / "data" / v2["path"])
    r = client.get("/api/versions/latest/thumbnails.png", params={"dataset": "digits"})
    _assert_damage_named(r, v2, v2["path"])


def _drop_rejected(lake: Path) -> list[str]:
    """A corrupt PNG and a zero-byte PNG, as the issue's repro dropped them."""
    corrupt, empty = "digits/5/corrupt.png", "digits/5/empty.png"
    (lake / corrupt).write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 20)
    (lake / empty).write_bytes(b"")
    return [corrupt, empty]


def test_rejected_files_are_listed_on_the_dataset_page_and_searchable(client, built, store, lt_env):
    from pipeline.datasets.build import build

    dropped = _drop_rejected(lt_env / "lake")
    assert build("digits", workers=1, store=store) is None  # nothing new to publish
    expected = sorted([built.invalid, *dropped])

    body = client.get("/api/datasets/digits/rejected").json()
    assert body["total"] == 3
    assert [f["path"] for f in body["items"]] == expected
    for f in body["items"]:
        assert f["reason"] and f["status"] in ("invalid", "unreadable", "refused")
        assert f["since"]
    page2 = client.get("/api/datasets/digits/rejected", params={"limit": 1, "offset": 1}).json()
    assert [f["path"] for f in page2["items"]] == expected[1:2] and page2["total"] == 3
    (digits,) = client.get("/api/datasets").json()["items"]
    assert digits["rejected"] == 3

    html = client.get("/", params={"dataset": "digits"}).text
    assert "Rejected files of digits" in html and "(3)" in html
    for path in expected:
        assert path in html
    # The latest version's page points at them (they are in no version).
    v = client.get("/versions/latest", params={"dataset": "digits"}).text
    assert "3 rejected file(s) of digits" in v

    empty = next(f for f in body["items"] if f["path"] == dropped[1])
    found = client.get("/api/contains", params={"q": dropped[1]}).json()
    assert found["matches"] == []
    assert [(f["path"], f["reason"]) for f in found["rejected"]] == [(dropped[1], empty["reason"])]
    # By the path inside the dataset folder, on the page: "rejected: <reason>".
    page = client.get("/search", params={"q": "5/empty.png"}).text
    assert dropped[1] in page and "rejected: empty file (0 bytes)" in page
    assert empty["reason"] == "empty file (0 bytes)"
    # By md5, a corrupt file is found too.
    corrupt = next(f for f in body["items"] if f["path"] == dropped[0])
    by_md5 = client.get("/api/contains", params={"q": corrupt["md5"]}).json()
    assert [f["path"] for f in by_md5["rejected"]] == [dropped[0]]


def test_a_dataset_with_only_refused_files_is_listed_without_versions(client, store, lt_env):
    from pipeline.lake.scan import scan

    outside = lt_env / "outside.png"
    outside.write_bytes(b"\x89PNG\r\n\x1a\n")
    (lt_env / "lake" / "scans" / "a").mkdir(parents=True)
    (lt_env / "lake" / "scans" / "a" / "x.png").symlink_to(outside)  # escapes the lake
    result = scan(lt_env / "lake", dataset="scans", store=store)
    assert [p for p, _ in result.refused] == ["scans/a/x.png"]
    items = {d["name"]: d for d in client.get("/api/datasets").json()["items"]}
    assert items["scans"]["versions"] == 0 and items["scans"]["latest"] is None
    assert items["scans"]["rejected"] == 1
    assert "?dataset=scans#rejected" in client.get("/").text
    (f,) = client.get("/api/datasets/scans/rejected").json()["items"]
    assert (f["path"], f["status"]) == ("scans/a/x.png", "refused") and f["reason"]
    assert "rejected: " in client.get("/search", params={"q": "a/x.png"}).text

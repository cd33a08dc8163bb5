"""DATA_ROOT on ``s3://`` (a real moto_server over HTTP): builds publish to the bucket, the
manifest last; readers open versions through the local cache, with or without a store; no
local data folder exists at any point."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.datasets.conftest import image_lake
from tests.datasets.s3_support import use_s3_data_root


@pytest.fixture
def s3_root(store, lt_env: Path, moto_server, monkeypatch: pytest.MonkeyPatch) -> str:
    image_lake(lt_env, "pets", per_class=5)
    return use_s3_data_root(monkeypatch, lt_env, moto_server.url)


def test_build_publishes_every_object_and_no_local_data_folder(s3_root, lt_env, moto_server, store):
    from pipeline.datasets.build import build

    v = build("pets", workers=1)
    assert v is not None and v.samples == 10
    keys = moto_server.keys("data/")
    rel = f"data/datasets/pets/{v.version_id}/"
    assert f"{rel}manifest.json" in keys and f"{rel}parts.txt" in keys
    manifest = json.loads(
        moto_server.client.get_object(Bucket=moto_server.bucket, Key=f"{rel}manifest.json")[
            "Body"
        ].read()
    )
    # Every object the manifest names is there: segments whole (segment.json), chunk tree.
    for seg in manifest["segments"]:
        assert f"data/{seg['path']}/segment.json" in keys
        assert f"data/{seg['path']}/x.npy" in keys
    for node in manifest["chunks"]["nodes"]:
        assert f"data/chunks/{node['hash'][:2]}/{node['hash']}.node.json" in keys
    head = json.loads(
        moto_server.client.get_object(Bucket=moto_server.bucket, Key="data/datasets/pets/HEAD")[
            "Body"
        ].read()
    )
    assert head["version_id"] == v.version_id
    assert not (lt_env / "data").exists()


def test_reader_opens_latest_from_s3_without_a_store(s3_root, lt_env, store, monkeypatch):
    from pipeline.datasets.build import build
    from pipeline.datasets.reader import open_version

    v = build("pets", workers=1)
    monkeypatch.delenv("METADATA_DB_URL")  # a training container: DATA_ROOT alone
    reader = open_version("pets", "latest")
    assert reader.version_id == v.version_id
    assert len(reader) == 10
    x, y = reader.get_batch(np.arange(10))
    assert x.shape == (10, 3, 16, 16) and x.dtype == np.uint8
    # Read from the cache, byte for byte what the build wrote into its work root.
    from pipeline.datasets.dataroot import work_root

    local = open_version("pets", v.version_id, data_root=work_root())
    lx, ly = local.get_batch(np.arange(10))
    assert np.array_equal(x, lx) and np.array_equal(y, ly)
    assert reader.metadata(3) == local.metadata(3)
    assert str(reader.folder).startswith(str(lt_env / "cache" / "objects"))
    assert not (lt_env / "data").exists()


def _three_versions(lt_env: Path):
    from pipeline.datasets.build import build
    from tests.datasets.conftest import write_jpeg

    versions = [build("pets", workers=1)]
    write_jpeg(lt_env / "lake" / "pets" / "cat" / "new1.jpg", seed=501)
    versions.append(build("pets", workers=1))
    (lt_env / "lake" / "pets" / "cat" / "000.jpg").unlink()
    write_jpeg(lt_env / "lake" / "pets" / "bird" / "b0.jpg", seed=502)
    versions.append(build("pets", workers=1))
    return versions


def test_diff_and_contains_answer_for_an_s3_data_root(s3_root, lt_env, store):
    from pipeline.datasets.queries import diff_versions, versions_containing

    v1, v2, v3 = _three_versions(lt_env)
    d = diff_versions(v1.version_id, v3.version_id, store=store)
    assert [a["path"] for a in d["added"]] == ["pets/bird/b0.jpg", "pets/cat/new1.jpg"]
    assert [r["path"] for r in d["removed"]] == ["pets/cat/000.jpg"]
    holders = versions_containing("pets/cat/000.jpg", store=store)
    assert {h["version_id"] for h in holders} == {v1.version_id, v2.version_id}


def test_gc_on_an_s3_data_root_is_a_dry_run_by_default_then_deletes_by_the_same_rules(
    s3_root, lt_env, store, moto_server, monkeypatch
):
    from pipeline.datasets.gc import collect
    from pipeline.datasets.reader import open_version

    v1, v2, v3 = _three_versions(lt_env)
    # A killed build's upload that no version names: a leftover segment.
    stray = "data/segments/" + "a" * 64 + "/" + "b" * 64 + "/x.npy"
    moto_server.client.put_object(Bucket=moto_server.bucket, Key=stray, Body=b"x" * 100)
    before = moto_server.keys()
    dry = collect(keep_last=1, min_age_s=0, store=store)
    assert not dry.applied
    assert {v["version_id"] for v in dry.versions} == {v1.version_id, v2.version_id}
    assert moto_server.keys() == before  # a dry run deletes nothing
    young = collect(keep_last=1, store=store)  # default min age: the new objects stay
    assert not young.segments and not young.leftovers

    done = collect(keep_last=1, min_age_s=0, apply=True, store=store)
    assert done.applied
    after = set(moto_server.keys())
    for v in (v1, v2):
        assert not [k for k in after if f"/{v.version_id}/" in k]
    assert stray not in after
    assert f"data/datasets/pets/{v3.version_id}/manifest.json" in after
    # Everything the kept head needs is still there: it opens, from a fresh cache.
    monkeypatch.setenv("LAKETRAIN_CACHE_DIR", str(lt_env / "cache-after-gc"))
    from pipeline.settings import get_settings

    get_settings.cache_clear()
    reader = open_version("pets", "latest", store=store)
    assert reader.version_id == v3.version_id
    assert reader.get_batch(np.arange(len(reader)))[0].shape[0] == len(reader) == 11
    assert reader.metadata(0)["path"] == "pets/bird/b0.jpg"
    # Only objects some kept version names are left (a second gc finds nothing).
    again = collect(keep_last=1, min_age_s=0, store=store)
    assert not (again.versions or again.segments or again.leftovers or again.chunks)

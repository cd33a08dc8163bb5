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

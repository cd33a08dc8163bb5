"""An ``s3://`` DATA_ROOT under crashes and outages: a build killed with SIGKILL while it
uploads, and a moto_server killed mid-build or mid-read. Nothing half-published is ever
visible on S3 (a version is there once its manifest is), and a rerun publishes the version
an uninterrupted build publishes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.datasets.conftest import image_lake
from tests.datasets.s3_support import use_s3_data_root
from tests.datasets.test_crash import BUILD, _kill, _start, _wait_for_marker

pytestmark = pytest.mark.slow


def _reference_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The version_id of an uninterrupted build of the same lake into a LOCAL data root."""
    from pipeline.datasets.build import run_build
    from pipeline.metadata.store import MetadataStore
    from pipeline.settings import get_settings

    with monkeypatch.context() as m:
        m.setenv("DATA_ROOT", str(tmp_path / "reference-data"))
        get_settings.cache_clear()
        ref_store = MetadataStore(f"sqlite:///{tmp_path / 'reference.db'}")
        try:
            version = run_build("pets", workers=1, store=ref_store).version
        finally:
            ref_store.dispose()
    get_settings.cache_clear()
    return version.version_id


def _published(s3, prefix: str = "data/") -> list[str]:
    """Version ids with a manifest on S3; every manifest's objects must all be there."""
    keys = set(s3.keys(prefix))
    out = []
    for key in sorted(keys):
        if key.startswith(f"{prefix}datasets/pets/") and key.endswith("/manifest.json"):
            m = json.loads(s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read())
            for seg in m["segments"]:
                assert f"{prefix}{seg['path']}/segment.json" in keys, seg["path"]
            for node in m["chunks"]["nodes"]:
                assert f"{prefix}chunks/{node['hash'][:2]}/{node['hash']}.node.json" in keys
            assert key.replace("manifest.json", "parts.txt") in keys
            out.append(m["id"])
    return out


@pytest.mark.parametrize(
    ("point", "nth", "fresh_worker"),
    [
        ("segment_uploaded", 2, False),  # 2nd segment's data on S3, its segment.json not
        ("publish_before_manifest", 1, False),  # every object uploaded, not the manifest
        ("publish_before_manifest", 1, True),  # ... and the rerun runs where nothing is local
        ("commit_renamed", 1, False),  # published on S3, not recorded in the store
    ],
)
def test_build_killed_during_upload_leaves_no_version_and_reruns_to_the_same_one(
    store, lt_env, moto_server, tmp_path, monkeypatch, point, nth, fresh_worker
):
    from pipeline.datasets.dataroot import work_root
    from pipeline.datasets.queries import list_versions
    from pipeline.datasets.reader import open_version
    from pipeline.datasets.refs import VersionNotFound

    image_lake(lt_env, per_class=4)
    expected = _reference_id(tmp_path, monkeypatch)
    use_s3_data_root(monkeypatch, lt_env, moto_server.url)

    proc = _start(BUILD, LAKETRAIN_TEST_PAUSE_AT=point, LAKETRAIN_TEST_PAUSE_NTH=str(nth))
    _wait_for_marker(proc, point)
    _kill(proc)

    assert list_versions("pets", store=store) == []
    visible = _published(moto_server)
    assert visible == ([expected] if point == "commit_renamed" else [])
    if not visible:
        with pytest.raises(VersionNotFound):
            open_version("pets", "latest", store=None)
    if fresh_worker:
        shutil.rmtree(work_root())

    rerun = _start(BUILD)
    _out, err = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, err
    assert [v["version_id"] for v in list_versions("pets", store=store)] == [expected]
    assert _published(moto_server) == [expected]
    monkeypatch.delenv("METADATA_DB_URL")
    r = open_version("pets", "latest", store=None)
    assert r.version_id == expected
    assert r.get_batch(np.arange(len(r)))[0].shape[0] == 8
    assert not (lt_env / "data").exists()


def test_s3_stopped_mid_build_retries_then_fails_naming_the_url_and_publishes_nothing(
    store, lt_env, private_moto_server, monkeypatch
):
    from pipeline.datasets.queries import list_versions

    image_lake(lt_env, per_class=4)
    use_s3_data_root(monkeypatch, lt_env, private_moto_server.url)
    proc = _start(
        BUILD,
        LAKETRAIN_TEST_PAUSE_AT="before_commit",
        LAKETRAIN_TEST_RESUME_FILE=str(lt_env / "resume"),
        LAKETRAIN_S3_ATTEMPTS="3",
        LAKETRAIN_S3_CONNECT_TIMEOUT="1",
        LAKETRAIN_S3_READ_TIMEOUT="2",
    )
    _wait_for_marker(proc, "before_commit")  # segments uploaded; the commit is next
    keys_before = private_moto_server.keys()
    private_moto_server.process.stop()  # the server dies: every call from now on fails
    (lt_env / "resume").touch()
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert err.count("retrying s3://") >= 2, err[-3000:]  # bounded retries, each logged
    assert f"s3://{private_moto_server.bucket}/data/" in err  # the error names the URL
    assert "after 3 attempts" in err
    assert list_versions("pets", store=store) == []  # not recorded: nothing to resolve
    assert not [k for k in keys_before if k.endswith("manifest.json")]


def test_s3_stopped_mid_read_retries_then_fails_naming_the_url(
    store, lt_env, private_moto_server, monkeypatch
):
    from pipeline.datasets import remote_reader
    from pipeline.datasets.build import build
    from pipeline.datasets.reader import open_version
    from pipeline.storage import StorageError

    image_lake(lt_env, per_class=4)
    use_s3_data_root(monkeypatch, lt_env, private_moto_server.url)
    v = build("pets", workers=1)
    monkeypatch.setenv("LAKETRAIN_S3_ATTEMPTS", "2")
    monkeypatch.setenv("LAKETRAIN_S3_CONNECT_TIMEOUT", "1")
    real = remote_reader.remote_files.read_manifest

    def then_stop(*args):
        out = real(*args)
        private_moto_server.process.stop()  # the manifest read, the objects not yet
        return out

    monkeypatch.setattr(remote_reader.remote_files, "read_manifest", then_stop)
    with pytest.raises(
        StorageError, match=rf"s3://{private_moto_server.bucket}/data/\S+ failed.*after 2 attempts"
    ):
        open_version("pets", v.version_id, store=store)
    # Nothing unchecked is where a reader looks: no object in the cache but the manifest.
    from pipeline.storage.cache import ObjectCache

    cache = ObjectCache(lt_env / "cache", 10**9, None)
    assert cache.used_bytes() == 0
    files = [p for p in cache.objects.rglob("*") if p.is_file()]
    assert [p.name for p in files] == ["manifest.json"]


def test_killed_between_the_store_commit_and_the_head_upload_the_next_build_syncs_head(
    store, lt_env, moto_server, tmp_path, monkeypatch
):
    from pipeline.datasets.queries import list_versions
    from pipeline.datasets.reader import open_version
    from pipeline.datasets.refs import VersionNotFound

    image_lake(lt_env, per_class=4)
    expected = _reference_id(tmp_path, monkeypatch)
    use_s3_data_root(monkeypatch, lt_env, moto_server.url)
    proc = _start(BUILD, LAKETRAIN_TEST_PAUSE_AT="head_committed")
    _wait_for_marker(proc, "head_committed")
    _kill(proc)
    # Recorded and published (complete), but the bucket has no HEAD yet: a store-less
    # reader finds no head rather than some other version.
    assert [v["version_id"] for v in list_versions("pets", store=store)] == [expected]
    assert _published(moto_server) == [expected]
    assert "data/datasets/pets/HEAD" not in moto_server.keys()
    with monkeypatch.context() as m:
        m.delenv("METADATA_DB_URL")
        with pytest.raises(VersionNotFound, match="no head yet"):
            open_version("pets", "latest", store=None)
    rerun = _start(BUILD)  # nothing changed in the lake: "no change", and HEAD synced
    _out, err = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, err
    assert [v["version_id"] for v in list_versions("pets", store=store)] == [expected]
    head = json.loads(
        moto_server.client.get_object(Bucket=moto_server.bucket, Key="data/datasets/pets/HEAD")[
            "Body"
        ].read()
    )
    assert head["version_id"] == expected
    monkeypatch.delenv("METADATA_DB_URL")
    assert open_version("pets", "latest", store=None).version_id == expected

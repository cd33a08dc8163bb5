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
    from pipeline.datasets.dataroot import work_root
    from pipeline.datasets.leases import read_leases

    assert read_leases(work_root(), "pets") == []  # released by the commit, as locally


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
    # A DataLoader worker started by spawn gets a pickled copy: it reads the same, and
    # fetches the metadata parts itself (the pins stay with the parent).
    import pickle

    copy = pickle.loads(pickle.dumps(reader.split("val")))
    assert np.array_equal(
        copy.get_batch(np.arange(len(copy)))[0],
        reader.split("val").get_batch(np.arange(len(copy)))[0],
    )
    assert copy.metadata(0) == reader.split("val").metadata(0)
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
    from pipeline.datasets.build import digest
    from pipeline.datasets.dataroot import work_root_of
    from pipeline.datasets.gc import collect
    from pipeline.datasets.quality import neargroups
    from pipeline.datasets.reader import open_version

    v1, v2, v3 = _three_versions(lt_env)
    # A killed build's upload that no version names: a leftover segment.
    stray = "data/segments/" + "a" * 64 + "/" + "b" * 64 + "/x.npy"
    moto_server.client.put_object(Bucket=moto_server.bucket, Key=stray, Body=b"x" * 100)
    # The work root's head caches: the head's, and one a head moved without a commit left.
    work = work_root_of(s3_root)
    head_caches = [m.path_of(work, "pets", v3.version_id) for m in (digest, neargroups)]
    assert all(p.is_file() for p in head_caches)
    stale = neargroups.path_of(work, "pets", v1.version_id)
    stale.write_bytes(head_caches[1].read_bytes())
    before = moto_server.keys()
    dry = collect(keep_last=1, min_age_s=0, store=store)
    assert not dry.applied
    assert {v["version_id"] for v in dry.versions} == {v1.version_id, v2.version_id}
    assert [r for r in dry.leftovers if r.startswith("digests/")] == [str(stale.relative_to(work))]
    assert moto_server.keys() == before and stale.is_file()  # a dry run deletes nothing
    young = collect(keep_last=1, store=store)  # default min age: the new objects stay
    assert not young.segments and not young.leftovers

    done = collect(keep_last=1, min_age_s=0, apply=True, store=store)
    assert done.applied
    after = set(moto_server.keys())
    for v in (v1, v2):
        assert not [k for k in after if f"/{v.version_id}/" in k]
    assert stray not in after
    assert not stale.exists() and all(p.is_file() for p in head_caches)
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


def test_a_corrupted_cached_segment_is_fetched_again_and_reads_right(
    s3_root, lt_env, store, monkeypatch
):
    from pipeline.datasets.build import build
    from pipeline.datasets.reader import open_version

    v = build("pets", workers=1)
    first = open_version("pets", v.version_id, store=store)
    assert first.cache_downloads > 0
    want = first.get_batch(np.arange(len(first)))[0]
    seg = first.manifest["segments"][0]["path"]
    del first
    x = lt_env / "cache" / "objects" / s3_root.removeprefix("s3://") / seg / "x.npy"
    raw = bytearray(x.read_bytes())
    raw[-1] ^= 0xFF  # the last pixel: same size, a valid .npy, wrong bytes
    x.write_bytes(bytes(raw))
    again = open_version("pets", v.version_id, store=store)
    assert again.cache_downloads == 2  # x.npy and y.npy of that one segment, fetched again
    assert np.array_equal(again.get_batch(np.arange(len(again)))[0], want)
    warm = open_version("pets", v.version_id, store=store)
    assert warm.cache_downloads == 0


_OPEN = """
import os, sys, time
from pipeline.datasets.reader import open_version
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.005)
r = open_version("pets", sys.argv[2])
x, _ = r.get_batch(list(range(len(r))))
print("DOWNLOADS", r.cache_downloads, int(x.sum()), flush=True)
"""


def test_two_processes_opening_one_version_at_once_download_it_once(
    s3_root, lt_env, store, monkeypatch
):
    import os
    import subprocess
    import sys
    import time

    from pipeline.datasets.build import build

    v = build("pets", workers=1)
    env = {k: val for k, val in os.environ.items() if k != "METADATA_DB_URL"}
    go = lt_env / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN, str(go), v.version_id],
            env=env,
            cwd=Path(__file__).resolve().parents[2],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    time.sleep(1.5)  # both have imported and wait: they open at the same moment
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    results = []
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        results.append(out.split()[-2:])
    downloads = sorted(int(r[0]) for r in results)
    from pipeline.datasets.chunkread import walk_leaves
    from pipeline.datasets.dataroot import work_root
    from pipeline.datasets.manifest import read_manifest, version_dir

    manifest, _ = read_manifest(version_dir(work_root(), "pets", v.version_id))
    assert len(walk_leaves(work_root(), manifest["chunks"])) >= 2  # two class folders
    # A pack per node (the node and its leaves' indexes), and x.npy + y.npy of each segment.
    n_objects = len(manifest["chunks"]["nodes"]) + 2 * len(manifest["segments"])
    assert sum(downloads) == n_objects, downloads  # each object once, by one of them
    assert results[0][1] == results[1][1]  # and both read the same bytes


def test_process_tasks_and_the_commit_on_different_workers_publish_the_version(
    s3_root, lt_env, store, moto_server, monkeypatch
):
    """Mapped process tasks on two workers, the commit on a third: each has its own work
    root (LAKETRAIN_CACHE_DIR), none shares a folder with another; only S3 joins them."""
    from pipeline.datasets.build import commit, plan, process
    from pipeline.lake.scan import scan
    from pipeline.settings import get_settings

    def on_worker(name: str) -> None:
        monkeypatch.setenv("LAKETRAIN_CACHE_DIR", str(lt_env / f"worker-{name}"))
        get_settings.cache_clear()

    scan(get_settings().lake_dir, dataset="pets", store=store)
    shards = plan("pets", store=store, max_files=4)
    assert len(shards) >= 2
    refs = []
    for i, shard in enumerate(shards):
        on_worker("a" if i % 2 == 0 else "b")
        refs.append(process(shard.to_dict(), store=store).to_dict())
    on_worker("c")
    version = commit("pets", refs, store=store)
    assert version is not None and version.samples == 10
    # The commit's worker pulled the segments it reads (near-duplicate hashing reads their
    # rows); the version is whole on S3.
    pulled = {p.parent.name for p in (lt_env / "worker-c").rglob("segment.json")}
    assert pulled == {r["segment_id"] for r in refs}
    keys = set(moto_server.keys("data/"))
    assert f"data/datasets/pets/{version.version_id}/manifest.json" in keys
    monkeypatch.delenv("METADATA_DB_URL")
    on_worker("reader")
    from pipeline.datasets.reader import open_version

    r = open_version("pets", "latest")
    assert r.version_id == version.version_id
    assert r.get_batch(np.arange(len(r)))[0].shape == (10, 3, 16, 16)


def _s3_ops():
    """Every S3 operation the data root's client sends from now on (op, key)."""
    from pipeline.datasets.publish import s3_store

    seen: list[tuple[str, str]] = []
    s3_store().client.meta.events.register(
        "before-parameter-build.s3",
        lambda event_name, params=None, **_kw: seen.append(
            (event_name.rsplit(".", 1)[-1], (params or {}).get("Key", ""))
        ),
    )
    return seen


def test_opening_latest_takes_the_head_and_the_manifest_then_one_get_per_object(
    s3_root, lt_env, store, monkeypatch
):
    from pipeline.datasets.build import build
    from pipeline.datasets.chunkread import walk_leaves
    from pipeline.datasets.reader import open_version

    v = build("pets", workers=1)
    monkeypatch.delenv("METADATA_DB_URL")  # a training container: DATA_ROOT alone
    ops = _s3_ops()
    cold = open_version("pets", "latest")
    section = cold.manifest["chunks"]
    # Two class folders make two leaves at least, read here through the packs in the cache.
    assert section["packed"] and len(walk_leaves(cold.data_root, section)) >= 2
    # One pack per node (the node and its leaves' indexes), never a leaf's own index.
    objects = len(section["nodes"]) + 2 * len(cold.manifest["segments"])
    # No LIST (HEAD names the version, the manifest's GET proves it published), no HEAD
    # request before a GET, the manifest read once: HEAD, manifest, then each object once.
    assert [op for op, _key in ops] == ["GetObject"] * (2 + objects), ops
    assert ops[0][1].endswith("/pets/HEAD") and ops[1][1].endswith(f"{v.version_id}/manifest.json")
    assert len({key for _op, key in ops}) == len(ops)
    assert sum(key.endswith(".pack") for _op, key in ops) == len(section["nodes"])
    assert not any(key.endswith((".idx", ".node.json")) for _op, key in ops)
    assert cold.cache_downloads == objects
    del cold
    ops.clear()
    warm = open_version("pets", "latest")
    assert [op for op, _key in ops] == ["GetObject", "GetObject"] and warm.cache_downloads == 0


def test_a_head_naming_an_unpublished_version_is_an_error_naming_it(
    s3_root, lt_env, store, moto_server, monkeypatch
):
    import json as _json

    from pipeline.datasets.build import build
    from pipeline.datasets.manifest import VersionNotFound
    from pipeline.datasets.reader import open_version

    build("pets", workers=1)
    monkeypatch.delenv("METADATA_DB_URL")
    key = "data/datasets/pets/HEAD"
    head = _json.loads(
        moto_server.client.get_object(Bucket=moto_server.bucket, Key=key)["Body"].read()
    )
    head["version_id"] = "ab" * 32  # a well-formed id no manifest exists for
    moto_server.client.put_object(Bucket=moto_server.bucket, Key=key, Body=_json.dumps(head))
    with pytest.raises(VersionNotFound, match=r"names version (ab)+, which is not published"):
        open_version("pets", "latest")

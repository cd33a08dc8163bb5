"""Builds from a lake in S3 (LAKE_DIR=s3://bucket/prefix): scan, plan, process (objects read
with GET), commit and export, on a real moto_server; the lake bucket sees only LIST, HEAD and
GET (every request recorded by a proxy), and is unchanged afterwards."""

from __future__ import annotations

import hashlib
import signal
from pathlib import Path

import numpy as np
import pytest

from tests.datasets.conftest import SMALL_IMAGE_RECIPE, write_jpeg, write_recipe
from tests.datasets.corpus import corpus_recipe_toml, write_bad_corpus
from tests.lake.test_s3_scan import READ_OPS, S3Lake, lake_on


@pytest.fixture
def s3_lake(moto_server, lt_env, monkeypatch):
    yield from lake_on(moto_server, monkeypatch)


def upload_folder(lake: S3Lake, folder: Path, dataset: str) -> dict[str, str]:
    """Every file under ``folder`` as ``lake/<dataset>/<rel>``; {lake path: md5}."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = f"{dataset}/{path.relative_to(folder).as_posix()}"
        data = path.read_bytes()
        lake.put(rel, data)
        out[rel] = hashlib.md5(data).hexdigest()
    return out


def image_objects(lake: S3Lake, home: Path, dataset: str = "pets", per_class: int = 4) -> None:
    write_recipe(home, dataset, SMALL_IMAGE_RECIPE)
    staging = home / "staging" / dataset
    for ci, cls in enumerate(("cat", "dog")):
        for i in range(per_class):
            write_jpeg(staging / cls / f"{i:03d}.jpg", seed=1000 * ci + i)
    upload_folder(lake, staging, dataset)


def test_build_and_export_from_an_s3_lake_with_only_reads_against_the_lake(
    s3_lake, store, lt_env, tmp_path
):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.export import export_version, open_ref
    from pipeline.datasets.reader import open_version

    image_objects(s3_lake, lt_env)
    before = s3_lake.etags()
    report = run_build("pets", workers=1, store=store)
    v = report.version
    assert v is not None and report.scan["new"] == 8 and report.decoded == 8
    reader = open_version("pets", store=store)
    assert len(reader) == 8
    paths = sorted(reader.metadata(i)["path"] for i in range(len(reader)))
    assert paths == sorted(f"pets/{c}/{i:03d}.jpg" for c in ("cat", "dog") for i in range(4))

    summary = export_version(open_ref(v.version_id[:8], store=store), tmp_path / "out")
    assert summary["samples"] == 8
    x = np.load(tmp_path / "out" / "x.npy")
    assert x.shape == (8, 3, 16, 16)

    ops = s3_lake.proxy.ops(s3_lake.s3.bucket)
    assert set(ops) <= READ_OPS, sorted(set(ops) - READ_OPS)
    assert ops.count("GetObject") == 16  # each object: once hashed by the scan, once decoded
    assert s3_lake.etags() == before

    # Nothing changed: the rebuild lists and reads nothing more.
    s3_lake.proxy.clear()
    again = run_build("pets", workers=1, store=store)
    assert again.version is None and again.scan["unchanged"] == 8
    assert "GetObject" not in s3_lake.proxy.ops()


def test_bad_objects_are_recorded_like_bad_files_with_the_reason(s3_lake, store, lt_env):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.queries import get_version

    write_recipe(lt_env, "imgs", corpus_recipe_toml("image"))
    expected = write_bad_corpus(lt_env / "staging" / "imgs", modality="image")
    upload_folder(s3_lake, lt_env / "staging" / "imgs", "imgs")
    report = run_build("imgs", workers=2, store=store, max_files=4)
    info = get_version(report.version.tag, store=store)
    invalid = {r["path"].split("/", 1)[1]: r["reason"] for r in info["invalid_files"]}
    bad = {k: why for k, why in expected.items() if why is not None}
    assert set(invalid) == set(bad)
    for key, why in bad.items():
        assert why in invalid[key], (key, invalid[key])
    assert info["samples"] == sum(1 for why in expected.values() if why is None)
    assert set(s3_lake.proxy.ops(s3_lake.s3.bucket)) <= READ_OPS


def test_an_object_changed_after_the_scan_is_left_for_the_next_scan(s3_lake, store, lt_env):
    from pipeline.datasets.build import plan, process
    from pipeline.lake.scan import scan

    image_objects(s3_lake, lt_env, per_class=1)
    scan(store=store)
    (shard,) = plan("pets", store=store)
    write_jpeg(lt_env / "other.jpg", seed=77)
    s3_lake.put("pets/cat/000.jpg", (lt_env / "other.jpg").read_bytes())
    ref = process(shard, store=store)
    assert ref.n_files == 1  # the dog only; the changed cat waits for its new md5


def test_the_default_recipe_is_chosen_from_the_listing(s3_lake, lt_env):
    from pipeline.datasets.recipes import load_recipe

    np.save(lt_env / "a.npy", np.zeros((4, 5), dtype=np.float32))
    s3_lake.put("arrs/x/a.npy", (lt_env / "a.npy").read_bytes())
    s3_lake.put("arrs/x/.hidden.png", b"not counted")
    recipe = load_recipe("arrs")
    assert recipe.modality == "array"
    assert list(recipe.array.shape) == [4, 5] and recipe.array.dtype == "float32"


def test_a_sidecar_label_file_is_read_from_the_lake(s3_lake, store, lt_env):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.reader import open_version

    write_recipe(
        lt_env,
        "side",
        SMALL_IMAGE_RECIPE.replace('rule = "parent_dir"', 'rule = "sidecar"\nfile = "labels.csv"'),
    )
    staging = lt_env / "staging" / "side"
    for i in range(4):
        write_jpeg(staging / f"{i}.jpg", seed=i)
    (staging / "labels.csv").write_text("path,label\n0.jpg,a\n1.jpg,b\n2.jpg,a\n3.jpg,b\n")
    upload_folder(s3_lake, staging, "side")
    assert run_build("side", workers=1, store=store).version is not None
    reader = open_version("side", store=store)
    labels = sorted(reader.metadata(i)["label"] for i in range(len(reader)))
    assert labels == ["a", "a", "b", "b"]


def test_server_killed_mid_build_fails_the_shard_naming_the_url_and_publishes_nothing(
    private_moto_server, lt_env, monkeypatch, tmp_path
):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.errors import BuildError
    from pipeline.datasets.queries import list_versions
    from pipeline.metadata.store import MetadataStore
    from pipeline.storage.errors import StorageError

    monkeypatch.setenv("LAKETRAIN_S3_ATTEMPTS", "2")
    db = f"sqlite:///{tmp_path / 'meta.db'}"
    monkeypatch.setenv("METADATA_DB_URL", db)
    store = MetadataStore(db)
    lakes = lake_on(private_moto_server, monkeypatch)
    lake = next(lakes)
    try:
        image_objects(lake, lt_env)
        gets = []

        def kill_when_process_reads(req):
            if req.op == "GetObject":
                gets.append(req.key)
                if len(gets) == 9:  # 8 by the scan, then the first read of process
                    private_moto_server.process.stop(signal.SIGKILL)

        lake.proxy.on_request = kill_when_process_reads
        with pytest.raises((BuildError, StorageError)) as err:
            run_build("pets", workers=1, store=store)
        assert f"s3://{lake.s3.bucket}/lake/pets/" in str(err.value)
        assert "after 2 attempts" in str(err.value)
        assert list_versions("pets", store=store) == []
    finally:
        lakes.close()
        store.dispose()


def test_the_ingest_tasks_scan_process_and_commit_an_s3_lake(s3_lake, store, lt_env, caplog):
    """What the lake_ingest DAG's tasks run (pipeline.orchestration.ingest_tasks), on an S3 lake."""
    from pipeline.orchestration import ingest_tasks

    image_objects(s3_lake, lt_env, per_class=2)
    s3_lake.put("pets//bad.jpg", b"bad")
    caplog.set_level("INFO", logger="laketrain.orchestration")
    scanned = ingest_tasks.scan_lake()
    assert scanned["datasets"] == ["pets"] and scanned["summary"]["new"] == 4
    assert "pets//bad.jpg" in caplog.text  # the refused key is named in the scan's log
    shards = ingest_tasks.plan_shards(scanned["datasets"])
    refs = [ingest_tasks.process_shard(s) for s in shards]
    extra = ingest_tasks.commit_dataset("pets", refs)
    assert extra is not None and extra["samples"] == 4
    assert set(s3_lake.proxy.ops(s3_lake.s3.bucket)) <= READ_OPS

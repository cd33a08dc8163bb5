"""The reader: batches, splits, version resolution with and without a store, refusals."""

from __future__ import annotations

import json
import multiprocessing
import pickle
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from tests.datasets.conftest import image_lake, write_jpeg


@pytest.fixture
def two_versions(sqlite_store, home):
    """pets with two versions (the second adds one file); returns (first, second) Versions."""
    from pipeline.datasets.build import run_build

    image_lake(home, per_class=8)
    first = run_build("pets", workers=1, store=sqlite_store, max_files=5).version
    write_jpeg(home / "lake" / "pets" / "cat" / "new.jpg", seed=99)
    second = run_build("pets", workers=1, store=sqlite_store, max_files=5).version
    return first, second


# 12 px rows (432 B) take the fancy-index path, 24 px rows (1,728 B) the row-copy path.
@pytest.mark.parametrize(("fmt", "size"), [("npy", 12), ("npy", 24), ("zarr", 12)])
def test_get_batch_equals_item_reads_in_the_asked_order(sqlite_store, home, fmt, size):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.reader import open_version

    image_lake(
        home, per_class=10, recipe=f'modality = "image"\nformat = "{fmt}"\n[image]\nsize = {size}\n'
    )
    run_build("pets", workers=1, store=sqlite_store, max_files=7)
    r = open_version("pets")
    idx = np.random.default_rng(0).integers(0, len(r), size=50)  # repeats, several segments
    x, y = r.get_batch(idx)
    assert x.shape == (50, 3, size, size) and x.dtype == np.uint8 and y.dtype == np.int64
    for k, i in enumerate(idx):
        xi, yi = r[int(i)]
        np.testing.assert_array_equal(x[k], xi)
        assert y[k] == yi
    np.testing.assert_array_equal(r.get_batch([-1])[0][0], r[len(r) - 1][0])
    with pytest.raises(IndexError):
        r.get_batch([len(r)])
    assert r.get_batch([])[0].shape == (0, 3, size, size)
    with pytest.raises(IndexError):
        r.get_batch([-len(r) - 1])


def test_split_views_partition_the_version_and_do_not_leak(two_versions):
    from pipeline.datasets.checks import check_leakage
    from pipeline.datasets.reader import open_version

    r = open_version("pets")
    train, val = r.split("train"), r.split("val")
    assert len(train) + len(val) == len(r) and len(val) > 0 and len(train) > 0
    assert {train.metadata(i)["split"] for i in range(len(train))} == {"train"}
    assert {val.metadata(i)["split"] for i in range(len(val))} == {"val"}
    assert set(train.md5s()) | set(val.md5s()) == set(r.md5s())
    np.testing.assert_array_equal(val.get_batch([0])[0][0], val[0][0])
    assert r.manifest["counts"]["train"] == len(train)
    assert check_leakage(r) == []
    with pytest.raises(ValueError, match="train"):
        r.split("test")


def test_check_leakage_finds_an_md5_in_both_splits(two_versions, home, tmp_path):
    from pipeline.datasets.checks import check_leakage
    from pipeline.datasets.chunkwrite import write_tree
    from pipeline.datasets.reader import VersionReader, open_version

    r = open_version("pets")
    forged = home / "data" / "datasets" / "pets" / "forged"
    shutil.copytree(r.folder, forged)
    lines = [r.metadata(i) for i in range(len(r))]
    a_train = next(rec for rec in lines if rec["split"] == "train")
    a_val = next(rec for rec in lines if rec["split"] == "val")
    a_val["md5"] = a_train["md5"]
    # The forged version's own chunk tree (the real version's chunks stay as they are).
    samples = [
        SimpleNamespace(**{**rec, "segment_id": rec["segment"], "line": None, "copy": 0})
        for rec in lines
    ]
    tree = write_tree(home / "data", samples)
    manifest = json.loads((forged / "manifest.json").read_text())
    manifest["chunks"] = tree.manifest_section()
    (forged / "manifest.json").write_text(json.dumps(manifest))
    assert check_leakage(VersionReader(forged, home / "data")) == [a_train["md5"]]


def test_versions_resolve_by_id_prefix_tag_and_latest_without_a_store(
    two_versions, home, monkeypatch
):
    from pipeline.datasets.manifest import VersionNotFound
    from pipeline.datasets.reader import open_version

    first, second = two_versions
    monkeypatch.delenv("METADATA_DB_URL")
    # No store at all: even a deleted database file must not matter.
    (home / "data" / "metadata.db").unlink()
    data_root = home / "data"
    assert open_version("pets", data_root=data_root).version_id == second.version_id
    assert (
        open_version("pets", first.version_id, data_root=data_root).version_id == first.version_id
    )
    assert (
        open_version("pets", first.version_id[:6], data_root=data_root).version_id
        == first.version_id
    )
    assert open_version("pets", second.tag, data_root=data_root).version_id == second.version_id
    with pytest.raises(VersionNotFound, match="no version"):
        open_version("pets", "nope", data_root=data_root)
    with pytest.raises(VersionNotFound):
        open_version("cats", data_root=data_root)
    assert not (home / "data" / "metadata.db").exists()


def test_versions_resolve_through_the_store(two_versions, sqlite_store):
    from pipeline.datasets.manifest import VersionNotFound
    from pipeline.datasets.reader import open_version

    first, second = two_versions
    assert open_version("pets", store=sqlite_store).version_id == second.version_id
    assert open_version("pets", first.tag, store=sqlite_store).version_id == first.version_id
    assert open_version("pets", first.version_id[:8], store=sqlite_store).tag == first.tag
    with pytest.raises(VersionNotFound):
        open_version("pets", "0" * 64, store=sqlite_store)


def test_unknown_manifest_format_version_is_refused(two_versions, home):
    from pipeline.datasets.manifest import ManifestError
    from pipeline.datasets.reader import VersionReader, open_version

    r = open_version("pets")
    future = home / "data" / "datasets" / "pets" / "future"
    shutil.copytree(r.folder, future)
    m = json.loads((future / "manifest.json").read_text())
    m["format_version"] = 99
    (future / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ManifestError, match="format_version 99 is not supported"):
        VersionReader(future, home / "data")


def _read_in_child(reader, indices, queue):
    inherited = list(reader._arrays)  # maps from the parent must not survive the fork
    x, y = reader.get_batch(indices)
    queue.put((x.tobytes(), y.tolist(), inherited))


def test_reader_maps_lazily_and_reopens_in_forked_and_unpickled_copies(two_versions):
    from pipeline.datasets.reader import open_version

    r = open_version("pets")
    assert r._arrays == {}  # nothing mapped until a sample is read
    x, y = r.get_batch([0, 1, 2])
    assert r._arrays
    clone = pickle.loads(pickle.dumps(r))
    assert clone._arrays == {}
    np.testing.assert_array_equal(clone.get_batch([0, 1, 2])[0], x)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(r, [0, 1, 2], queue))
    child.start()
    xb, yl, inherited = queue.get(timeout=30)
    child.join(30)
    assert child.exitcode == 0
    assert inherited == [] and r._arrays  # the child re-opened; the parent kept its maps
    assert xb == x.tobytes() and yl == y.tolist()


def test_metadata_and_identity(two_versions, home):
    import hashlib

    from pipeline.datasets.reader import open_version

    first, second = two_versions
    r = open_version("pets")
    assert (r.dataset, r.version_id, r.tag, r.modality) == (
        "pets",
        second.version_id,
        second.tag,
        "image",
    )
    assert (
        r.manifest_sha256 == hashlib.sha256((r.folder / "manifest.json").read_bytes()).hexdigest()
    )
    assert len(r.mean) == len(r.std) == 3
    assert r.labels().tolist() == [r.classes.index(r.metadata(i)["label"]) for i in range(len(r))]
    assert r.manifest["parent"] == first.version_id


@pytest.mark.parametrize("fmt", ["npy", "zarr"])
def test_shuffled_indices_cover_every_sample_once(sqlite_store, home, fmt):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.reader import open_version

    image_lake(
        home, per_class=40, recipe=f'modality = "image"\nformat = "{fmt}"\n[image]\nsize = 4\n'
    )
    run_build("pets", workers=1, store=sqlite_store)
    r = open_version("pets")
    order = r.shuffled_indices(3, window_chunks=1)
    assert sorted(order.tolist()) == list(range(len(r))) and order.tolist() != list(range(len(r)))
    np.testing.assert_array_equal(order, r.shuffled_indices(3, window_chunks=1))
    if fmt == "zarr":
        # With a window of one chunk, each chunk's rows come out together.
        chunk = [r._row[i] // 64 + 1000 * r._seg[i] for i in order]
        changes = sum(1 for a, b in zip(chunk, chunk[1:], strict=False) if a != b)
        assert changes == len(set(chunk)) - 1

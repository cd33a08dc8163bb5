"""plan → process → commit on real image files, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.datasets.conftest import image_lake, write_jpeg, write_recipe


def _build(store, dataset="pets", **kw):
    from pipeline.datasets.build import run_build

    return run_build(dataset, workers=1, store=store, **kw)


def _manifest(data_root: Path, version) -> dict:
    return json.loads((data_root / version.path / "manifest.json").read_text())


def test_first_build_publishes_counts_splits_classes_and_train_stats(store, home):
    from pipeline.datasets.reader import open_version
    from pipeline.datasets.recipes import load_recipe

    paths = image_lake(home, per_class=7)
    report = _build(store, max_files=4)  # several shards, several segments
    v = report.version
    assert v is not None and report.decoded == 14 and report.shards == 4
    assert v.samples == 14 and v.train + v.val == 14 and v.parent_id is None and v.added == 14
    assert v.tag == f"pets_v{v.created_at[:10].replace('-', '')}_{v.version_id[:8]}"
    data_root = home / "data"
    m = _manifest(data_root, v)
    assert m["format_version"] == 2 and m["id"] == v.version_id and m["classes"] == ["cat", "dog"]
    recipe = load_recipe("pets")
    expected = {"train": {}, "val": {}}
    for p in paths:
        md5 = hashlib.md5((home / "lake" / p).read_bytes()).hexdigest()
        split = recipe.split_for(p, md5)
        cls = p.split("/")[1]
        expected[split][cls] = expected[split].get(cls, 0) + 1
    for split in ("train", "val"):
        assert m["counts"]["per_split"][split]["classes"] == dict(sorted(expected[split].items()))
    assert len(m["segments"]) == 4 and all(
        len(s["sha256"]) == 64 and s["size_bytes"] > 0 for s in m["segments"]
    )

    r = open_version("pets", store=store)
    assert r.version_id == v.version_id and len(r) == 14
    x, _ = r.split("train").get_batch(np.arange(len(r.split("train"))))
    got_mean = x.astype(np.float64).mean(axis=(0, 2, 3))
    got_std = x.astype(np.float64).std(axis=(0, 2, 3))
    np.testing.assert_allclose(m["mean"], got_mean, atol=1e-3)
    np.testing.assert_allclose(m["std"], got_std, atol=1e-3)
    # Every sample traces back to its lake file.
    for i in range(len(r)):
        meta = r.metadata(i)
        assert hashlib.md5((home / "lake" / meta["path"]).read_bytes()).hexdigest() == meta["md5"]
        assert r.classes[r[i][1]] == meta["path"].split("/")[1] == meta["label"]


def test_rebuild_without_change_publishes_and_decodes_nothing(store, home):
    from pipeline.datasets.queries import list_versions

    image_lake(home)
    first = _build(store).version
    again = _build(store)
    assert again.version is None and again.decoded == 0 and again.shards == 0
    assert [v["version_id"] for v in list_versions("pets", store=store)] == [first.version_id]
    versions_dir = home / "data" / "datasets" / "pets"
    folders = [p.name for p in versions_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert folders == [first.version_id]  # (next to them: the HEAD file and its history)


def test_one_new_file_is_the_only_decode_and_the_parent_is_set(store, home):
    image_lake(home)
    first = _build(store).version
    write_jpeg(home / "lake" / "pets" / "dog" / "new.jpg", seed=777)
    report = _build(store)
    v = report.version
    assert report.decoded == 1
    assert v.parent_id == first.version_id and (v.added, v.removed, v.changed) == (1, 0, 0)
    assert v.samples == first.samples + 1


def test_delete_rename_and_modify_show_in_the_diff(store, home):
    from pipeline.datasets.queries import diff_versions

    image_lake(home)
    first = _build(store).version
    lake = home / "lake" / "pets"
    (lake / "cat" / "000.jpg").unlink()  # removed
    os.rename(lake / "cat" / "001.jpg", lake / "dog" / "moved.jpg")  # removed + added (new label)
    write_jpeg(lake / "dog" / "002.jpg", seed=4242)  # changed content
    report = _build(store)
    v = report.version
    assert report.decoded == 1  # only the modified file: the moved one's content is known
    assert (v.added, v.removed, v.changed) == (1, 2, 1)
    d = diff_versions(first.tag, v.version_id[:10], store=store)
    assert d["counts"] == {"added": 1, "removed": 2, "changed": 1}
    assert [r["path"] for r in d["added"]] == ["pets/dog/moved.jpg"]
    assert [r["path"] for r in d["removed"]] == ["pets/cat/000.jpg", "pets/cat/001.jpg"]
    changed = d["changed"][0]
    assert changed["path"] == "pets/dog/002.jpg" and changed["old_md5"] != changed["new_md5"]
    assert changed["new_md5"] == hashlib.md5((lake / "dog" / "002.jpg").read_bytes()).hexdigest()


def test_duplicate_content_is_processed_once_and_flagged(store, home):
    from pipeline.datasets.queries import versions_containing

    image_lake(home)
    lake = home / "lake" / "pets"
    shutil.copy(lake / "cat" / "003.jpg", lake / "dog" / "zz_copy.jpg")
    shutil.copy(lake / "cat" / "003.jpg", lake / "cat" / "zz_copy.jpg")
    report = _build(store)
    assert report.decoded == 12  # 14 paths, 12 distinct contents
    data_root = home / "data"
    parts = (data_root / report.version.path / "parts.txt").read_text().split()
    lines = [json.loads(x) for p in parts for x in (data_root / p).read_text().splitlines()]
    md5 = hashlib.md5((lake / "cat" / "003.jpg").read_bytes()).hexdigest()
    same = [rec for rec in lines if rec["md5"] == md5]
    assert [(r["path"], r["duplicate"]) for r in same] == [
        ("pets/cat/003.jpg", False),
        ("pets/cat/zz_copy.jpg", True),
        ("pets/dog/zz_copy.jpg", True),
    ]
    assert len({r["split"] for r in same}) == 1  # duplicates never straddle the split
    assert len({(r["segment"], r["row"]) for r in same}) == 1  # stored once
    assert {r["path"] for r in versions_containing(md5, store=store)} == {r["path"] for r in same}


def test_same_lake_gives_the_same_version_id_in_a_fresh_store(store, home, tmp_path, monkeypatch):
    from pipeline.metadata.store import MetadataStore
    from pipeline.settings import get_settings

    image_lake(home)
    first = _build(store).version
    monkeypatch.setenv("DATA_ROOT", str(tmp_path / "other-data"))
    get_settings.cache_clear()
    other = MetadataStore(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        again = _build(other).version
    finally:
        other.dispose()
    assert again.version_id == first.version_id and again.tag == first.tag


def test_augmented_copies_are_for_training_only(store, home):
    from pipeline.datasets.reader import open_version

    recipe = (
        'modality = "image"\n[image]\nsize = 16\n[augment]\ncopies = 2\nops = ["hflip", "color_jitter"]\n'
        "[split]\nval_fraction = 0.3\n"
    )
    image_lake(home, recipe=recipe)
    v = _build(store).version
    r = open_version("pets", v.version_id, store=store)
    train, val = r.split("train"), r.split("val")
    assert len(train) % 3 == 0 and len(train) // 3 + len(val) == 12
    metas = [train.metadata(i) for i in range(len(train))]
    assert sorted(m.get("copy", 0) for m in metas) == sorted([0, 1, 2] * (len(train) // 3))
    assert all("copy" not in val.metadata(i) for i in range(len(val)))


def test_tables_give_one_sample_per_row_and_list_bad_rows_by_line(store, home):
    from pipeline.datasets.queries import get_version
    from pipeline.datasets.reader import open_version

    write_recipe(
        home,
        "rows",
        'modality = "table"\n[table]\nlabel_column = "label"\nfeature_columns = ["a", "b"]\n',
    )
    (home / "lake" / "rows").mkdir()
    (home / "lake" / "rows" / "one.csv").write_text("a,b,label\n1,2,x\n3,,y\n5,6,y\n")
    (home / "lake" / "rows" / "two.csv").write_text("a,b,label\n7,8,x\n9,10,\n")
    v = _build(store, "rows").version
    assert v.samples == 3 and v.invalid == 2
    r = open_version("rows", store=store)
    assert r.classes == ["x", "y"]
    x, y = r.get_batch(range(3))
    rows = {(float(a), float(b), r.classes[int(lab)]) for (a, b), lab in zip(x, y, strict=True)}
    assert rows == {(1.0, 2.0, "x"), (5.0, 6.0, "y"), (7.0, 8.0, "x")}
    assert x.dtype == np.float32
    bad = get_version(v.tag, store=store)["invalid_files"]
    assert [(b["path"], b["line"]) for b in bad] == [("rows/one.csv", 3), ("rows/two.csv", 3)]


def test_arrays_keep_shape_and_dtype(store, home):
    from pipeline.datasets.reader import open_version

    write_recipe(home, "arr", 'modality = "array"\n[array]\nshape = [2, 3]\ndtype = "float32"\n')
    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        for i in range(3):
            p = home / "lake" / "arr" / cls / f"{i}.npy"
            p.parent.mkdir(parents=True, exist_ok=True)
            np.save(p, rng.standard_normal((2, 3)).astype(np.float32))
    _build(store, "arr")
    r = open_version("arr", store=store)
    for i in range(len(r)):
        x, y = r[i]
        np.testing.assert_array_equal(x, np.load(home / "lake" / r.metadata(i)["path"]))
        assert r.classes[y] == r.metadata(i)["label"]


def test_recipe_change_reprocesses_under_the_new_recipe_hash(store, home):
    image_lake(home)
    first = _build(store)
    write_recipe(
        home, "pets", 'modality = "image"\n[image]\nsize = 8\n[split]\nval_fraction = 0.3\n'
    )
    second = _build(store)
    assert second.decoded == 12 and second.version.version_id != first.version.version_id
    from pipeline.datasets.reader import open_version

    assert open_version("pets", store=store).sample_shape == (3, 8, 8)


@pytest.mark.parametrize("fmt", ["npy", "zarr"])
def test_stored_samples_equal_a_fresh_decode(sqlite_store, home, fmt):
    from pipeline.datasets.preprocess import preprocessor_for
    from pipeline.datasets.reader import open_version
    from pipeline.datasets.recipes import load_recipe

    image_lake(home, recipe=f'modality = "image"\nformat = "{fmt}"\n[image]\nsize = 16\n')
    _build(sqlite_store, max_files=5)
    r = open_version("pets", store=sqlite_store)
    assert r.format == fmt
    recipe = load_recipe("pets")
    pre = preprocessor_for(recipe)
    for i in range(len(r)):
        x, _ = r[i]
        fresh = pre.decode(str(home / "lake" / r.metadata(i)["path"]), recipe).samples[0].x
        np.testing.assert_array_equal(x, fresh)


def test_a_file_changed_after_the_scan_is_left_for_the_next_build(store, home):
    from pipeline.datasets.build import commit, plan, process
    from pipeline.lake.scan import scan

    image_lake(home, per_class=3)
    scan(home / "lake", dataset="pets", store=store)
    shards = plan("pets", store=store)
    write_jpeg(home / "lake" / "pets" / "cat" / "000.jpg", seed=31337)  # after the scan
    refs = [process(s, store=store) for s in shards]
    assert sum(r.decoded for r in refs) == 5
    assert refs[0].segment_id != shards[0].segment_id  # named after what it holds
    v = commit("pets", refs, store=store)
    assert v.samples == 5  # the changed file waits for the next scan
    report = _build(store)
    assert report.decoded == 1 and report.version.samples == 6 and report.version.changed == 0


def test_threaded_decode_writes_the_same_segment_as_one_thread(sqlite_store, home, tmp_path):
    """A one-shard plan is decoded in threads by the local build: the segment it writes (rows,
    their order, the invalid file, a file changed after the scan) equals the one-thread one."""
    from pipeline.datasets.build import plan, process
    from pipeline.lake.scan import scan

    image_lake(home, per_class=5)
    (home / "lake" / "pets" / "dog" / "fake.jpg").write_bytes(b"not a jpeg at all")
    scan(home / "lake", dataset="pets", store=sqlite_store)
    (shard,) = plan("pets", store=sqlite_store)
    write_jpeg(home / "lake" / "pets" / "cat" / "002.jpg", seed=4242)  # changed after the scan
    one = process(shard, store=sqlite_store, data_root=tmp_path / "one")
    many = process(shard, store=sqlite_store, data_root=tmp_path / "many", threads=4)
    assert (one.decoded, one.invalid) == (many.decoded, many.invalid) == (10, 1)
    assert one.segment_id == many.segment_id != shard.segment_id  # the changed file is left out
    a, b = tmp_path / "one" / one.path, tmp_path / "many" / many.path
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and "segment.json" in names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_metadata_lines_are_exactly_sorted_json():
    from pipeline.datasets.build import _metadata_line, _Sample

    for sample in (
        _Sample('ds/a "quoted"\\ü.jpg', "0" * 32, None, "val", "f" * 64, 3, None, 12, True, 7, 2),
        _Sample("ds/cat/p.jpg", "1" * 32, "cat", "train", "e" * 64, 0, 100, 12, False, None, 0),
    ):
        rec = {
            "index": 5,
            "path": sample.path,
            "md5": sample.md5,
            "label": sample.label,
            "split": sample.split,
            "segment": sample.segment_id,
            "row": sample.row,
            "size": sample.size,
            "mtime_ns": sample.mtime_ns,
            "duplicate": sample.duplicate,
        }
        if sample.line is not None:
            rec["line"] = sample.line
        if sample.copy:
            rec["copy"] = sample.copy
        assert _metadata_line(5, sample) == json.dumps(rec, sort_keys=True)


def test_a_file_invalid_under_one_recipe_becomes_ok_under_another(store, home):
    from pipeline.lake.ledger_query import list_files

    write_recipe(home, "arr", 'modality = "array"\n[array]\nshape = [2, 2]\n')
    (home / "lake" / "arr" / "a").mkdir(parents=True)
    np.save(home / "lake" / "arr" / "a" / "x.npy", np.zeros((3, 3), dtype=np.float32))
    np.save(home / "lake" / "arr" / "a" / "y.npy", np.zeros((2, 2), dtype=np.float32))
    first = _build(store, "arr")
    assert first.invalid == 1
    assert [f["path"] for f in list_files(status="invalid", store=store)] == ["arr/a/x.npy"]
    write_recipe(home, "arr", 'modality = "array"\n[array]\nshape = [3, 3]\n')
    second = _build(store, "arr")
    assert second.decoded == 2 and second.version.samples == 1  # now y.npy is the bad one
    assert [f["path"] for f in list_files(status="invalid", store=store)] == ["arr/a/y.npy"]


def test_process_is_idempotent_and_shards_travel_as_json(store, home):
    from pipeline.datasets.build import SegmentRef, Shard, commit, plan, process
    from pipeline.lake.scan import scan

    image_lake(home, per_class=3)
    scan(home / "lake", dataset="pets", store=store)
    shards = [
        Shard.from_dict(json.loads(json.dumps(s.to_dict())))
        for s in plan("pets", store=store, max_files=4)
    ]
    assert [len(s.files) for s in shards] == [4, 2]
    first = [process(s, store=store) for s in shards]
    again = [process(s.to_dict(), store=store) for s in shards]
    assert [r.decoded for r in first] == [4, 2] and [r.decoded for r in again] == [0, 0]
    assert all(r.reused for r in again) and [r.segment_id for r in again] == [
        r.segment_id for r in first
    ]
    assert plan("pets", store=store) == []  # everything is processed now
    refs = [SegmentRef.from_dict(json.loads(json.dumps(r.to_dict()))) for r in again]
    v = commit("pets", refs, store=store)
    assert v.samples == 6 and commit("pets", refs, store=store) is None


def test_shard_size_comes_from_the_settings(store, home, monkeypatch):
    from pipeline.datasets.build import plan, run_build
    from pipeline.lake.scan import scan
    from pipeline.settings import get_settings

    image_lake(home, per_class=5)
    scan(home / "lake", dataset="pets", store=store)
    assert [len(s.files) for s in plan("pets", store=store)] == [10]  # default: 512 a shard
    monkeypatch.setenv("SHARD_FILES", "4")
    get_settings.cache_clear()
    assert [len(s.files) for s in plan("pets", store=store)] == [4, 4, 2]
    assert [len(s.files) for s in plan("pets", store=store, max_files=5)] == [5, 5]  # --max-files
    report = run_build("pets", workers=1, store=store)
    assert report.shards == 3 and report.version.samples == 10


def test_a_table_with_other_columns_is_left_out_not_fatal(store, home):
    write_recipe(home, "tab", 'modality = "table"\n[table]\nlabel_column = "label"\n')
    (home / "lake" / "tab").mkdir()
    (home / "lake" / "tab" / "a.csv").write_text("f1,f2,label\n1,2,x\n3,4,y\n")
    (home / "lake" / "tab" / "b.csv").write_text("f1,label\n5,x\n")
    from pipeline.datasets.queries import get_version

    report = _build(store, "tab")
    assert report.invalid == 1
    (bad,) = get_version(report.version.tag, store=store)["invalid_files"]
    assert "sample shape" in bad["reason"]
    # The first file (in md5 order) sets the shape; the other one is left out.
    assert report.version.samples == (1 if bad["path"] == "tab/a.csv" else 2)


def test_version_id_is_the_documented_sha256_whatever_the_sample_order():
    """The id is DESIGN's formula (a format tag, the dataset, the recipe hash, then the sorted
    md5 / label / split lines), spelled out here independently of the code."""
    from pipeline.datasets.manifest import version_id_for

    samples = [("b" * 32, "dog", "val"), ("a" * 32, None, "train"), ("a" * 32, "cat", "train")]
    expected = hashlib.sha256(
        b"laketrain-version-1\npets\nrh123\n"
        + b"".join(
            f"{m}\t{lab}\t{s}\n".encode()
            for m, lab, s in [
                ("a" * 32, "", "train"),
                ("a" * 32, "cat", "train"),
                ("b" * 32, "dog", "val"),
            ]
        )
    ).hexdigest()
    assert version_id_for("pets", "rh123", samples) == expected
    assert version_id_for("pets", "rh123", samples[::-1]) == expected
    assert version_id_for("cats", "rh123", samples) != expected


def test_segments_are_filled_in_lake_path_order(store, home, monkeypatch):
    """Shards take the files in path order, so a version read in order walks each segment
    once, front to back, and a leaf's ~128 consecutive samples sit in one or two segments
    (in md5 order each leaf named ~120 segments at a million samples: its summary, its
    index's segment table and a reader's accesses all paid for it)."""
    from pipeline.datasets.build import plan, run_build
    from pipeline.datasets.reader import open_version
    from pipeline.lake.scan import scan
    from pipeline.settings import get_settings

    image_lake(home, per_class=8, classes=("ant", "bee", "cat"))
    monkeypatch.setenv("SHARD_FILES", "5")
    get_settings.cache_clear()
    scan(home / "lake", dataset="pets", store=store)
    shards = plan("pets", store=store)
    in_order = [f.path for s in shards for f in s.files]
    assert in_order == sorted(in_order) and len(shards) == 5

    v = run_build("pets", workers=1, store=store).version
    r = open_version("pets", v.version_id, store=store)
    placed = [(r.metadata(i)["segment"], r.metadata(i)["row"]) for i in range(len(r))]
    runs = [seg for k, (seg, _) in enumerate(placed) if k == 0 or placed[k - 1][0] != seg]
    assert len(runs) == len(set(runs)) == 5  # each segment one contiguous run
    # Inside a segment rows stay in md5 order: its bytes are a function of its md5 set, as
    # its name is (segments.py), whichever paths brought the contents.
    for k in range(5):
        rows = sorted(row for _, row in placed[5 * k : 5 * k + 5])
        assert rows == list(range(len(rows)))

    # An increment plans from the change set (build/changes.py): in path order too (in md5
    # order these four new files come as cat, cat, ant, ant).
    for cls, seed in (("cat", 70), ("ant", 71), ("cat", 72), ("ant", 73)):
        write_jpeg(home / "lake" / "pets" / cls / f"new{seed}.jpg", seed=seed)
    scan(home / "lake", dataset="pets", store=store)
    shards = plan("pets", store=store)
    in_order = [f.path for s in shards for f in s.files]
    assert in_order == sorted(in_order) and len(in_order) == 4

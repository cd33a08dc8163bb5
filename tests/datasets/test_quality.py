"""The quality report at commit, on real image files (and tables): near-duplicates of the
stored samples, exact duplicates, label conflicts, leaks across splits, drift, and the cost of
a rebuild (only new samples are hashed)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import ImageDraw

from tests.datasets.conftest import write_recipe
from tests.datasets.quality_lake import (
    QUALITY_RECIPE,
    distinct_photos,
    planted_edits,
    random_crops,
    save_jpeg,
)


def _build(store, dataset="photos"):
    from pipeline.datasets.build import run_build

    return run_build(dataset, workers=1, store=store).version


def _manifest(home: Path, version) -> dict:
    return json.loads((home / "data" / version.path / "manifest.json").read_text())


def _splits(home: Path, version) -> dict[str, str]:
    from pipeline.datasets.reader import open_version

    reader = open_version(version.dataset, version.version_id)
    return {reader.metadata(i)["path"]: reader.metadata(i)["split"] for i in range(len(reader))}


def _report(store, version):
    from pipeline.datasets.quality.report import QualityReport
    from pipeline.metadata.datasets import DatasetVersion

    with store.session() as session:
        row = session.get(DatasetVersion, version.version_id)
        return QualityReport.from_dict(row.quality)


@pytest.fixture
def photos():
    return dict(distinct_photos())


def test_planted_near_duplicates_are_found_and_join_the_split_of_their_original(
    sqlite_store, home, photos
):
    lake = home / "lake" / "photos"
    write_recipe(home, "photos", QUALITY_RECIPE)
    originals = ["astronaut", "coffee", "chelsea", "rocket", "sklearn0", "horse", "clock", "moon"]
    for i, name in enumerate(originals):
        save_jpeg(lake / ("a" if i % 2 else "b") / f"{name}.jpg", photos[name])
    first = _build(sqlite_store)
    before = _splits(home, first)
    assert _report(sqlite_store, first).near_duplicates.groups == 0

    planted = ["astronaut", "coffee", "chelsea"]
    for name in planted:
        for edit, (im, quality) in planted_edits(photos[name]).items():
            save_jpeg(lake / "c" / f"{name}-{edit}.jpg", im, quality)
    second = _build(sqlite_store)
    after = _splits(home, second)
    report = _report(sqlite_store, second)

    # None of the existing samples changed split.
    assert {p: after[p] for p in before} == before
    groups = {tuple(g["paths"]) for g in report.near_duplicates.listed}
    assert report.near_duplicates.groups == len(planted) == len(groups)
    for name in planted:
        original = next(p for p in before if p.endswith(f"/{name}.jpg"))
        edits = [f"photos/c/{name}-{e}.jpg" for e in planted_edits(photos[name])]
        assert tuple(sorted([original, *edits])) in groups
        # Each planted copy joins its original's split: no leak.
        assert {after[p] for p in edits} == {before[original]}
    assert report.leaks.count == 0 and report.metrics()["cross_split_near_duplicates"] == 0
    assert report.near_duplicates.new_samples == 4 * len(planted)  # only the new ones hashed


def test_distinct_photos_and_random_crops_form_no_near_duplicate_group(sqlite_store, home, photos):
    lake = home / "lake" / "photos"
    write_recipe(home, "photos", QUALITY_RECIPE)
    items = list(photos.items())
    for name, im in items + random_crops(items):
        save_jpeg(lake / "x" / f"{name}.jpg", im)
    version = _build(sqlite_store)
    report = _report(sqlite_store, version)
    assert report.samples == len(items) * 4
    assert report.near_duplicates.groups == 0, report.near_duplicates.listed
    assert report.near_duplicates.threshold == 4


def test_exact_duplicates_under_two_labels_are_a_label_conflict(sqlite_store, home, photos):
    lake = home / "lake" / "photos"
    write_recipe(home, "photos", QUALITY_RECIPE)
    save_jpeg(lake / "a" / "coffee.jpg", photos["coffee"])
    save_jpeg(lake / "b" / "coffee-again.jpg", photos["coffee"])  # same bytes, other label
    save_jpeg(lake / "a" / "rocket.jpg", photos["rocket"])
    save_jpeg(lake / "a" / "rocket-copy.jpg", photos["rocket"])  # same bytes, same label
    version = _build(sqlite_store)
    report = _report(sqlite_store, version)
    md5 = hashlib.md5((lake / "a" / "coffee.jpg").read_bytes()).hexdigest()
    assert report.label_conflicts.count == 1
    assert report.label_conflicts.listed[0]["md5"] == md5
    assert report.label_conflicts.listed[0]["labels"] == ["a", "b"]
    assert report.label_conflicts.listed[0]["paths"] == [
        "photos/a/coffee.jpg",
        "photos/b/coffee-again.jpg",
    ]
    assert report.exact_duplicates.groups == 2 and report.exact_duplicates.samples == 4
    assert report.metrics()["label_conflicts"] == 1


def _bridge_case(tmp: Path, photo):
    """Three files from one photo: C the photo, A with a grey box on its left edge, B with one
    on its right edge. A and B each differ from C in a few bits (different bits: the boxes
    cover different cells), from each other in more than 4, and fall in different splits.
    Found by a small deterministic search over box widths and JPEG qualities, on the samples
    as the recipe stores them."""
    from pipeline.datasets.preprocess.image import decode_image
    from pipeline.datasets.quality.phash import hamming, perceptual_hash
    from pipeline.datasets.recipes import ImageShape, split_of

    spec = ImageShape(size=64, channels=3, resize="center_crop")
    base = photo.resize((128, 128))

    def boxed(fraction, right):
        out = base.copy()
        w = int(128 * fraction)
        box = (127 - w, 0, 127, 127) if right else (0, 0, w, 127)
        ImageDraw.Draw(out).rectangle(box, fill=(128, 128, 128))
        return out

    def encoded(im, quality, name):
        path = save_jpeg(tmp / name, im, quality)
        data = path.read_bytes()
        h = perceptual_hash(decode_image(str(path), spec)[None])[0][0]
        return data, h, split_of(hashlib.md5(data).hexdigest(), 0.3)

    c = encoded(base, 92, "c.jpg")
    fractions = [round(f, 3) for f in np.arange(0.1, 0.3, 0.025)]
    for fa in fractions:
        for fb in fractions:
            for qa in range(90, 99):
                a = encoded(boxed(fa, False), qa, "a.jpg")
                if hamming(a[1], c[1]) > 4:
                    break
                for qb in range(90, 99):
                    b = encoded(boxed(fb, True), qb, "b.jpg")
                    if hamming(b[1], c[1]) > 4:
                        break
                    if a[2] != b[2] and hamming(a[1], b[1]) > 4:
                        return a, b, c
    raise AssertionError("no bridging case found")


def test_a_new_file_bridging_two_groups_is_reported_as_a_leak(sqlite_store, home, photos, tmp_path):
    a, b, c = _bridge_case(tmp_path, photos["coffee"])
    lake = home / "lake" / "photos"
    write_recipe(home, "photos", QUALITY_RECIPE)
    for name, (data, _, _) in (("a", a), ("b", b)):
        (lake / "k").mkdir(parents=True, exist_ok=True)
        (lake / "k" / f"{name}.jpg").write_bytes(data)
    first = _build(sqlite_store)
    before = _splits(home, first)
    assert before == {"photos/k/a.jpg": a[2], "photos/k/b.jpg": b[2]} and a[2] != b[2]
    assert _report(sqlite_store, first).near_duplicates.groups == 0

    (lake / "k" / "c.jpg").write_bytes(c[0])
    second = _build(sqlite_store)
    after = _splits(home, second)
    report = _report(sqlite_store, second)
    assert {p: after[p] for p in before} == before  # neither existing sample moved
    paths = ["photos/k/a.jpg", "photos/k/b.jpg", "photos/k/c.jpg"]
    assert report.near_duplicates.listed[0]["paths"] == paths
    assert report.leaks.count == 1 and report.leaks.cross_split_near_duplicates == 1
    assert report.leaks.listed == [
        {"kind": "near_duplicate", "paths": paths, "splits": ["train", "val"]}
    ]


def test_report_is_in_the_manifest_and_the_store_and_an_unchanged_rebuild_hashes_nothing(
    store, home, photos, monkeypatch
):
    from pipeline.datasets.quality import neardup

    calls: list[int] = []
    real = neardup._hash_new  # the samples whose hashes (stored by process) are looked up

    def counting(data_root, recipe, kind, new):
        calls.append(len(new))
        return real(data_root, recipe, kind, new)

    monkeypatch.setattr(neardup, "_hash_new", counting)
    lake = home / "lake" / "photos"
    write_recipe(home, "photos", QUALITY_RECIPE)
    for name in ("coffee", "rocket", "horse"):
        save_jpeg(lake / "a" / f"{name}.jpg", photos[name])
    first = _build(store)
    assert sum(calls) == 3
    manifest = _manifest(home, first)
    assert manifest["quality"] == _report(store, first).to_dict()
    assert manifest["quality"]["samples"] == 3

    index = home / "data" / "quality" / "photos"
    listing = sorted(p.relative_to(index) for p in index.rglob("*"))
    assert _build(store) is None  # unchanged: no version, nothing hashed, no index file
    assert sum(calls) == 3
    assert sorted(p.relative_to(index) for p in index.rglob("*")) == listing

    save_jpeg(lake / "b" / "clock.jpg", photos["clock"])
    second = _build(store)
    assert sum(calls) == 4  # one new sample, one hash
    report = _report(store, second)
    assert report.near_duplicates.new_samples == 1
    assert report.drift.parent == first.tag and report.drift.new_classes == ["b"]
    assert report.drift.per_split[_splits(home, second)["photos/b/clock.jpg"]]["b"] == {
        "count": 1,
        "change": 1,
    }
    assert report.drift.label_tv_distance == pytest.approx(0.25)


def test_invalid_files_count_those_new_since_the_parent(sqlite_store, home, photos):
    lake = home / "lake" / "photos"
    write_recipe(home, "photos", QUALITY_RECIPE)
    save_jpeg(lake / "a" / "coffee.jpg", photos["coffee"])
    (lake / "a" / "broken.jpg").write_bytes(b"not a jpeg")
    first = _report(sqlite_store, _build(sqlite_store))
    assert first.invalid.count == 1 and first.invalid.new_since_parent == 1
    (lake / "a" / "broken2.jpg").write_bytes(b"not a jpeg either")
    save_jpeg(lake / "a" / "rocket.jpg", photos["rocket"])  # a new sample: a new version
    second = _report(sqlite_store, _build(sqlite_store))
    assert second.invalid.count == 2 and second.invalid.new_since_parent == 1
    assert [f["path"] for f in second.invalid.files] == [
        "photos/a/broken.jpg",
        "photos/a/broken2.jpg",
    ]
    assert second.metrics()["invalid_fraction"] == pytest.approx(2 / 4)


TABLE_RECIPE = (
    'modality = "table"\n[table]\nlabel_column = "label"\nfeature_columns = ["x", "y", "k"]\n'
    "\n[split]\nval_fraction = 0.3\n"
)


def test_tables_identical_feature_rows_are_grouped_and_drift_is_computed(sqlite_store, home):
    lake = home / "lake" / "rows"
    lake.mkdir(parents=True)
    write_recipe(home, "rows", TABLE_RECIPE)
    (lake / "one.csv").write_text("x,y,k,label\n1.0,2.0,7,a\n3.0,4.0,7,b\n5.0,6.0,7,a\n")
    # The first row again, written differently (1 vs 1.0, -0 vs 0 do not matter), other label.
    (lake / "two.csv").write_text("x,y,k,label\n1,2.00,7,b\n9.0,,7,a\n")
    first = _build(sqlite_store, "rows")
    report = _report(sqlite_store, first)
    assert report.near_duplicates.kind == "table" and report.near_duplicates.groups == 1
    group = report.near_duplicates.listed[0]
    assert group["paths"] == ["rows/one.csv", "rows/two.csv"] and group["labels"] == ["a", "b"]
    assert [list(x) for x in group["lines"]] == [["rows/one.csv", 2], ["rows/two.csv", 2]]
    columns = report.drift.columns
    assert columns["y"]["missing_rate"] == pytest.approx(0.2)
    assert (columns["x"]["min"], columns["x"]["max"]) == (1.0, 5.0)  # 9.0: its line is invalid
    assert report.drift.constant_columns == ["k"]

    (lake / "three.csv").write_text("x,y,k,label\n20.0,1.0,8,c\n")
    report = _report(sqlite_store, _build(sqlite_store, "rows"))
    assert report.drift.new_classes == ["c"] and report.drift.label_tv_distance > 0
    assert columns["x"]["max"] == report.drift.columns["x"]["parent_max"] == 5.0
    assert report.drift.columns["x"]["max"] == 20.0 and report.drift.constant_columns == []
    assert report.near_duplicates.new_samples == 1


def test_near_duplicates_are_found_in_zarr_segments_too(sqlite_store, home, photos):
    lake = home / "lake" / "photos"
    write_recipe(home, "photos", 'format = "zarr"\n' + QUALITY_RECIPE)
    save_jpeg(lake / "a" / "coffee.jpg", photos["coffee"])
    save_jpeg(lake / "a" / "rocket.jpg", photos["rocket"])
    im, quality = planted_edits(photos["coffee"])["reencoded"]
    save_jpeg(lake / "a" / "coffee-q30.jpg", im, quality)
    report = _report(sqlite_store, _build(sqlite_store))
    assert [g["paths"] for g in report.near_duplicates.listed] == [
        ["photos/a/coffee-q30.jpg", "photos/a/coffee.jpg"]
    ]


def test_a_new_near_duplicate_distance_indexes_the_existing_samples_too(sqlite_store, home, photos):
    lake = home / "lake" / "photos"
    write_recipe(home, "photos", QUALITY_RECIPE)
    save_jpeg(lake / "a" / "coffee.jpg", photos["coffee"])
    save_jpeg(lake / "a" / "rocket.jpg", photos["rocket"])
    _build(sqlite_store)
    # The distance changes (a new index), then a near-duplicate of an EXISTING sample arrives.
    write_recipe(home, "photos", QUALITY_RECIPE + "\n[quality]\nnear_duplicate_distance = 6\n")
    im, quality = planted_edits(photos["coffee"])["brightened"]
    save_jpeg(lake / "a" / "coffee-bright.jpg", im, quality)
    report = _report(sqlite_store, _build(sqlite_store))
    assert report.near_duplicates.threshold == 6
    assert [g["paths"] for g in report.near_duplicates.listed] == [
        ["photos/a/coffee-bright.jpg", "photos/a/coffee.jpg"]
    ]
    assert report.near_duplicates.new_samples == 3  # the new index took every content, once


def test_samples_too_small_for_a_perceptual_hash_form_no_near_duplicate_group():
    """8x8 digits: a 64-bit hash of 64 pixels compares pixels, not structure, and put distinct
    digits of one class within 4 bits of each other, moving them into one another's split."""
    from sklearn.datasets import load_digits

    from pipeline.datasets.quality.phash import MIN_SIDE, perceptual_hash

    images = (load_digits().images * (255 / 16)).astype(np.uint8)[:, None]  # (N, 1, 8, 8)
    _hashes, unhashable = perceptual_hash(images)
    assert unhashable.all()
    big = np.repeat(np.repeat(images[:50], MIN_SIDE // 8, axis=2), MIN_SIDE // 8, axis=3)
    assert not perceptual_hash(big)[1].all()  # the same digits at 16x16 are hashed

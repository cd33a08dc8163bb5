"""gc: a dry run changes nothing; --apply keeps what kept versions and training runs use."""

from __future__ import annotations

import numpy as np
import pytest

from tests.datasets.conftest import image_lake, write_jpeg


def _segments_on_disk(data_root):
    return sorted(
        p.name for p in (data_root / "segments").glob("*/*") if not p.name.startswith(".")
    )


def _three_versions(store, home):
    """v1: 8 files; v2: all 8 rewritten (v1's segments now unused); v3: v2 + one new file
    (v2's segments shared with v3)."""
    from pipeline.datasets.build import run_build

    image_lake(home, per_class=4)
    v1 = run_build("pets", workers=1, store=store, max_files=4).version
    for cls in ("cat", "dog"):
        for i in range(4):
            write_jpeg(
                home / "lake" / "pets" / cls / f"{i:03d}.jpg",
                seed=500 + i + (10 if cls == "dog" else 0),
            )
    v2 = run_build("pets", workers=1, store=store, max_files=4).version
    write_jpeg(home / "lake" / "pets" / "dog" / "new.jpg", seed=900)
    v3 = run_build("pets", workers=1, store=store, max_files=4).version
    return v1, v2, v3


def test_gc_dry_run_then_apply_keeps_referenced_segments(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.gc import collect
    from pipeline.datasets.manifest import VersionNotFound
    from pipeline.datasets.queries import list_versions
    from pipeline.datasets.reader import open_version

    data_root = home / "data"
    v1, v2, v3 = _three_versions(store, home)
    before = _segments_on_disk(data_root)

    dry = collect(keep_last=1, min_age_s=0, store=store)
    assert not dry.applied
    assert {v["version_id"] for v in dry.versions} == {v1.version_id, v2.version_id}
    segs = {
        v.version_id: {
            s["id"] for s in open_version("pets", v.version_id, store=store).manifest["segments"]
        }
        for v in (v1, v2, v3)
    }
    planned = {s["segment_id"] for s in dry.segments}
    # v1's segments are used by no kept version; v2's are shared with v3, so they stay.
    assert planned == segs[v1.version_id] and len(planned) == 2
    assert segs[v2.version_id] <= segs[v3.version_id]
    assert _segments_on_disk(data_root) == before  # nothing deleted
    assert len(list_versions("pets", store=store)) == 3

    applied = collect(keep_last=1, min_age_s=0, apply=True, store=store)
    assert applied.applied and {s["segment_id"] for s in applied.segments} == planned
    assert set(_segments_on_disk(data_root)) == set(before) - planned
    assert [v["version_id"] for v in list_versions("pets", store=store)] == [v3.version_id]
    with pytest.raises(VersionNotFound):
        open_version("pets", v1.version_id, store=store)
    r = open_version("pets", store=store)
    x, _ = r.get_batch(np.arange(len(r)))  # every kept segment is still readable
    assert x.shape[0] == v3.samples

    # The contents of the deleted segments come back in the lake: they are decoded again.
    image_lake(home, per_class=4)  # rewrites the original v1 files
    report = run_build("pets", workers=1, store=store)
    assert report.decoded == 8
    assert report.version.samples == v1.samples + 1


def test_gc_never_deletes_a_version_a_training_run_used(store, home):
    from pipeline.datasets.gc import collect
    from pipeline.datasets.reader import open_version

    runs = pytest.importorskip("pipeline.runs")
    v1, v2, v3 = _three_versions(store, home)
    runs.record_run_started("run-1", "pets", v1.version_id, {"epochs": 1}, store=store)
    plan = collect(keep_last=1, min_age_s=0, apply=True, store=store)
    assert {v["version_id"] for v in plan.versions} == {v2.version_id}
    assert plan.kept_for_runs == [v1.version_id]
    for v in (v1, v3):
        r = open_version("pets", v.version_id, store=store)
        assert r.get_batch(np.arange(len(r)))[0].shape[0] == v.samples


def test_gc_removes_leftovers_of_killed_builds_but_not_young_ones(store, home):
    from pipeline.datasets.gc import collect

    image_lake(home, per_class=2)
    from pipeline.datasets.build import run_build

    v = run_build("pets", workers=1, store=store).version
    ds = home / "data" / "datasets" / "pets"
    (ds / ".staging-deadbeef").mkdir()
    (ds / ".staging-deadbeef" / "metadata.jsonl").write_text("{}\n")
    rh = v.path  # noqa: F841
    orphan = next((home / "data" / "segments").iterdir()) / ("f" * 64)
    orphan.mkdir()
    (orphan / "x.npy").write_bytes(b"partial")
    young = collect(store=store)  # default min age: an hour
    assert young.leftovers == [] and young.segments == []
    old = collect(min_age_s=0, apply=True, store=store)
    assert "datasets/pets/.staging-deadbeef" in old.leftovers
    assert any(s["path"].endswith("f" * 64) and not s["recorded"] for s in old.segments)
    assert not (ds / ".staging-deadbeef").exists() and not orphan.exists()
    assert (ds / v.version_id / "manifest.json").is_file()


def test_gc_rejects_a_keep_last_below_one(store):
    from pipeline.datasets.gc import collect

    with pytest.raises(ValueError, match="--keep-last must be at least 1"):
        collect(keep_last=0, store=store)

"""gc: a dry run changes nothing; --apply keeps what kept versions and training runs use."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tests.datasets.conftest import image_lake, write_jpeg


def _segments_on_disk(data_root):
    return sorted(
        p.name
        for p in (data_root / "segments").glob("*/*")
        if not p.name.startswith(".") and not p.parent.name.startswith(".")  # .leases
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
    (recipe_dir,) = [p for p in (home / "data" / "segments").iterdir() if p.name[0] != "."]
    orphan = recipe_dir / ("f" * 64)
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


@pytest.mark.slow
def test_gc_during_a_build_never_leaves_a_recorded_segment_without_its_folder(store, home):
    """A build publishes a segment folder and pauses before recording it; gc --apply (no
    minimum age) runs meanwhile. gc must wait for the record, so the store's processed samples
    and the folders on disk still agree afterwards, and the next build reads every sample."""
    import subprocess
    import sys
    import threading
    import time
    from pathlib import Path

    from sqlalchemy import select

    from pipeline.datasets.build import run_build
    from pipeline.datasets.gc import collect
    from pipeline.datasets.reader import open_version
    from pipeline.metadata.datasets import ProcessedSample, Segment

    image_lake(home, per_class=2)
    run_build("pets", workers=1, store=store)
    write_jpeg(home / "lake" / "pets" / "dog" / "new.jpg", seed=777)
    build = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "build", "pets", "--workers", "1"],
        env={
            **__import__("os").environ,
            "LAKETRAIN_TEST_PAUSE_AT": "segment_renamed",
            "LAKETRAIN_TEST_PAUSE_SECONDS": "4",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        for line in build.stderr:  # type: ignore[union-attr]
            if line.strip() == "LAKETRAIN_PAUSED_AT segment_renamed":
                break
        else:
            raise AssertionError(f"the build never paused: {build.wait()}")
        plans = []
        gc = threading.Thread(
            target=lambda: plans.append(collect(keep_last=1, min_age_s=0, apply=True, store=store))
        )
        gc.start()
        time.sleep(1.5)
        assert gc.is_alive(), "gc deleted while a build held a published, unrecorded segment"
        assert build.wait(timeout=120) == 0, build.stderr.read()  # type: ignore[union-attr]
        gc.join(timeout=120)
        assert not gc.is_alive() and plans[0].applied
    finally:
        if build.poll() is None:
            build.kill()
    data_root = home / "data"
    with store.session() as session:
        recorded = set(session.scalars(select(ProcessedSample.segment_id).distinct()))
        paths = {s.segment_id: s.path for s in session.scalars(select(Segment))}
    for seg_id in recorded - {None}:
        assert (data_root / paths[seg_id] / "segment.json").is_file(), seg_id
    run_build("pets", workers=1, store=store)  # decodes new.jpg again if gc took its segment
    r = open_version("pets", store=store)
    assert len(r) == 5 and any(r.metadata(i)["path"].endswith("new.jpg") for i in range(len(r)))
    x, _ = r.get_batch(list(range(len(r))))  # every segment the version uses is there
    assert x.shape[0] == 5


def test_gc_sweeps_digests_of_versions_that_are_no_longer_a_head(store, home, caplog):
    """A commit keeps only its new head's digest and near-duplicate groups; one left behind (a
    head moved without a commit, a crash before the sweep, a dataset the store forgot) is
    collected, old enough."""
    from pipeline.datasets.build import run_build
    from pipeline.datasets.build.digest import path_of
    from pipeline.datasets.gc import collect
    from pipeline.datasets.quality import neargroups

    data_root = home / "data"
    v1, v2, v3 = _three_versions(store, home)
    head = path_of(data_root, "pets", v3.version_id)
    head_groups = neargroups.path_of(data_root, "pets", v3.version_id)
    assert head.is_file() and head_groups.is_file()
    folder = head.parent
    stale = [
        folder / f"{v1.version_id}.digest",  # a version no longer the head
        folder / f"{v2.version_id}.neargroups",
        folder / f".{v3.version_id}.digest.4242.tmp",  # a killed write's temp file
        data_root / "digests" / "gone" / f"{'a' * 64}.digest",  # a dataset the store forgot
    ]
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(head.read_bytes())

    assert collect(store=store).leftovers == []  # default min age: nothing young goes
    dry = collect(min_age_s=0, store=store)
    want = sorted(str(p.relative_to(data_root)) for p in stale)
    assert sorted(r for r in dry.leftovers if r.startswith("digests/")) == want
    assert all(p.is_file() for p in stale)  # a dry run deletes nothing

    applied = collect(min_age_s=0, apply=True, store=store)
    assert sorted(r for r in applied.leftovers if r.startswith("digests/")) == want
    assert not any(p.exists() for p in stale)
    assert head.is_file() and head_groups.is_file()  # the head's own stay
    # ... and still serves the next delta commit.
    from tests.datasets.conftest import write_jpeg

    write_jpeg(home / "lake" / "pets" / "cat" / "later.jpg", seed=901)
    with caplog.at_level(logging.WARNING, logger="laketrain"):
        v4 = run_build("pets", workers=1, store=store).version
    fallbacks = [
        r for r in caplog.records if "digest" in r.getMessage() or "groups" in r.getMessage()
    ]
    assert not fallbacks
    assert v4.samples == v3.samples + 1
    assert path_of(data_root, "pets", v4.version_id).is_file() and not head.exists()
    assert neargroups.path_of(data_root, "pets", v4.version_id).is_file()
    assert not head_groups.exists()

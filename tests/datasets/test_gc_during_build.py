"""gc during a build (issue 11's repro, with real builds): a build paused between plan and
commit relies on the processed rows of a segment that no kept version references; a
``gc --apply --keep-last 1`` in the pause must leave that segment alone (the plan leased it),
and where it did take it anyway (the lease ran out), the commit must fail loudly rather than
publish without those files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.datasets.conftest import image_lake, write_jpeg
from tests.datasets.test_crash import _wait_for_marker

pytestmark = pytest.mark.slow


def _lake_with_an_orphaned_segment(store, home) -> tuple[list[str], str]:
    """Build a,b; add class z and build (z in its own segment); remove z, add one file and
    build; then z's segment is referenced only by the second version. Put z back (same
    content: its processed rows are reused, nothing to decode). Return z's paths and the id of
    z's segment."""
    from pipeline.datasets.build import run_build
    from pipeline.datasets.reader import open_version

    image_lake(home, per_class=2, classes=("a", "b"))
    run_build("pets", workers=1, store=store)
    z = [f"pets/z/{i:03d}.jpg" for i in range(3)]
    for i, rel in enumerate(z):
        write_jpeg(home / "lake" / rel, seed=5000 + i)
    with_z = run_build("pets", workers=1, store=store).version
    r = open_version("pets", with_z.version_id, store=store)
    z_segments = {r.metadata(i)["segment"] for i in range(len(r)) if r.metadata(i)["label"] == "z"}
    assert len(z_segments) == 1
    shutil.move(home / "lake" / "pets" / "z", home / "z-away")
    write_jpeg(home / "lake" / "pets" / "a" / "late.jpg", seed=7000)
    run_build("pets", workers=1, store=store)
    shutil.move(home / "z-away", home / "lake" / "pets" / "z")
    return z, z_segments.pop()


def _paused_build(home: Path) -> tuple[subprocess.Popen, Path]:
    resume = home / "resume-build"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "build", "pets", "--workers", "1"],
        env={
            **os.environ,
            "COLUMNS": "300",
            "LAKETRAIN_TEST_PAUSE_AT": "before_commit",
            "LAKETRAIN_TEST_PAUSE_SECONDS": "300",
            "LAKETRAIN_TEST_RESUME_FILE": str(resume),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    _wait_for_marker(proc, "before_commit")
    return proc, resume


def _resume(proc: subprocess.Popen, resume: Path) -> tuple[int, str, str]:
    resume.touch()
    out, err = proc.communicate(timeout=180)
    return proc.returncode, out, err


def _z_in_head(store) -> int:
    from pipeline.datasets.reader import open_version

    r = open_version("pets", store=store)
    return sum(1 for i in range(len(r)) if r.metadata(i)["label"] == "z")


def test_gc_during_a_build_keeps_the_segments_its_plan_counts_on(store, home):
    from pipeline.datasets.gc import collect
    from pipeline.datasets.reader import open_version

    z, z_segment = _lake_with_an_orphaned_segment(store, home)
    proc, resume = _paused_build(home)
    try:
        plan = collect(keep_last=1, min_age_s=0, apply=True, store=store)
        assert z_segment not in {s["segment_id"] for s in plan.segments}
        assert z_segment in plan.kept_for_builds
        rc, out, err = _resume(proc, resume)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, err
    assert "no change" not in out and "published" in out, out
    assert "0 file(s) decoded" in out  # z came back from its kept segment
    assert _z_in_head(store) == len(z)
    reader = open_version("pets", store=store)
    assert reader.get_batch(list(range(len(reader))))[0].shape[0] == 8  # every segment is there
    # The commit released what the build leased: a later gc may collect again.
    assert not list((home / "data" / "segments" / ".leases" / "pets").glob("*.json"))


def test_a_commit_whose_counted_on_rows_were_deleted_fails_loudly_and_the_rerun_decodes(
    store, home
):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.gc import collect
    from pipeline.datasets.reader import open_version

    z, z_segment = _lake_with_an_orphaned_segment(store, home)
    head = open_version("pets", store=store).version_id
    proc, resume = _paused_build(home)
    try:
        # The plan's lease ran out before the commit (a DAG run stuck longer than a lease
        # lasts): gc may now take the segment.
        for lease in (home / "data" / "segments" / ".leases" / "pets").glob("*.json"):
            body = json.loads(lease.read_text())
            lease.write_text(json.dumps({**body, "expires_at": time.time() - 1}))
        plan = collect(keep_last=1, min_age_s=0, apply=True, store=store)
        assert z_segment in {s["segment_id"] for s in plan.segments}
        rc, out, err = _resume(proc, resume)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 1, (out, err)
    assert "no change" not in out
    message = " ".join(err.split())
    for rel in z:
        assert rel in message
    assert "rerun the build" in message
    assert open_version("pets", store=store).version_id == head  # nothing published

    report = run_build("pets", workers=1, store=store)
    assert report.decoded == len(z)
    assert report.version is not None and _z_in_head(store) == len(z)


def test_gc_prunes_leases_long_expired_and_keeps_the_others(store, home):
    from pipeline.datasets.gc import collect
    from pipeline.datasets.leases import LEASE_SECONDS, read_leases, take_lease

    data_root = home / "data"
    live = take_lease(data_root, "pets", "rh", ["s1"], kind="plan")
    recent = take_lease(data_root, "pets", "rh", ["s2"], kind="plan")
    old = take_lease(data_root, "pets", "rh", ["s3"], kind="plan")
    for path, expired_at in ((recent, time.time() - 60), (old, time.time() - 3 * LEASE_SECONDS)):
        body = json.loads(path.read_text())
        path.write_text(json.dumps({**body, "expires_at": expired_at}))
    collect(keep_last=1, min_age_s=0, apply=True, store=store)
    assert {lease.path for lease in read_leases(data_root, "pets")} == {live, recent}

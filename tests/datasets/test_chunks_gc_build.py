"""gc --apply while a build's commit has written its chunk files but not recorded the version:
gc waits for the commit, so no chunk the new version reuses from a collectable version is
deleted under it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.datasets.conftest import image_lake, write_jpeg

pytestmark = pytest.mark.slow


def test_gc_during_a_commit_keeps_the_chunks_it_reuses(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.chunkread import walk_leaves
    from pipeline.datasets.gc import collect
    from pipeline.datasets.reader import open_version

    image_lake(home, per_class=3)
    lake = home / "lake" / "pets"
    v1 = run_build("pets", workers=1, store=store).version
    dog = (lake / "dog" / "000.jpg").read_bytes()
    (lake / "dog" / "000.jpg").unlink()
    run_build("pets", workers=1, store=store)  # v2: the head; v1 and its dog leaf collectable
    (lake / "dog" / "000.jpg").write_bytes(dog)
    write_jpeg(lake / "cat" / "new.jpg", seed=4242)  # v3: v1's dog leaf again, a new cat leaf
    build = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "build", "pets", "--workers", "1"],
        env={
            **os.environ,
            "LAKETRAIN_TEST_PAUSE_AT": "chunks_written",
            "LAKETRAIN_TEST_PAUSE_SECONDS": "4",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    plans: list = []
    try:
        for line in build.stderr:  # type: ignore[union-attr]
            if line.strip() == "LAKETRAIN_PAUSED_AT chunks_written":
                break
        else:
            raise AssertionError(f"the build never paused: {build.wait()}")
        gc = threading.Thread(
            target=lambda: plans.append(collect(keep_last=1, min_age_s=0, apply=True, store=store))
        )
        gc.start()
        time.sleep(1.5)
        assert gc.is_alive(), "gc ran while a commit held chunk files it had not recorded"
        assert build.wait(timeout=120) == 0, build.stderr.read()  # type: ignore[union-attr]
        gc.join(timeout=120)
        assert not gc.is_alive() and plans[0].applied
    finally:
        if build.poll() is None:
            build.kill()
    r = open_version("pets", store=store)
    assert r.version_id != v1.version_id and len(r) == 7
    data_root = home / "data"
    for leaf in walk_leaves(data_root, r.manifest["chunks"]):  # every chunk it names is there
        assert (data_root / "chunks" / leaf.hash[:2] / f"{leaf.hash}.jsonl").is_file()
    assert r.get_batch(list(range(len(r))))[0].shape[0] == 7
    assert len(r.md5s()) == 7 and r.metadata(6)["index"] == 6

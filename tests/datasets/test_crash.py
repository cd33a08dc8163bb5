"""Killed and concurrent builds, in real subprocesses killed with SIGKILL.

The build sleeps at a named point when LAKETRAIN_TEST_PAUSE_AT says so (pipeline/datasets/
hooks.py); the test waits for its marker on stderr, then kills the whole process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.datasets.conftest import image_lake

pytestmark = pytest.mark.slow

BUILD = [
    sys.executable,
    "-m",
    "pipeline.cli",
    "build",
    "pets",
    "--workers",
    "1",
    "--max-files",
    "3",
]


def _start(cmd: list[str], **env: str) -> subprocess.Popen:
    full_env = {**os.environ, "COLUMNS": "200", **env}
    return subprocess.Popen(
        cmd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=Path(__file__).resolve().parents[2],
    )


def _wait_for_marker(proc: subprocess.Popen, point: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if line.strip() == f"LAKETRAIN_PAUSED_AT {point}":
            return
    proc.kill()
    raise AssertionError(
        f"build never reached {point}; rc={proc.poll()} stderr={''.join(seen)[-2000:]}"
    )


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    proc.stdout.close()
    proc.stderr.close()


def _reference_id(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The version_id of an uninterrupted build of the same lake, in a separate store/data root."""
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


def _complete_versions_on_disk(data_root: Path) -> list[str]:
    folder = data_root / "datasets" / "pets"
    if not folder.is_dir():
        return []
    out = []
    for p in folder.iterdir():
        if p.is_dir() and not p.name.startswith("."):
            # Anything visible under a version name must be complete.
            assert (p / "manifest.json").is_file(), f"partial version folder visible: {p}"
            out.append(p.name)
    return out


@pytest.mark.parametrize(
    ("point", "nth"),
    [
        ("process_decoded", 2),  # one segment done, the second decoded but not written
        ("segment_before_rename", 2),  # second segment written under its temp name
        ("segment_renamed", 2),  # second segment published, not recorded: reused
        ("before_commit", 1),  # every segment recorded, no version yet
        ("chunks_written", 1),  # the version's chunk files written, no manifest yet
        ("commit_staged", 1),  # version folder staged, not renamed
        ("commit_renamed", 1),  # version folder published, store not committed
    ],
)
def test_killed_build_reruns_to_the_same_version(store, home, tmp_path, monkeypatch, point, nth):
    from pipeline.datasets.queries import list_versions
    from pipeline.datasets.reader import open_version

    image_lake(home, per_class=4)
    expected = _reference_id(home, tmp_path, monkeypatch)
    data_root = home / "data"

    proc = _start(BUILD, LAKETRAIN_TEST_PAUSE_AT=point, LAKETRAIN_TEST_PAUSE_NTH=str(nth))
    _wait_for_marker(proc, point)
    _kill(proc)

    assert list_versions("pets", store=store) == []  # never a partial version listed
    on_disk = _complete_versions_on_disk(data_root)
    assert on_disk == ([expected] if point == "commit_renamed" else [])

    rerun = _start(BUILD)
    out, err = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, err
    versions = list_versions("pets", store=store)
    assert [v["version_id"] for v in versions] == [expected]
    assert _complete_versions_on_disk(data_root) == [expected]
    assert not list((data_root / "datasets" / "pets").glob(".staging-*"))
    assert not list((data_root / "segments").glob("*/.tmp-*"))
    r = open_version("pets", store=store)
    assert r.get_batch(range(len(r)))[0].shape[0] == 8
    # Every segment folder is one the store knows and the version uses: nothing orphaned.
    on_disk = {
        p.name
        for p in (data_root / "segments").glob("*/*")
        if not p.name.startswith(".") and not p.parent.name.startswith(".")  # .leases
    }
    assert on_disk == {s["id"] for s in r.manifest["segments"]}
    _assert_chunks_recorded_and_complete(store, data_root, r)


def _assert_chunks_recorded_and_complete(store, data_root: Path, r) -> None:
    """The version's chunk files are all there (no temp left), and the store records exactly
    its leaves, in order, with their entries, and its nodes."""
    from sqlalchemy import select

    from pipeline.datasets.chunkread import walk_leaves
    from pipeline.metadata.datasets import Chunk, ChunkEntry, VersionChunk

    assert r.manifest["format_version"] == 2
    leaves = walk_leaves(data_root, r.manifest["chunks"])
    assert not list((data_root / "chunks").glob("*/.tmp-*"))
    names = {p.name.split(".")[0] for p in (data_root / "chunks").glob("*/*")}
    assert names == {leaf.hash for leaf in leaves} | {
        n["hash"] for n in r.manifest["chunks"]["nodes"]
    }
    with store.session() as session:
        listed = session.scalars(
            select(VersionChunk.chunk_hash)
            .where(VersionChunk.version_id == r.version_id)
            .order_by(VersionChunk.ordinal)
        ).all()
        assert listed == [leaf.hash for leaf in leaves]
        assert set(session.scalars(select(Chunk.hash))) == names
        entries = session.execute(select(ChunkEntry.chunk_hash, ChunkEntry.md5)).all()
    assert sorted(m for _, m in entries) == sorted(r.md5s().tolist())


def test_two_concurrent_builds_publish_exactly_one_version(store, home):
    from pipeline.datasets.queries import list_versions

    image_lake(home, per_class=4)
    procs = [_start(BUILD), _start(BUILD)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    texts = sorted(o[0] for o in outs)
    assert sum("published" in t for t in texts) == 1 and sum("no change" in t for t in texts) == 1
    assert len(list_versions("pets", store=store)) == 1


def test_a_commit_waits_for_a_concurrent_commit_of_the_same_dataset(store, home):
    """The store's dataset lock, not the local build lock: a bare commit() started while
    another commit is staging waits, then finds the same version and publishes nothing."""
    from pipeline.datasets.queries import list_versions

    image_lake(home, per_class=3)
    first = _start(BUILD, LAKETRAIN_TEST_PAUSE_AT="commit_staged", LAKETRAIN_TEST_PAUSE_SECONDS="3")
    _wait_for_marker(first, "commit_staged")
    second = _start(
        [
            sys.executable,
            "-c",
            "from pipeline.datasets.build import commit; print('RESULT', commit('pets'))",
        ]
    )
    out2, err2 = second.communicate(timeout=180)
    out1, err1 = first.communicate(timeout=180)
    assert first.returncode == 0, err1
    assert second.returncode == 0, err2
    assert "RESULT None" in out2
    assert len(list_versions("pets", store=store)) == 1

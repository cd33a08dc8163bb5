"""The local build lock, with real subprocess builds: a build killed outright (SIGKILL of the
main process only, as the OOM killer does) leaves no decode worker behind and no lock held, and
a build that finds the lock taken says whose it is (or, with --no-wait, fails at once)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.datasets.conftest import image_lake
from tests.datasets.test_crash import BUILD, _start, _wait_for_marker

pytestmark = pytest.mark.slow

POOL_BUILD = [*BUILD[:-4], "--workers", "2", "--max-files", "2"]


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if _running(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if _running(p)]


def test_a_build_killed_outright_leaves_no_worker_and_the_rerun_completes(store, home):
    from pipeline.datasets.queries import list_versions

    image_lake(home, per_class=4)  # 8 files, 2 per shard: 4 shards over a pool of 2
    # A worker pauses after publishing its segment; the pause outlasts the test, so a worker
    # that survived its build would hold the lock for the whole rerun.
    proc = _start(
        POOL_BUILD, LAKETRAIN_TEST_PAUSE_AT="segment_renamed", LAKETRAIN_TEST_PAUSE_SECONDS="600"
    )
    workers: list[int] = []
    rerun = None
    try:
        _wait_for_marker(proc, "segment_renamed")
        workers = _children(proc.pid)
        assert len(workers) == 2, workers
        os.kill(proc.pid, signal.SIGKILL)  # the main process only, not its group
        proc.wait(30)
        assert _wait_gone(workers, 30) == [], "decode workers outlived their build"

        rerun = _start(BUILD)
        try:
            out, err = rerun.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail("the rerun hung: the killed build's lock is still held")
        assert rerun.returncode == 0, err
        assert "published" in out
        assert len(list_versions("pets", store=store)) == 1
    finally:
        for pid in workers:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        for p in (proc, rerun):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(30)


def test_a_build_that_finds_the_lock_taken_names_the_holder_and_honours_no_wait(store, home):
    from pipeline.datasets.queries import list_versions

    image_lake(home, per_class=2)
    holder = _start(
        BUILD, LAKETRAIN_TEST_PAUSE_AT="before_commit", LAKETRAIN_TEST_PAUSE_SECONDS="600"
    )
    waiter = None
    try:
        _wait_for_marker(holder, "before_commit")

        busy = subprocess.run(
            [*BUILD, "--no-wait"],
            env={**os.environ, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert busy.returncode == 3, busy.stderr
        assert f"pid {holder.pid}" in busy.stderr
        assert "another build of 'pets' is running" in busy.stderr

        waiter = _start(BUILD)
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline and "waiting for the build" not in line:
            line = waiter.stderr.readline()
            if not line and waiter.poll() is not None:
                break
        assert "waiting for the build of 'pets'" in line and f"pid {holder.pid}" in line, line

        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(30)
        out, err = waiter.communicate(timeout=180)
        assert waiter.returncode == 0, err
        assert len(list_versions("pets", store=store)) == 1
    finally:
        for p in (holder, waiter):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)


def test_no_wait_also_fails_at_once_when_a_scan_of_the_lake_is_running(store, home):
    from pipeline.metadata.ledger import LakeLock
    from pipeline.metadata.locks import ensure_lock_row, take_lock_row

    image_lake(home, per_class=1)
    lake_key = os.path.realpath(home / "lake")
    ensure_lock_row(store, LakeLock, lake_key)
    with store.session() as session:
        take_lock_row(session, LakeLock, lake_key)  # a scan holds the lake until we return
        busy = subprocess.run(
            [*BUILD, "--no-wait"],
            env={**os.environ, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).resolve().parents[2],
        )
    assert busy.returncode == 3, busy.stderr
    assert "another scan of the lake" in busy.stderr

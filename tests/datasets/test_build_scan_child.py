"""The local build's scan of a large lake runs in a child process (build/local.py): a
million-file scan leaves hundreds of MB of freed memory that the build's decode workers would
inherit and its commit would start from. A first build (no head: any size) scans in a child; a
build on a small head scans in this process. Either way the scan's summary and its errors come
back to the build."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.datasets.conftest import image_lake, write_jpeg


def _record_scan_pids(monkeypatch: pytest.MonkeyPatch, log: Path) -> None:
    """Append the pid of each scan to ``log`` (a file: a child's memory does not come back)."""
    import pipeline.lake.scan as scan_mod

    real = scan_mod.scan

    def scan(*args, **kwargs):
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(scan_mod, "scan", scan)


def test_a_first_build_scans_in_a_child_and_a_small_head_here(store, home, tmp_path, monkeypatch):
    from pipeline.datasets.build import local

    image_lake(home, per_class=3)
    log = tmp_path / "scan-pids"
    _record_scan_pids(monkeypatch, log)

    first = local.run_build("pets", workers=1, store=store)
    assert first.scan["new"] == 6 and first.version is not None  # the child's summary
    write_jpeg(home / "lake" / "pets" / "cat" / "late.jpg", seed=777)
    second = local.run_build("pets", workers=1, store=store)
    assert second.scan["new"] == 1 and second.version.added == 1

    pids = [int(line) for line in log.read_text().split()]
    assert len(pids) == 2
    assert pids[0] != os.getpid()  # no head yet: a child
    assert pids[1] == os.getpid()  # a head of 6 samples: here

    # A head at the threshold scans in a child again.
    monkeypatch.setattr(local, "SCAN_IN_CHILD_SAMPLES", 7)
    (home / "lake" / "pets" / "dog" / "000.jpg").unlink()
    third = local.run_build("pets", workers=1, store=store)
    assert third.scan["deleted"] == 1 and third.version.removed == 1
    pids = [int(line) for line in log.read_text().split()]
    assert pids[2] not in (os.getpid(), pids[0])


def test_a_busy_lake_fails_the_build_from_the_child_scan(store, home):
    from pipeline.datasets.build import local
    from pipeline.lake.scan import ScanBusyError, scan

    image_lake(home, per_class=2)
    inside, release = threading.Event(), threading.Event()

    def hold(_total: int) -> None:
        inside.set()
        release.wait(30)

    holder = threading.Thread(
        target=lambda: scan(home / "lake", store=store, workers=1, on_total=hold)
    )
    holder.start()
    try:
        assert inside.wait(30)
        with pytest.raises(ScanBusyError, match="another scan"):
            local.run_build("pets", workers=1, store=store, wait=False)
    finally:
        release.set()
        holder.join(30)
    # Once the other scan is done, the same build goes through.
    assert local.run_build("pets", workers=1, store=store, wait=False).version.samples == 4

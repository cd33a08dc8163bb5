"""Durable writes: batches of syncs issued together, every one awaited before the caller's
rename."""

from __future__ import annotations

import os
import threading
import time

import pytest

from pipeline.storage import durable


def _open(tmp_path, n):
    fds = []
    for i in range(n):
        path = tmp_path / f"f{i}"
        path.write_bytes(b"x" * (i + 1))
        fds.append(os.open(path, os.O_RDONLY))
    return fds


def test_sync_all_syncs_every_file_together_and_returns_after_the_last(tmp_path, monkeypatch):
    fds = _open(tmp_path, 12)
    real = os.fdatasync
    synced: list[int] = []
    running = [0, 0]  # now, most at once
    lock = threading.Lock()

    def slow_sync(fd):
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(0.05)  # a disk flush: the others are issued meanwhile
        real(fd)
        with lock:
            running[0] -= 1
            synced.append(fd)

    monkeypatch.setattr(os, "fdatasync", slow_sync)
    try:
        durable.sync_all(fds)
    finally:
        for fd in fds:
            os.close(fd)
    assert sorted(synced) == sorted(fds)  # each once, all done on return
    assert running[1] > 1  # issued together, not one after another


def test_sync_all_raises_a_failed_sync_after_the_others_finished(tmp_path, monkeypatch):
    fds = _open(tmp_path, 5)
    real = os.fdatasync
    synced: list[int] = []

    def failing(fd):
        if fd == fds[0]:
            raise OSError(5, "Input/output error")
        time.sleep(0.02)
        real(fd)
        synced.append(fd)

    monkeypatch.setattr(os, "fdatasync", failing)
    try:
        with pytest.raises(OSError, match="Input/output"):
            durable.sync_all(fds)
    finally:
        for fd in fds:
            os.close(fd)
    assert sorted(synced) == sorted(fds[1:])


def test_fsync_dirs_syncs_each_folder_once(tmp_path, monkeypatch):
    folders = [tmp_path / name for name in "abc"]
    for folder in folders:
        folder.mkdir()
    seen: list = []
    monkeypatch.setattr(durable, "fsync_dir", seen.append)
    durable.fsync_dirs([*folders, folders[0]])
    assert sorted(seen) == sorted(folders)

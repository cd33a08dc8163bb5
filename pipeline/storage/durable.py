"""Durable local writes, one owner: a file appears whole or not at all, and survives a power cut
once its writer returns.

Every writer of laketrain's immutable files (manifests, HEAD, chunks, segments, checkpoints
on ``file://``) goes through these helpers: write to a temp name in the same folder, fsync,
rename, fsync the folder (the rename itself is only durable once its folder is synced); a
batch of files is synced together (``sync_all``, ``fsync_dirs``).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

# At most this many syncs in flight at once (sync_all).
_SYNC_THREADS = 8


def fsync_dir(directory: Path) -> None:
    """Make renames into ``directory`` durable (a commit marker must survive a power cut)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def sync_all(fds: Sequence[int]) -> None:
    """fdatasync every file descriptor, several at once, and return when all are durable.
    Syncs issued together share the filesystem's journal commits (ext4 joins concurrent
    fsyncs into one transaction), so a batch of N files waits for about one or two disk
    flushes instead of N in a row (measured here: 26 small files, 11-20 ms in a row, 4-8 ms
    together). The first error is raised once all have finished."""
    _each_at_once(os.fdatasync, fds)


def fsync_dirs(directories: Iterable[Path]) -> None:
    """fsync_dir of each folder, several at once (as sync_all)."""
    _each_at_once(fsync_dir, list(dict.fromkeys(directories)))


def _each_at_once(sync: Callable[[Any], None], items: Sequence[Any]) -> None:
    if len(items) <= 1:
        for item in items:
            sync(item)
        return
    from concurrent.futures import ThreadPoolExecutor

    # A pool per batch, not a shared one: a build forks workers, and a forked child would
    # inherit a pool whose threads do not exist. Starting a thread costs ~50 µs.
    with ThreadPoolExecutor(min(len(items), _SYNC_THREADS), thread_name_prefix="sync") as pool:
        for done in [pool.submit(sync, item) for item in items]:
            done.result()


TEMP_PREFIX = ".tmp-"  # listings and gc recognise in-flight writes by it


def _temp_name(dest: Path) -> Path:
    return dest.with_name(f"{TEMP_PREFIX}{dest.name}.{os.getpid()}.{secrets.token_hex(4)}")


def replace_atomically(
    dest: Path, write: Callable[[Path], object], *, sync_dir: bool = True
) -> None:
    """Run ``write(tmp)`` then rename ``tmp`` over ``dest``: a reader sees the old file or the
    new one, never part of either. The temp file is removed if ``write`` fails."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(dest)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(dest.parent)


def write_bytes_atomically(dest: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace ``dest`` with ``data`` atomically (temp + fsync + rename + folder fsync)."""
    replace_atomically(dest, lambda tmp: tmp.write_bytes(data), sync_dir=sync_dir)


def write_once(dest: Path, data: bytes) -> int:
    """Write a content-addressed file unless it exists; bytes written (0: reused). The caller
    syncs the folder once after a batch of these (one flush for many files). Two writers of the
    same name write the same bytes, so whichever rename lands last is harmless."""
    dest = Path(dest)
    if dest.exists():
        return 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(dest)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fdatasync(fh.fileno())
        os.rename(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(data)

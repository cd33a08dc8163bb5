"""The local build lock: one ``laketrain build`` of a dataset at a time on a DATA_ROOT.

``DATA_ROOT/datasets/<dataset>/.build.lock`` is flocked for the whole build, so two builds do
not decode the same files (the store's dataset lock in ``commit`` is what guarantees one version
across hosts). The holder writes ``<pid> <host>`` into the file, so a build that finds the lock
taken says whom it waits for, or, with ``wait=False``, fails at once naming the holder.

The descriptor is opened close-on-exec, and the build's fork workers close it first thing
(``pool.worker_pool(close_fds=...)``): only the build process itself ever holds the lock, so a
build killed outright releases it with its last breath.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_NAME = ".build.lock"


class BuildBusyError(RuntimeError):
    """Another build of the dataset holds the lock and the caller chose not to wait."""


def holder_of(path: Path) -> str:
    """``pid N on HOST`` as the holder wrote it, or ``an unknown process`` (an older build,
    or one that has just taken the lock and not written yet)."""
    try:
        text = Path(path).read_text().split()
    except OSError:
        return "an unknown process"
    if not text or not text[0].isdigit():
        return "an unknown process"
    return f"pid {text[0]}" + (f" on {text[1]}" if len(text) > 1 else "")


@contextmanager
def build_lock(
    folder: Path,
    dataset: str,
    *,
    wait: bool = True,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[int]:
    """Hold ``folder/.build.lock`` for the block; yield its descriptor (for the pool to close).
    Busy: with ``wait`` call ``on_wait(message)`` (default: log a warning) and block; without,
    raise BuildBusyError naming the holder."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = holder_of(path)
            if not wait:
                raise BuildBusyError(
                    f"another build of {dataset!r} is running ({holder}; lock {path}); "
                    "try again when it finishes, or drop --no-wait to wait for it"
                ) from None
            message = f"waiting for the build of {dataset!r} held by {holder} (lock {path})"
            (on_wait or log.warning)(message)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        try:
            yield fd
        finally:
            os.ftruncate(fd, 0)  # a released lock names nobody
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

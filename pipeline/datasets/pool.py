"""The local build's process pool: workers that die with the build and hold none of its locks.

``laketrain build`` forks its decode workers. A fork inherits every descriptor of the parent,
among them the open ``.build.lock`` (an flock belongs to the open file, so a child holding a
copy keeps the lock held) and the metadata store's sockets. When the build is killed outright
(SIGKILL, the OOM killer) nobody stops its workers: they would run on with PPID 1, keep the
build lock, and every later build of the dataset would wait for ever. So each worker, first
thing: asks the kernel to SIGKILL it when its parent dies (PR_SET_PDEATHSIG, Linux), checks
that the parent is still the one that forked it (it may have died before the prctl), and
closes the descriptors the build names (the build lock).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Be SIGKILLed when the process that forked us dies (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("could not tie this worker to its build (prctl errno %d)", ctypes.get_errno())
    if os.getppid() != parent_pid:
        os._exit(1)  # the build died before prctl took effect: nobody wants our result


def _init_worker(parent_pid: int, close_fds: tuple[int, ...]) -> None:
    die_with_parent(parent_pid)
    for fd in close_fds:
        try:
            os.close(fd)
        except OSError:
            pass  # not open in this process: nothing to drop
    # Connections inherited through fork belong to the parent: drop them without closing
    # (SQLAlchemy's recipe for a forked child). The handles themselves stay: the parent
    # checked their migrations, and their compiled-statement caches are warm, which a fresh
    # engine in every worker would pay again (tens of ms a worker).
    from pipeline.metadata import store as store_mod

    for s in store_mod._stores.values():
        s.engine.dispose(close=False)


def worker_pool(workers: int, *, close_fds: tuple[int, ...] = ()) -> ProcessPoolExecutor:
    """A fork pool of ``workers`` processes that die with this one and close ``close_fds``."""
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_init_worker,
        initargs=(os.getpid(), tuple(close_fds)),
    )

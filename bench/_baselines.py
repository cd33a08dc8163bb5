"""Pieces several benchmarks share: the bare-walk baselines every rescan is held against (in
one process, and split over the cores as the scan splits its walk), and back-dating generated
files so that the scanner's settle window does not skip them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def bare_walk(root: Path, *, by_descriptor: bool = False) -> float:
    """Baseline: os.scandir + stat of every file, what any rescan must at least do (seconds).
    ``by_descriptor``: each folder opened and listed through its descriptor, so that each stat
    is an fstatat of the bare name, as the scan's walk lists (pipeline.lake.walk)."""
    t = time.perf_counter()
    stack = [str(root)]
    while stack:
        _stat_files(stack.pop(), stack, by_descriptor=by_descriptor)
    return time.perf_counter() - t


def _stat_files(folder: str, subfolders: list[str], *, by_descriptor: bool = False) -> None:
    """Stat every file of ``folder``; append its subfolders' paths to ``subfolders``."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY) if by_descriptor else None
    try:
        with os.scandir(folder if fd is None else fd) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    subfolders.append(f"{folder}/{e.name}")
                else:
                    e.stat(follow_symlinks=False)
    finally:
        if fd is not None:
            os.close(fd)


def bare_walk_split(root: Path, processes: int, *, by_descriptor: bool = False) -> float:
    """The same walk with the folders spread over ``processes`` forked processes (the parent
    walks one share): what a scan that splits its walk over the cores must at least do. The
    tree is opened level by level until there are at least four folders per process, and
    those are dealt out in turn; the files above them are statted by the parent."""
    if processes < 2:
        return bare_walk(root, by_descriptor=by_descriptor)
    t = time.perf_counter()
    level = [str(root)]
    while level and len(level) < 4 * processes:
        below: list[str] = []
        for folder in level:
            _stat_files(folder, below)
        level = below
    in_processes(
        lambda k: [
            bare_walk(Path(folder), by_descriptor=by_descriptor) for folder in level[k::processes]
        ],
        processes,
    )
    return time.perf_counter() - t


def in_processes(work: Callable[[int], object], processes: int) -> None:
    """Run ``work(k)`` for k = 1 .. processes - 1 in forked children and ``work(0)`` here, all
    at once; raise when a child failed (after all have ended)."""
    pids = []
    for k in range(1, processes):
        pid = os.fork()
        if pid == 0:  # the child: its share, then leave without the parent's cleanup
            code = 1
            try:
                work(k)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    try:
        work(0)
    finally:
        failed = [pid for pid in pids if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0]
    if failed:
        raise RuntimeError(f"{len(failed)} of {processes - 1} forked process(es) failed")


def backdate(paths: Iterable[Path], seconds: float = 3600) -> None:
    """Set the files' mtime ``seconds`` in the past: a scan then takes them as settled."""
    old = time.time() - seconds
    for p in paths:
        os.utime(p, (old, old))

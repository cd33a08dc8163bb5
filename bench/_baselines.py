"""Pieces several benchmarks share: the bare-walk baseline every rescan is held against, and
back-dating generated files so that the scanner's settle window does not skip them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path


def bare_walk(root: Path) -> float:
    """Baseline: os.scandir + stat of every file, what any rescan must at least do (seconds)."""
    t = time.perf_counter()
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                else:
                    e.stat(follow_symlinks=False)
    return time.perf_counter() - t


def backdate(paths: Iterable[Path], seconds: float = 3600) -> None:
    """Set the files' mtime ``seconds`` in the past: a scan then takes them as settled."""
    old = time.time() - seconds
    for p in paths:
        os.utime(p, (old, old))

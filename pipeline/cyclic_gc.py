"""Pause Python's cyclic garbage collector around bulk loads of short-lived rows."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Scans, plans and commits load one small object per lake file. In a process with a large
    heap (one that has already built a dataset), the cyclic GC would rescan that heap again and
    again during such loads (measured: commits 2-5x slower, no-change rescans +40 %); none of
    these objects form cycles, so nothing is lost by collecting after the load."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

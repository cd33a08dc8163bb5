"""A chunked version's metadata lines, read leaf by leaf as they are asked for.

A version's ``metadata.jsonl`` is its leaves' metadata parts in order (docs/datasets.md). The
reader's ``metadata(i)`` needs one line: reading every part for it cost a million-sample
version 0.8 s and ~650 MB the first time (one string per sample, held for the reader's life,
and again in each split view). Here a sample's leaf is found from the leaves' counts (a
binary search over their running totals), and only that part is read, checked against its
name (its sha256) and its count, and split into lines. A few recent leaves are kept, so a
sequential pass (``export``) reads each part once and a random one costs one small read.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np

from pipeline.datasets.chunkread import read_meta, walk_leaves
from pipeline.datasets.chunks import ChunkError

# Leaves kept parsed (a leaf holds ~128 samples on average: a few tens of thousands of lines).
KEPT_LEAVES = 256


class LeafLines:
    """The metadata line of any sample of the version whose ``chunks`` section is given."""

    def __init__(self, data_root: Path, chunks_section: dict) -> None:
        self._data_root = data_root
        self._leaves = walk_leaves(data_root, chunks_section)
        counts = np.fromiter((leaf.count for leaf in self._leaves), np.int64, len(self._leaves))
        self._ends = np.cumsum(counts)
        self._kept: OrderedDict[int, list[str]] = OrderedDict()
        # The leaf read last, as (first sample, lines): a sequential pass stays in it for a
        # leaf's worth of samples without a search or a cache lookup per sample.
        self._last: tuple[int, list[str]] = (0, [])

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def line(self, j: int) -> str:
        """The line of sample ``j`` (its place in the version, 0-based)."""
        first, lines = self._last
        if first <= j < first + len(lines):
            return lines[j - first]
        if not 0 <= j < len(self):
            raise IndexError(f"sample {j} is not in a version of {len(self)} samples")
        k = int(np.searchsorted(self._ends, j, side="right"))
        lines = self._kept.get(k)
        if lines is None:
            lines = self._read(k)
            self._kept[k] = lines
            if len(self._kept) > KEPT_LEAVES:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(k)
        first = int(self._ends[k]) - len(lines)
        self._last = (first, lines)
        return lines[j - first]

    def _read(self, k: int) -> list[str]:
        leaf = self._leaves[k]
        # Escaped as ASCII when written (chunks.entry_line): splitlines splits at line breaks only.
        lines = read_meta(self._data_root, leaf.hash).decode().splitlines()
        if len(lines) != leaf.count:
            raise ChunkError(
                f"leaf {leaf.hash}: its metadata part holds {len(lines)} lines, "
                f"its node lists {leaf.count} samples"
            )
        return lines

    def __getstate__(self) -> dict:
        # A copy handed to another process (a DataLoader worker) reads its own leaves.
        return {**self.__dict__, "_kept": OrderedDict(), "_last": (0, [])}

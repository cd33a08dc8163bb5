"""A chunked version's metadata lines, read leaf by leaf as they are asked for.

A version's ``metadata.jsonl`` is its leaves' metadata parts in order (docs/datasets.md). The
reader's ``metadata(i)`` needs one line: reading every part for it cost a million-sample
version 0.8 s and ~650 MB the first time (one string per sample, held for the reader's life,
and again in each split view). Here a sample's leaf is found from the leaves' counts (a
binary search over their running totals), and only that part is read, checked against its
name (its sha256) and its count, and split into lines. A few recent leaves are kept, so a
sequential pass (``export``) reads each part once and a random one costs one small read.

On an ``s3://`` DATA_ROOT the parts are fetched into the local cache as they are asked for
(``fetch``: remote_reader.RemoteMeta): the part wanted and the next few not fetched yet, in
one parallel pass of the cache, so a record costs a few GETs and a pass in order one pass per
window, never every part of the version for one record.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from pipeline.datasets.chunkread import read_meta, walk_leaves
from pipeline.datasets.chunks import ChunkError, LeafRef

# Leaves kept parsed (a leaf holds ~128 samples on average: a few tens of thousands of lines).
KEPT_LEAVES = 256
# Parts fetched at once from an s3:// DATA_ROOT: the one wanted and those after it.
FETCH_WINDOW = 32


class _Pinned(Protocol):
    def close(self) -> None: ...


# Makes the given leaves' parts present under the reader's DATA_ROOT; what it returns keeps
# them from eviction until closed (pipeline.storage.cache.Pins).
FetchParts = Callable[[Sequence[LeafRef]], _Pinned]


class LeafLines:
    """The metadata line of any sample of the version whose ``chunks`` section is given."""

    def __init__(
        self, data_root: Path, chunks_section: dict, fetch: FetchParts | None = None
    ) -> None:
        self._data_root = data_root
        self._fetch = fetch
        self._fetched: set[int] = set()  # leaves whose parts a fetch brought (s3://)
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
        if self._fetch is not None and k not in self._fetched:
            stop = min(k + FETCH_WINDOW, len(self._leaves))
            window = [i for i in range(k, stop) if i not in self._fetched]
            self._fetch([self._leaves[i] for i in window]).close()
            self._fetched.update(window)
        try:
            raw = read_meta(self._data_root, leaf.hash)
        except ChunkError:
            if self._fetch is None:
                raise
            # Evicted from the cache (or damaged) since its fetch: once more, pinned while read.
            pins = self._fetch([leaf])
            try:
                raw = read_meta(self._data_root, leaf.hash)
            finally:
                pins.close()
        # Escaped as ASCII when written (chunks.entry_line): splitlines splits at line breaks only.
        lines = raw.decode().splitlines()
        if len(lines) != leaf.count:
            raise ChunkError(
                f"leaf {leaf.hash}: its metadata part holds {len(lines)} lines, "
                f"its node lists {leaf.count} samples"
            )
        return lines

    def __getstate__(self) -> dict:
        # A copy handed to another process (a DataLoader worker) reads its own leaves.
        return {**self.__dict__, "_kept": OrderedDict(), "_last": (0, [])}

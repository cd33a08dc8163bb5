"""The delta commit's windows (delta.py): where the head's leaves must be cut again.

Each run of head leaves that an affected path falls in (or between) is widened by one clean
leaf on each side: the clean leaf before it starts at a cut the edit cannot move (a cut
depends on its sample's key, the next sample's top folder and the leaf's start, all the
head's there), and the window is cut again, with the head's leaves offered, until its last
leaf is a head leaf again (then every later cut is the head's). The rest of the head's leaves
are taken whole, unread. The result is the cut of the whole new sample list, which
tests/datasets/test_delta_commit.py checks against full commits.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from pathlib import Path

from pipeline.datasets import chunks
from pipeline.datasets.build.values import _Sample
from pipeline.datasets.chunks import LeafRef, read_entries, sample_key
from pipeline.datasets.chunkwrite import Piece, _cuts


class Fallback(Exception):
    """The delta cannot be built exactly from what is on disk: the commit assembles all."""


def sample_of(r: dict) -> _Sample:
    return _Sample(
        r["path"],
        r["md5"],
        r["label"],
        r["split"],
        r["segment"],
        int(r["row"]),
        r.get("size"),
        r.get("mtime_ns"),
        bool(r["duplicate"]),
        r.get("line"),
        int(r.get("copy", 0)),
    )


def cut(
    data_root: Path,
    head_leaves: list[LeafRef],
    edges: dict[str, tuple[tuple, tuple]],
    affected: list[str],
    samples: list[_Sample],
) -> list[Piece]:
    """Cut the new version: the head's leaves where nothing changed, cut again where the
    affected paths fall (``edges``: each head leaf's first and last (path, line, copy))."""
    m = len(head_leaves)
    if m == 0 or any(leaf.hash not in edges for leaf in head_leaves):
        raise Fallback("the head's leaves are not all recorded")
    firsts = [edges[leaf.hash][0][0] for leaf in head_leaves]
    lasts = [edges[leaf.hash][1][0] for leaf in head_leaves]
    dirty = [False] * m
    for path in affected:
        # The leaves whose path range holds it, or the two it falls between.
        lo = bisect_left(lasts, path)  # first leaf ending at or after it
        hi = bisect_right(firsts, path) - 1  # last leaf starting at or before it
        for k in range(max(min(lo, hi), 0), min(max(lo, hi), m - 1) + 1):
            dirty[k] = True
    out: list[Piece] = []
    gone = set(affected)  # the head's samples at these paths are replaced (or removed)
    by_path = [s.path for s in samples]

    def _lo(start: int) -> int:  # the affected samples from leaf ``start``'s first path on
        return 0 if start == 0 else bisect_left(by_path, firsts[start])

    def _hi(stop: int) -> int:  # ... to leaf ``stop - 1``'s last path
        return len(samples) if stop >= m else bisect_right(by_path, lasts[stop - 1])

    k = 0
    while k < m:
        if not dirty[k] and not (k + 1 < m and dirty[k + 1]):
            leaf = head_leaves[k]
            out.append((leaf.hash, leaf.bytes, leaf, None))
            k += 1
            continue
        # A window: from this clean neighbour (or leaf 0) to one clean leaf past the dirty run.
        start = k
        stop = k + 1
        while stop < m and (dirty[stop] or dirty[stop - 1]):
            stop += 1
        while True:
            pieces = _cut_window(
                data_root, head_leaves[start:stop], gone, samples[_lo(start) : _hi(stop)]
            )
            last = pieces[-1][2] if pieces else None
            if stop >= m or (last is not None and last.hash == head_leaves[stop - 1].hash):
                break
            stop += 1  # the cut has not met a head boundary yet: one more leaf
        out += pieces
        k = stop
    return out


def _cut_window(data_root: Path, leaves: list[LeafRef], gone: set[str], affected: list[_Sample]):
    """Cut these head leaves again with the affected samples in their range."""
    kept: list[_Sample] = []
    offered: list[tuple[LeafRef, bytes]] = []
    for leaf in leaves:
        try:
            part = [sample_of(r) for r in read_entries(data_root, leaf.hash)]
        except chunks.ChunkError as exc:
            raise Fallback(str(exc)) from None
        if part:
            offered.append((leaf, sample_key(part[0])))
        kept += [s for s in part if s.path not in gone]
    # An affected path's samples all come from the change set: merge by path (a stable sort
    # keeps each path's rows in their order).
    window = sorted(kept + affected, key=lambda s: s.path)
    pieces: list[Piece] = [
        (h, size, reused, window[a:b]) for a, b, h, size, reused in _cuts(window, offered)
    ]
    return pieces

"""The delta commit's windows (delta.py): where the head's leaves must be cut again.

A window is a run of the head leaves that affected paths fall in (a path between two leaves
marks the one before). It starts at a cut the edit cannot move (a cut depends on its sample's
key, the next sample's top folder and the leaf's start, all the head's there), unless its first
sample is affected: then the cut before it follows that sample's folder, and the window starts
one leaf earlier. It is cut again, with the head's leaves offered, and widened leaf by leaf
while its last cut does not fall where the next head leaf starts (chunks.cut_follows); from a
head boundary on, every cut is the head's. The rest of the head's leaves are taken whole,
unread. The result is the cut of the whole new sample list, which
tests/datasets/test_delta_commit.py checks against full commits.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import NamedTuple

from pipeline.datasets import chunks
from pipeline.datasets.build.values import _Sample
from pipeline.datasets.chunkread import read_entries
from pipeline.datasets.chunks import LeafRef, sample_key
from pipeline.datasets.chunkwrite import KeptParts, Piece, _cuts

# The new leaves' metadata parts kept for the write, at most: 1,000 files at random places
# among a million samples re-cut ~900 leaves, ~56 MB of parts; a drop that re-cuts most of a
# large version would otherwise hold all of its metadata at once (~200 MB a million samples)
# on top of its samples. Past this, the write formats a part again.
KEEP_FORMATTED_BYTES = 64 << 20


# Kept head samples whose origins a cut records, at most (delta.py reads their store ids from
# their leaves): 1,000 files at random places among a million samples keep ~215,000; a drop
# that re-cuts most of a large version records none, and its samples are searched for by path.
KEEP_ORIGINS_AT_MOST = 300_000


class Cut(NamedTuple):
    """What cut() makes of the head and the change set."""

    pieces: list[Piece]
    # The new leaves' metadata parts as the cut formatted them, by hash (up to
    # KEEP_FORMATTED_BYTES), so that the write does not format their samples again.
    formatted: dict[str, bytes]
    # The head samples the windows keep, as (position, sample) under each head leaf they come
    # from: their store rows are the head leaf's entries at those positions
    # (leaf_index.record_entries need not search for them). None: more than
    # KEEP_ORIGINS_AT_MOST.
    kept: dict[str, list[tuple[int, _Sample]]] | None


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
) -> Cut:
    """Cut the new version: the head's leaves where nothing changed, cut again where the
    affected paths fall (``edges``: each head leaf's first and last (path, line, copy))."""
    m = len(head_leaves)
    if m == 0 or any(leaf.hash not in edges for leaf in head_leaves):
        raise Fallback("the head's leaves are not all recorded")
    firsts = [edges[leaf.hash][0][0] for leaf in head_leaves]
    lasts = [edges[leaf.hash][1][0] for leaf in head_leaves]
    gone = set(affected)  # the head's samples at these paths are replaced (or removed)
    dirty = [False] * m
    for path in affected:
        lo = bisect_left(lasts, path)  # the first leaf ending at or after it
        hi = bisect_right(firsts, path) - 1  # the last leaf starting at or before it
        if lo <= hi:
            dirty[lo : hi + 1] = [True] * (hi + 1 - lo)  # inside (a path may span leaves)
        else:
            dirty[max(hi, 0)] = True  # between two leaves: the one before (or leaf 0)
    by_path = [s.path for s in samples]
    entries = _Entries(data_root)
    out: list[Piece] = []
    # A window that widens is cut again: the parts its narrower try kept stay (each is still
    # its hash's bytes), at the price of their room.
    formatted = KeptParts(KEEP_FORMATTED_BYTES)
    kept: dict[str, list[tuple[int, _Sample]]] | None = {}
    kept_n = 0
    window_end = 0  # the head leaf after the last window (out holds whole leaves from there)
    k = 0
    while k < m:
        if not dirty[k]:
            leaf = head_leaves[k]
            out.append((leaf.hash, leaf.bytes, leaf, None))
            k += 1
            continue
        start, stop = k, k + 1
        while stop < m and dirty[stop]:
            stop += 1
        if start > 0 and firsts[start] in gone:
            # The cut before this leaf follows its first sample's folder, which changed: from
            # the leaf before it.
            start -= 1
        while True:
            if start < window_end:
                raise Fallback("two windows meet")  # rare: a whole leaf emptied between them
            del out[len(out) - (k - start) :]  # the whole leaves the window now covers
            k = start
            lo = 0 if start == 0 else bisect_left(by_path, firsts[start])
            hi = len(samples) if stop >= m else bisect_left(by_path, firsts[stop])
            window, origins = _window(entries, head_leaves[start:stop], gone, samples[lo:hi])
            if not window and start > 0:
                start -= 1  # nothing left here: the cut before it moves too
                continue
            inside = head_leaves[start:stop]
            cuts = _cuts(
                window,
                _offered(entries, inside),
                _settled(entries, inside, dirty[start:stop]),
                formatted=formatted,
            )
            if (
                stop >= m
                or not window
                or chunks.cut_follows(window[-1], firsts[stop], cuts[-1][1] - cuts[-1][0])
            ):
                break
            # The window's last sample does not end a leaf before the next head leaf: the cut
            # runs into it, and on until a head boundary.
            stop += 1
            while stop < m and dirty[stop]:
                stop += 1
        out += [(h, size, reused, window[a:b]) for a, b, h, size, reused in cuts]
        if kept is not None:
            kept_n += sum(map(len, origins.values()))
            if kept_n > KEEP_ORIGINS_AT_MOST:
                kept = None
            else:
                kept.update(origins)
        k = window_end = stop
    return Cut(out, formatted, kept)


def _offered(entries: _Entries, leaves: list[LeafRef]) -> list[tuple[LeafRef, bytes]]:
    """Each head leaf with its first sample's key, for _cuts (a run that formats to one of
    them is that leaf)."""
    return [(leaf, sample_key(sample_of(entries(leaf)[0]))) for leaf in leaves]


def _settled(entries: _Entries, leaves: list[LeafRef], dirty: list[bool]) -> dict[str, bytes]:
    """For _cuts: the window's clean leaves (no affected path from their first sample up to
    the next leaf's), each with its last sample's key. Their samples are in the window as the
    head has them, so a run that starts at one's first key and ends at its last key is that
    leaf, without formatting its samples again to compare bytes."""
    return {
        leaf.hash: sample_key(sample_of(entries(leaf)[-1]))
        for leaf, d in zip(leaves, dirty, strict=True)
        if not d and leaf.count
    }


class _Entries:
    """The head leaves' metadata entries, each leaf read and parsed once per cut: a window
    reads its leaves, offers them to _cuts, and reads them again each time it widens."""

    def __init__(self, data_root: Path) -> None:
        self._data_root = data_root
        self._read: dict[str, list[dict]] = {}

    def __call__(self, leaf: LeafRef) -> list[dict]:
        got = self._read.get(leaf.hash)
        if got is None:
            try:
                got = self._read[leaf.hash] = read_entries(self._data_root, leaf.hash)
            except chunks.ChunkError as exc:
                raise Fallback(str(exc)) from None
        return got


def _window(
    entries: _Entries, leaves: list[LeafRef], gone: set[str], affected: list[_Sample]
) -> tuple[list[_Sample], dict[str, list[tuple[int, _Sample]]]]:
    """The new samples over these head leaves: theirs but the affected paths', and the
    affected samples in their range, by path; and where each kept one comes from (Cut.kept)."""
    origins: dict[str, list[tuple[int, _Sample]]] = {}
    kept: list[_Sample] = []
    for leaf in leaves:
        mine = [
            (pos, s) for pos, s in enumerate(map(sample_of, entries(leaf))) if s.path not in gone
        ]
        origins[leaf.hash] = mine
        kept += [s for _pos, s in mine]
    # An affected path's samples all come from the change set: merge by path (a stable sort
    # keeps each path's rows in their order).
    return sorted(kept + affected, key=lambda s: s.path), origins

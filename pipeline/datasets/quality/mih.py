"""Multi-index hashing over 64-bit hashes: every pair within a Hamming distance, never all pairs.

The 64 bits are cut into ``threshold + 2`` bands. Two hashes within ``threshold`` bits differ in
at most ``threshold`` bands, so by pigeonhole they agree exactly on TWO bands at least: the
lookup keys are the pairs of bands (C(threshold + 2, 2) keys of ~21 bits at the default 4),
candidates are the hashes sharing one key, verified by their full distance. Two bands per key
rather than one band of 12-13 bits: real perceptual hashes have skewed bits, which crowd a
narrow band (measured at 1M hashes: ~750M candidate pairs and 38 s with 5 single bands, 10 s
with the 15 pairs of 6 bands).

``self_pairs`` finds the pairs inside one set (a first build), ``query_pairs`` the pairs
between new hashes and an indexed set (each later build). Both are numpy throughout. A close
pair shares several keys and turns up under each; it is kept only under the FIRST key it
shares (``_first_shared``), so no pass over every sighting is needed to drop the repeats
(on 3,000 crops of a few photos, 160,000 close pairs sighted ~6 times each, that pass was most
of the search's time).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np


def band_shifts(threshold: int) -> list[tuple[int, int]]:
    """(shift, width) of each band: threshold + 2 bands over 64 bits."""
    if not 0 <= threshold <= 32:
        raise ValueError(f"near_duplicate_distance must be in 0..32 bits, got {threshold}")
    m = threshold + 2
    widths = [64 // m + (1 if i < 64 % m else 0) for i in range(m)]
    out, shift = [], 0
    for w in widths:
        out.append((shift, w))
        shift += w
    return out


def key_parts(threshold: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The lookup keys: every pair of two bands."""
    return list(combinations(band_shifts(threshold), 2))


def band_keys(hashes: np.ndarray, parts) -> np.ndarray:
    """The key of two bands, (band 1 << width 2) | band 2; uint32 when it fits."""
    (s1, w1), (s2, w2) = parts
    one = (hashes >> np.uint64(s1)) & np.uint64((1 << w1) - 1)
    two = (hashes >> np.uint64(s2)) & np.uint64((1 << w2) - 1)
    key = (one << np.uint64(w2)) | two
    return key.astype(np.uint32) if w1 + w2 <= 32 else key


def _popcount(a: np.ndarray) -> np.ndarray:
    return np.bitwise_count(a)


def _band_pairs(bands: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each key's two band numbers, in key_parts's order (both are combinations of ``bands``)."""
    return list(combinations(range(len(bands)), 2))


def _first_shared(
    xor: np.ndarray, bands: list[tuple[int, int]], first: int, second: int
) -> np.ndarray:
    """Whether the key of bands ``first`` < ``second`` is the first key that pairs with these
    XORs share: its two bands are the two lowest bands where the pair agrees (key_parts lists
    band pairs in lexicographic order). Every pair sharing a key is kept under exactly one."""
    below = np.zeros(len(xor), dtype=bool)  # agrees on a band before `second`, but `first`
    for b, (shift, width) in enumerate(bands[:second]):
        if b != first:
            below |= ((xor >> np.uint64(shift)) & np.uint64((1 << width) - 1)) == 0
    return ~below


def _sorted_pairs(i: list[np.ndarray], j: list[np.ndarray], n: int) -> np.ndarray:
    """The pairs found (each once), sorted by (i, j)."""
    if not i:
        return np.zeros((0, 2), dtype=np.int64)
    code = np.sort(np.concatenate(i) * np.int64(n) + np.concatenate(j))
    return np.stack([code // n, code % n], axis=1)


def self_pairs(hashes: np.ndarray, threshold: int) -> np.ndarray:
    """(k, 2) int64 index pairs i < j with hamming(h[i], h[j]) <= threshold."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    n = len(hashes)
    out_i: list[np.ndarray] = []
    out_j: list[np.ndarray] = []
    bands = band_shifts(threshold)
    for parts, (first, second) in zip(key_parts(threshold), _band_pairs(bands), strict=True):
        keys = band_keys(hashes, parts)
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
        sh = hashes[order]
        # Compare each sorted position with the one k places on, for k = 1, 2, ...: the
        # positions still inside their bucket shrink to none; total work = pairs sharing a key.
        active = np.arange(n - 1, dtype=np.int64)
        k = 1
        while len(active):
            active = active[active + k < n]
            active = active[sk[active] == sk[active + k]]
            if not len(active):
                break
            xor = sh[active] ^ sh[active + k]
            near = _popcount(xor) <= threshold
            close = active[near]
            close = close[_first_shared(xor[near], bands, first, second)]
            if len(close):
                a, b = order[close], order[close + k]
                out_i.append(np.minimum(a, b))
                out_j.append(np.maximum(a, b))
            k += 1
    return _sorted_pairs(out_i, out_j, max(n, 1))


@dataclass
class BandIndex:
    """An indexed hash set: per key (pair of bands), the keys sorted and the order sorting them."""

    hashes: np.ndarray
    threshold: int
    keys: list[np.ndarray]
    orders: list[np.ndarray]

    @classmethod
    def build(cls, hashes: np.ndarray, threshold: int) -> BandIndex:
        hashes = np.asarray(hashes, dtype=np.uint64)
        keys, orders = [], []
        # int32 positions: half the bytes on disk, and the index holds fewer than 2**31.
        kind = np.int32 if len(hashes) < 2**31 else np.int64
        for parts in key_parts(threshold):
            k = band_keys(hashes, parts)
            order = np.argsort(k, kind="stable").astype(kind)
            keys.append(k[order])
            orders.append(order)
        return cls(hashes, threshold, keys, orders)


def query_pairs(queries: np.ndarray, index: BandIndex, threshold: int | None = None) -> np.ndarray:
    """(k, 2) int64 pairs (query position, index position) within ``threshold`` bits (at most
    the index's own). One binary search per band per query, then only the shared buckets."""
    threshold = index.threshold if threshold is None else threshold
    if threshold > index.threshold:
        raise ValueError("an index built for a smaller threshold cannot answer a larger one")
    queries = np.asarray(queries, dtype=np.uint64)
    out_i: list[np.ndarray] = []
    out_j: list[np.ndarray] = []
    n = len(index.hashes)
    if n == 0 or len(queries) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    bands = band_shifts(index.threshold)
    per_key = zip(
        key_parts(index.threshold),
        _band_pairs(bands),
        index.keys,
        index.orders,
        strict=True,
    )
    for parts, (first, second), sk, order in per_key:
        qk = band_keys(queries, parts)
        lo = np.searchsorted(sk, qk, side="left")
        hi = np.searchsorted(sk, qk, side="right")
        counts = hi - lo
        total = int(counts.sum())
        if not total:
            continue
        q = np.repeat(np.arange(len(queries), dtype=np.int64), counts)
        # Position inside each query's bucket: a running count reset at each query's start.
        starts = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        pos = starts + np.arange(total, dtype=np.int64)
        cand = np.asarray(order[pos], dtype=np.int64)
        xor = queries[q] ^ index.hashes[cand]
        keep = np.flatnonzero(_popcount(xor) <= threshold)
        keep = keep[_first_shared(xor[keep], bands, first, second)]
        out_i.append(q[keep])
        out_j.append(cand[keep])
    return _sorted_pairs(out_i, out_j, n)

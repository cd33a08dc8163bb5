"""Multi-index hashing over 64-bit hashes: every pair within a Hamming distance, never all pairs.

The 64 bits are cut into ``threshold + 1`` bands (at least 5). Two hashes within ``threshold``
bits differ in at most ``threshold`` bands, so by pigeonhole they agree exactly on one band at
least: candidates are the hashes sharing a band value, verified by their full distance. With
13-bit bands a random hash meets ~N/8192 candidates per band, instead of N.

``self_pairs`` finds the pairs inside one set (a first build), ``query_pairs`` the pairs
between new hashes and an indexed set (each later build). Both are numpy throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_BANDS = 5


def band_shifts(threshold: int) -> list[tuple[int, int]]:
    """(shift, width) of each band: threshold + 1 bands (at least MIN_BANDS) over 64 bits."""
    if not 0 <= threshold <= 32:
        raise ValueError(f"near_duplicate_distance must be in 0..32 bits, got {threshold}")
    m = max(MIN_BANDS, threshold + 1)
    widths = [64 // m + (1 if i < 64 % m else 0) for i in range(m)]
    out, shift = [], 0
    for w in widths:
        out.append((shift, w))
        shift += w
    return out


def band_keys(hashes: np.ndarray, shift: int, width: int) -> np.ndarray:
    return (hashes >> np.uint64(shift)) & np.uint64((1 << width) - 1)


def _popcount(a: np.ndarray) -> np.ndarray:
    return np.bitwise_count(a)


def _unique_pairs(i: list[np.ndarray], j: list[np.ndarray], n: int) -> np.ndarray:
    if not i:
        return np.zeros((0, 2), dtype=np.int64)
    a = np.concatenate(i)
    b = np.concatenate(j)
    code = np.unique(a * np.int64(n) + b)
    return np.stack([code // n, code % n], axis=1)


def self_pairs(hashes: np.ndarray, threshold: int) -> np.ndarray:
    """(k, 2) int64 index pairs i < j with hamming(h[i], h[j]) <= threshold."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    n = len(hashes)
    out_i: list[np.ndarray] = []
    out_j: list[np.ndarray] = []
    for shift, width in band_shifts(threshold):
        keys = band_keys(hashes, shift, width)
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
            close = active[_popcount(sh[active] ^ sh[active + k]) <= threshold]
            if len(close):
                a, b = order[close], order[close + k]
                out_i.append(np.minimum(a, b))
                out_j.append(np.maximum(a, b))
            k += 1
    return _unique_pairs(out_i, out_j, max(n, 1))


@dataclass
class BandIndex:
    """An indexed hash set: per band, the band keys sorted and the order that sorts them."""

    hashes: np.ndarray
    threshold: int
    keys: list[np.ndarray]
    orders: list[np.ndarray]

    @classmethod
    def build(cls, hashes: np.ndarray, threshold: int) -> BandIndex:
        hashes = np.asarray(hashes, dtype=np.uint64)
        keys, orders = [], []
        for shift, width in band_shifts(threshold):
            k = band_keys(hashes, shift, width)
            order = np.argsort(k, kind="stable")
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
    for (shift, width), sk, order in zip(
        band_shifts(index.threshold), index.keys, index.orders, strict=True
    ):
        qk = band_keys(queries, shift, width)
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
        keep = _popcount(queries[q] ^ index.hashes[cand]) <= threshold
        out_i.append(q[keep])
        out_j.append(cand[keep])
    return _unique_pairs(out_i, out_j, n) if out_i else np.zeros((0, 2), dtype=np.int64)

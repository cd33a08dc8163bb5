"""A 64-bit difference hash (dHash) of stored, processed samples, vectorised over a batch.

The hash is of what the build STORED (the uint8 (C, H, W) rows of a segment's ``x``), not of
the source file: two sources that decode, resize and crop to nearly the same sample are what
training sees twice. dHash: the grey image averaged down to 9x8 cells, one bit per pair of
horizontally adjacent cells (left brighter than right). It survives re-encoding, a slight
brightening (a constant shift cancels in the difference) and resizing by a few pixels (the
cells average over them); a thin border moves the outer cells a little, which the distance
threshold absorbs. One numpy pass per batch: no per-image Python, no extra dependency.

Table rows get an exact 64-bit hash of the normalised row instead (``row_hashes``).
"""

from __future__ import annotations

import hashlib

import numpy as np

HASH_COLS = 9
HASH_ROWS = 8
# An image hashed over its inner part only: a thin border (a few pixels of frame) then
# touches no cell. 1/16 of each side, i.e. 4 px of a 64 px sample.
MARGIN = 1 / 16


def _cell_edges(n: int, cells: int) -> np.ndarray:
    return np.linspace(0, n, cells + 1).round().astype(np.int64)


def _area_means(gray: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """(N, H, W) float → (N, rows, cols) means over a grid of near-equal cells, so any H, W
    works, upscaling included. The cells' sums are taken in float64 by ``np.add.reduceat``
    (rows, then columns), not through an integral image: 4x less work at 96 px. For uint8
    samples the hashes stay those of the integral image, bit for bit: their grey levels are
    float32 thirds of integers below 766, which float64 adds up exactly, in any order."""
    n, h, w = gray.shape
    if h < rows or w < cols:  # tiny samples (8x8 digits): repeat pixels up to the grid first
        gray = np.repeat(np.repeat(gray, -(-rows // h), axis=1), -(-cols // w), axis=2)
        n, h, w = gray.shape
    r = _cell_edges(h, rows)
    c = _cell_edges(w, cols)
    total = np.add.reduceat(np.add.reduceat(gray, r[:-1], axis=1, dtype=np.float64), c[:-1], axis=2)
    area = (r[1:] - r[:-1])[:, None] * (c[1:] - c[:-1])[None, :]
    return total / area


def dhash(x: np.ndarray) -> np.ndarray:
    """uint64 dHash of each sample of ``x`` (N, C, H, W) or (N, H, W), any numeric dtype."""
    x = np.asarray(x)
    if x.ndim not in (3, 4):
        raise ValueError(f"dhash needs (N, C, H, W) or (N, H, W) samples, got shape {x.shape}")
    n, h, w = len(x), x.shape[-2], x.shape[-1]
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    mh, mw = int(h * MARGIN), int(w * MARGIN)
    if h - 2 * mh >= HASH_ROWS and w - 2 * mw >= HASH_COLS:
        x = x[..., mh : h - mh, mw : w - mw]  # cropped first: the margin is never averaged
    gray = x.astype(np.float32) if x.ndim == 3 else x.mean(axis=1, dtype=np.float32)
    cells = _area_means(gray, HASH_ROWS, HASH_COLS)
    bits = cells[:, :, :-1] > cells[:, :, 1:]  # (N, 8, 8)
    packed = np.packbits(bits.reshape(n, 64), axis=1)  # (N, 8) bytes, big-endian bit order
    return np.ascontiguousarray(packed).view(">u8").reshape(n).astype(np.uint64)


# Below this spread of grey levels (of 255) a sample has no structure a perceptual hash can
# compare: blank or near-uniform frames would all collide.
FLAT_STD = 2.0
# A dHash with fewer than this many 1 bits (or 0 bits) says little more than "brightness runs
# one way": every left-to-right gradient hashes to ~0. Such samples are left out too.
MIN_BITS = 8


# Below this side (in pixels) a 64-bit hash compares single pixels, not image structure:
# distinct 8x8 digits of one class land within 4 bits of each other (90 of sklearn's 1,797
# were pulled into one another's split). Such samples are left out of near-duplicate groups.
MIN_SIDE = 16


def is_flat(x: np.ndarray, moments: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Whether each sample's values (all channels) spread less than FLAT_STD, from its sum and
    sum of squares in float64: one matrix product per batch instead of numpy's std and its
    temporaries (2x faster), or none when the caller has them (``moments``: each sample's sum
    and sum of squares, as process has them for the mean and std). Exact for uint8 samples of
    up to ~370,000 values (a 350x350 RGB sample); larger ones are off by float64 rounding, as
    std is."""
    x = np.asarray(x)
    m = int(np.prod(x.shape[1:]))
    if len(x) == 0 or m == 0:
        return np.zeros(len(x), dtype=bool)
    if moments is None:
        flat = x.reshape(len(x), m).astype(np.float64)
        moments = flat.sum(axis=1), np.matmul(flat[:, None, :], flat[:, :, None]).reshape(len(x))
    sums, squares = moments
    # std < FLAT_STD  <=>  m * sum(v^2) - sum(v)^2 < (FLAT_STD * m)^2
    return m * squares - sums * sums < (FLAT_STD * m) ** 2


def perceptual_hash(
    x: np.ndarray, moments: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 dHash, unhashable mask) of each sample: a sample is unhashable when it is too
    small (MIN_SIDE), flat, or its hash is degenerate (see FLAT_STD, MIN_BITS); it takes part
    in no near-duplicate group (its exact duplicates are still found by md5). ``moments``: see
    is_flat."""
    hashes = dhash(x)
    if np.ndim(x) >= 3 and min(np.shape(x)[-2:]) < MIN_SIDE:
        return hashes, np.ones(len(hashes), dtype=bool)
    ones = np.bitwise_count(hashes)
    return hashes, is_flat(x, moments) | (ones < MIN_BITS) | (ones > 64 - MIN_BITS)


def row_hashes(x: np.ndarray, decimals: int = 6) -> np.ndarray:
    """uint64 of each table row after normalisation: float32, rounded to ``decimals``, -0 as 0,
    every NaN alike. Identical feature rows (whatever their file, line or label) collide."""
    rows = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    rows = np.round(rows, decimals) + np.float32(0.0)  # + 0.0 turns -0.0 into 0.0
    rows = np.where(np.isnan(rows), np.float32(np.nan), rows)
    out = np.empty(len(rows), dtype=np.uint64)
    for i, row in enumerate(np.ascontiguousarray(rows)):
        out[i] = int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "big")
    return out


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.bitwise_count(np.bitwise_xor(a, b))

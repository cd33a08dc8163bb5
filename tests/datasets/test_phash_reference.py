"""The perceptual hash's fast arithmetic (cell sums by reduceat, flatness from sums and sums of
squares) gives what the plain formulas give: the hashes bit for bit, so hashes stored by earlier
builds and new ones still compare; the flat verdicts sample for sample. The reference is
written here: an integral image and numpy's std, as the hash was first computed."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_sample_images

from pipeline.datasets.quality import phash


def _reference_dhash(x: np.ndarray) -> np.ndarray:
    gray = x.astype(np.float32) if x.ndim == 3 else x.mean(axis=1, dtype=np.float32)
    n, h, w = gray.shape
    mh, mw = int(h * phash.MARGIN), int(w * phash.MARGIN)
    if h - 2 * mh >= phash.HASH_ROWS and w - 2 * mw >= phash.HASH_COLS:
        gray = gray[:, mh : h - mh, mw : w - mw]
    rows, cols = phash.HASH_ROWS, phash.HASH_COLS
    n, h, w = gray.shape
    if h < rows or w < cols:
        gray = np.repeat(np.repeat(gray, -(-rows // h), axis=1), -(-cols // w), axis=2)
        n, h, w = gray.shape
    integral = np.zeros((n, h + 1, w + 1), dtype=np.float64)
    np.cumsum(np.cumsum(gray, axis=1, dtype=np.float64), axis=2, out=integral[:, 1:, 1:])
    r = np.linspace(0, h, rows + 1).round().astype(np.int64)
    c = np.linspace(0, w, cols + 1).round().astype(np.int64)
    total = (
        integral[:, r[1:, None], c[None, 1:]]
        - integral[:, r[:-1, None], c[None, 1:]]
        - integral[:, r[1:, None], c[None, :-1]]
        + integral[:, r[:-1, None], c[None, :-1]]
    )
    cells = total / ((r[1:] - r[:-1])[:, None] * (c[1:] - c[:-1])[None, :])
    bits = cells[:, :, :-1] > cells[:, :, 1:]
    packed = np.ascontiguousarray(np.packbits(bits.reshape(n, 64), axis=1))
    return packed.view(">u8").reshape(n).astype(np.uint64)


def _photo_crops(shape: tuple[int, ...], count: int, seed: int) -> np.ndarray:
    """``count`` crops of real photos, resized to ``shape`` ((C, H, W) or (H, W)) by striding."""
    rng = np.random.default_rng(seed)
    photos = load_sample_images().images
    out = []
    for k in range(count):
        photo = photos[k % len(photos)]
        h, w = shape[-2:]
        most = min(3, (photo.shape[0] - 1) // h, (photo.shape[1] - 1) // w)
        step = int(rng.integers(1, most + 1))
        y = int(rng.integers(0, photo.shape[0] - h * step))
        x = int(rng.integers(0, photo.shape[1] - w * step))
        crop = photo[y : y + h * step : step, x : x + w * step : step]  # (h, w, 3)
        crop = crop.transpose(2, 0, 1)
        if len(shape) == 2:
            crop = crop[0]
        elif shape[0] == 1:
            crop = crop[:1]
        out.append(crop)
    return np.ascontiguousarray(np.stack(out))


@pytest.mark.parametrize(
    "shape",
    [(3, 96, 96), (3, 224, 224), (1, 64, 64), (64, 64), (3, 37, 21), (3, 8, 8), (3, 5, 30)],
)
def test_dhash_is_the_integral_image_hash_bit_for_bit(shape):
    photos = _photo_crops(shape, 40, seed=sum(shape))
    noise = np.random.default_rng(7).integers(0, 256, (40, *shape), dtype=np.uint8)
    # Near ties: a smooth ramp, so adjacent cells differ by a fraction of a grey level.
    ramp = np.broadcast_to(np.linspace(100, 103, shape[-1]), shape).astype(np.uint8)[None]
    for x in (photos, noise, ramp):
        assert np.array_equal(phash.dhash(x), _reference_dhash(x))


def test_flat_verdicts_are_numpys_std_below_the_threshold():
    rng = np.random.default_rng(3)
    base = np.full((3, 96, 96), 120, dtype=np.uint8)
    samples = [base, *_photo_crops((3, 96, 96), 20, seed=1)]
    # Around the threshold: k pixels of one channel moved by d from a flat grey; the spread
    # walks across FLAT_STD (2.0) from below to above.
    for k in range(200, 2600, 50):
        for d in (8, 9, 10, 12):
            s = base.copy()
            idx = rng.choice(base.size, size=k, replace=False)
            s.reshape(-1)[idx] += d
            samples.append(s)
    x = np.stack(samples)
    std = x.reshape(len(x), -1).std(axis=1)
    assert (std < phash.FLAT_STD).sum() > 20 and (std >= phash.FLAT_STD).sum() > 20
    clear = np.abs(std - phash.FLAT_STD) > 1e-9  # a tie is decided by rounding either way
    assert np.array_equal(phash.is_flat(x)[clear], (std < phash.FLAT_STD)[clear])
    # The same verdicts from moments the caller already has (process: its mean/std sums).
    values = x.reshape(len(x), -1).astype(np.int64)
    moments = values.sum(axis=1).astype(np.float64), (values**2).sum(axis=1).astype(np.float64)
    assert np.array_equal(phash.is_flat(x, moments), phash.is_flat(x))
    assert phash.is_flat(x[:0]).shape == (0,)

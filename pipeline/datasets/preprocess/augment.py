"""Offline augmentation of uint8 (C, H, W) images, deterministic from (md5, copy_index).

Each augmented copy's random stream is seeded from a hash of the source md5 and the copy
index, so a rebuild produces the same bytes and versions stay content-addressed. Ops run in
the order the recipe lists them; each op draws its parameters whether or not it changes the
image, so the stream of one op never depends on another op's outcome.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from PIL import Image

# Milder than torchvision's training defaults: offline copies are kept forever, and a crop of
# 8 % of the area would throw most of a small image away.
CROP_SCALE = (0.5, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)
JITTER = 0.2  # brightness, contrast and saturation factors drawn from [1 - JITTER, 1 + JITTER]


def rng_for(md5: str, copy_index: int) -> np.random.Generator:
    digest = hashlib.sha256(f"laketrain-augment:{md5}:{copy_index}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "little"))


def augment(
    x: np.ndarray,
    *,
    md5: str,
    copy_index: int,
    ops: Sequence[str],
    crop_scale: tuple[float, float] = CROP_SCALE,
    crop_ratio: tuple[float, float] = CROP_RATIO,
    jitter: float = JITTER,
) -> np.ndarray:
    """Return an augmented copy of ``x`` (uint8 (C, H, W)), same shape and dtype."""
    if x.dtype != np.uint8 or x.ndim != 3 or x.shape[0] not in (1, 3):
        raise ValueError(f"augment needs uint8 (C, H, W) with C in 1, 3; got {x.dtype} {x.shape}")
    rng = rng_for(md5, copy_index)
    out = x
    for op in ops:
        if op == "hflip":
            out = hflip(out, rng)
        elif op == "random_resized_crop":
            out = random_resized_crop(out, rng, crop_scale, crop_ratio)
        elif op == "color_jitter":
            out = color_jitter(out, rng, jitter)
        else:
            raise ValueError(
                f"unknown augmentation op {op!r}; allowed: hflip, random_resized_crop, color_jitter"
            )
    return np.ascontiguousarray(out, dtype=np.uint8)


def hflip(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return x[:, :, ::-1] if rng.random() < 0.5 else x


def random_resized_crop(
    x: np.ndarray, rng: np.random.Generator, scale: tuple[float, float], ratio: tuple[float, float]
) -> np.ndarray:
    c, h, w = x.shape
    area = rng.uniform(*scale) * h * w
    aspect = float(np.exp(rng.uniform(np.log(ratio[0]), np.log(ratio[1]))))
    cw = min(w, max(1.0, np.sqrt(area * aspect)))
    ch = min(h, max(1.0, np.sqrt(area / aspect)))
    left = rng.uniform(0, w - cw)
    top = rng.uniform(0, h - ch)
    box = (left, top, left + cw, top + ch)
    planes = [
        np.asarray(Image.fromarray(x[i]).resize((w, h), Image.Resampling.BILINEAR, box=box))
        for i in range(c)
    ]
    return np.stack(planes)


def color_jitter(x: np.ndarray, rng: np.random.Generator, strength: float) -> np.ndarray:
    b, k, s = rng.uniform(1 - strength, 1 + strength, size=3)
    f = x.astype(np.float32)
    f = f * b
    gray = _gray(f)
    f = (f - gray.mean()) * k + gray.mean()
    if f.shape[0] == 3:  # saturation has no meaning for a single channel
        gray = _gray(f)
        f = gray + (f - gray) * s
    return np.rint(f).clip(0, 255).astype(np.uint8)


def _gray(f: np.ndarray) -> np.ndarray:
    if f.shape[0] == 1:
        return f
    return (0.299 * f[0] + 0.587 * f[1] + 0.114 * f[2])[None]

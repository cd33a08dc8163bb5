"""A PNG grid of a few samples per class, drawn from a version's stored uint8 arrays.

The only part of the page that reads data files: it opens the version with the dataset reader
(memory-mapped segments) and touches just the handful of rows it shows.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

CELL = 72  # pixels per thumbnail
PAD = 4
LABEL_W = 120


class NoThumbnails(ValueError):
    """The version holds no image arrays (a table dataset) or none could be read."""


def to_image(x: np.ndarray) -> Image.Image:
    """One stored sample (C,H,W uint8, C in 1/3/4) as an RGB image."""
    if x.ndim != 3 or x.dtype != np.uint8:
        raise NoThumbnails(f"sample is not an image array (shape {x.shape}, dtype {x.dtype})")
    c = x.shape[0]
    hwc = np.ascontiguousarray(np.moveaxis(x, 0, -1))
    if c == 1:
        return Image.fromarray(hwc[:, :, 0], mode="L").convert("RGB")
    if c in (3, 4):
        return Image.fromarray(hwc[:, :, :3], mode="RGB")
    raise NoThumbnails(f"sample has {c} channels")


def fit(img: Image.Image, cell: int) -> Image.Image:
    """Scale to fit a cell; nearest when enlarging keeps 8×8 digits crisp instead of a blur."""
    scale = cell / max(img.size)
    size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
    resample = Image.Resampling.NEAREST if scale >= 1 else Image.Resampling.BILINEAR
    return img.resize(size, resample)


def render_grid(rows: list[tuple[str, list[np.ndarray]]], *, cell: int = CELL) -> bytes:
    """PNG bytes: one row per (label, samples), the label written at the left."""
    if not rows:
        raise NoThumbnails("no samples to show")
    cols = max(len(samples) for _, samples in rows)
    width = LABEL_W + cols * (cell + PAD) + PAD
    height = len(rows) * (cell + PAD) + PAD
    grid = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(grid)
    for r, (label, samples) in enumerate(rows):
        top = PAD + r * (cell + PAD)
        text = label if len(label) <= 18 else label[:17] + "…"
        draw.text((PAD, top + cell // 2 - 6), text, fill=(30, 30, 30))
        for c, x in enumerate(samples):
            img = fit(to_image(x), cell)
            left = LABEL_W + PAD + c * (cell + PAD)
            grid.paste(img, (left + (cell - img.width) // 2, top + (cell - img.height) // 2))
    buf = io.BytesIO()
    grid.save(buf, format="PNG", optimize=False)
    return buf.getvalue()


def version_grid(store: Any, ref: str, *, per_class: int = 6, data_root: Any = None) -> bytes:
    """The grid for one version: sample choice from the store, pixels from the stored arrays."""
    from pipeline.datasets.reader import open_version
    from pipeline.ui.data import thumbnail_rows

    version, picks = thumbnail_rows(store, ref, per_class=per_class)
    if not picks:
        raise NoThumbnails("the version has no samples")
    from pipeline.datasets.manifest import VersionNotFound

    try:
        reader = open_version(version.dataset, version.version_id, data_root=data_root, store=store)
    except (VersionNotFound, OSError) as exc:  # a deleted (gc'd) version has no arrays left
        raise NoThumbnails(f"the arrays of {version.tag} cannot be read: {exc}") from None
    if getattr(reader, "modality", "image") not in (None, "image"):
        raise NoThumbnails(f"a {reader.modality} dataset has no thumbnails")
    rows: dict[str, list[np.ndarray]] = {}
    for p in picks:
        x, _y = reader[p["idx"]]
        rows.setdefault(p["label"] if p["label"] is not None else "(unlabelled)", []).append(
            np.asarray(x)
        )
    return render_grid(list(rows.items()))

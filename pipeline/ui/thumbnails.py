"""A PNG grid of a few samples per class, drawn from a version's stored uint8 arrays.

The only part of the page that reads data files: it opens the version with the dataset reader
(memory-mapped segments) and touches just the handful of rows it shows.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from pipeline.ui.errors import DamagedData

CELL = 72  # pixels per thumbnail
PAD = 4
LABEL_W = 120


class NoThumbnails(ValueError):
    """The version holds no image arrays (a table dataset, a deleted version)."""


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


def message_png(text: str, *, width: int = 560) -> bytes:
    """A PNG that says ``text``: what an <img> on the version page shows instead of a broken
    image when the arrays cannot be drawn (the JSON body would be invisible there)."""
    import textwrap

    lines = ["Cannot draw the thumbnails:"]
    for part in text.split(": ", 1):  # the version, then what is wrong with it
        lines += textwrap.wrap(part, width=width // 7) or [""]
    lines = lines[:14]
    img = Image.new("RGB", (width, 16 * len(lines) + 2 * PAD), (255, 244, 244))
    draw = ImageDraw.Draw(img)
    for n, line in enumerate(lines):
        try:
            draw.text((PAD, PAD + 16 * n), line, fill=(164, 22, 26))
        except UnicodeEncodeError:  # Pillow's built-in bitmap font is Latin-1 only
            safe = line.encode("latin-1", "replace").decode("latin-1")
            draw.text((PAD, PAD + 16 * n), safe, fill=(164, 22, 26))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def version_grid(
    store: Any,
    ref: str,
    *,
    dataset: str | None = None,
    per_class: int = 6,
    data_root: Any = None,
) -> bytes:
    """The grid for one version: sample choice from the store, pixels from the stored arrays.
    Arrays that cannot be read as the manifest says raise DamagedData naming the version and
    the segment (a truncated or garbage ``x.npy``, an index past a segment's rows)."""
    from pipeline.datasets.manifest import VersionNotFound
    from pipeline.datasets.reader import open_version
    from pipeline.ui.data import thumbnail_rows

    version, picks = thumbnail_rows(store, ref, dataset=dataset, per_class=per_class)
    if not picks:
        raise NoThumbnails("the version has no samples")
    what = f"version {version.tag} ({version.version_id[:12]})"
    try:
        reader = open_version(version.dataset, version.version_id, data_root=data_root, store=store)
    except VersionNotFound as exc:  # a deleted (gc'd) version has no arrays left
        raise NoThumbnails(f"the arrays of {version.tag} cannot be read: {exc}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:  # ManifestError is a ValueError
        raise DamagedData(
            f"{what}: its folder {version.path} cannot be read: {_plain(exc, data_root)}"
        ) from None
    if getattr(reader, "modality", "image") not in (None, "image"):
        raise NoThumbnails(f"a {reader.modality} dataset has no thumbnails")
    rows: dict[str, list[np.ndarray]] = {}
    for p in picks:
        x = _read_sample(reader, p, what)
        rows.setdefault(p["label"] if p["label"] is not None else "(unlabelled)", []).append(x)
    try:
        return render_grid(list(rows.items()))
    except NoThumbnails as exc:  # a stored row that is no image array: the data disagrees
        raise DamagedData(f"{what}: {exc}") from None


def _read_sample(reader: Any, pick: dict[str, Any], what: str) -> np.ndarray:
    i = pick["idx"]
    if not 0 <= i < len(reader):
        raise DamagedData(
            f"{what}: the store lists sample {i} ({pick['path']}) but the version folder holds "
            f"{len(reader)} samples: the store and the folder disagree"
        )
    try:
        x, _y = reader[i]
        return np.asarray(x)
    except Exception as exc:  # any reader failure on stored bytes is damage, named below
        raise DamagedData(
            f"{what}: sample {i} ({pick['path']}) {_segment_of(reader, i)} cannot be read: "
            f"{_plain(exc, reader.data_root)}"
        ) from None


def _segment_of(reader: Any, i: int) -> str:
    """Where sample ``i`` lives, from the version's own metadata (best effort: that file may be
    damaged too)."""
    try:
        meta = reader.metadata(i)
        seg = meta.get("segment")
        paths = {s.get("id"): s.get("path") for s in reader.manifest.get("segments") or []}
        return f"in segment {paths.get(seg) or seg} row {meta.get('row')}"
    except Exception:
        return "(its segment is unknown: the version's metadata cannot be read either)"


def _plain(exc: Exception, data_root: Any) -> str:
    """The error's text with this server's DATA_ROOT written as such: the message names the
    file relative to it, as the version page does, not the machine's absolute path."""
    if data_root is None:
        from pipeline.settings import get_settings

        data_root = get_settings().data_root
    return str(exc).replace(str(data_root).rstrip("/"), "DATA_ROOT") or type(exc).__name__

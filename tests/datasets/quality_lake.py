"""Real photos for the quality tests: the distinct photos shipped with scikit-image and
scikit-learn, random crops of them, and the planted near-duplicate edits of one photo."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

# skimage.data's photos and images, local (no download). "cat" is left out: it is the same
# photo as "chelsea", a true duplicate and not a false positive; "binary_blobs" is drawn at
# random on each call.
SKIMAGE_PHOTOS = (
    "astronaut", "camera", "coffee", "chelsea", "rocket", "hubble_deep_field",
    "immunohistochemistry", "moon", "page", "text", "coins", "horse", "clock", "grass",
    "gravel", "brick", "colorwheel", "retina", "logo", "cell",
    "shepp_logan_phantom",
)  # fmt: skip

QUALITY_RECIPE = (
    'modality = "image"\n\n[image]\nsize = 64\nchannels = 3\nresize = "center_crop"\n\n'
    '[labels]\nrule = "parent_dir"\n\n[split]\nval_fraction = 0.3\n'
)


def distinct_photos() -> list[tuple[str, Image.Image]]:
    import skimage.data
    from sklearn.datasets import load_sample_images

    out = []
    for name in SKIMAGE_PHOTOS:
        a = getattr(skimage.data, name)()
        if a.dtype != np.uint8:  # bool / float images in 0..1
            a = (np.asarray(a, dtype=np.float64) * 255).astype(np.uint8)
        out.append((name, Image.fromarray(a).convert("RGB")))
    for i, a in enumerate(load_sample_images().images):
        out.append((f"sklearn{i}", Image.fromarray(a).convert("RGB")))
    return out


def random_crops(photos, per_photo: int = 3, seed: int = 0) -> list[tuple[str, Image.Image]]:
    rng = np.random.default_rng(seed)
    out = []
    for name, im in photos:
        w, h = im.size
        for k in range(per_photo):
            cw, ch = int(w * rng.uniform(0.3, 0.6)), int(h * rng.uniform(0.3, 0.6))
            x0, y0 = int(rng.integers(0, w - cw)), int(rng.integers(0, h - ch))
            out.append((f"{name}-crop{k}", im.crop((x0, y0, x0 + cw, y0 + ch))))
    return out


def planted_edits(im: Image.Image) -> dict[str, tuple[Image.Image, int]]:
    """The issue's near-duplicates of ``im``: (edited image, JPEG quality) by edit."""
    w, h = im.size
    b = max(2, w // 100)
    return {
        "reencoded": (im, 30),
        "resized": (im.resize((w - 6, h - 4)), 92),
        "brightened": (ImageEnhance.Brightness(im).enhance(1.08), 92),
        "bordered": (ImageOps.expand(im.resize((w - 2 * b, h - 2 * b)), border=b, fill=0), 92),
    }


def save_jpeg(path: Path, im: Image.Image, quality: int = 92) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    im.save(tmp, format="JPEG", quality=quality)
    os.replace(tmp, path)
    return path

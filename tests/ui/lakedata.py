"""Two real versions of a small digits dataset, built by the real pipeline (scan → build).

v1: 8 digits of each class 0-9. v2: two files removed, one rewritten with other pixels, three
added, a corrupt PNG (an invalid file) and a file whose lake path is
``digits/<script>alert(1)</script>.png`` (the folder ``<script>alert(1)<`` holding
``script>.png``: the path string is the hostile name, its class the hostile folder).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

EVIL_PATH = "digits/<script>alert(1)</script>.png"
EVIL_LABEL = "<script>alert(1)<"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Built:
    v1: dict
    v2: dict
    removed: list[str]
    changed: str
    added: list[str]
    invalid: str


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return np.clip(d.images * (255.0 / 16.0), 0, 255).astype("uint8"), d.target


def _save(pixels: np.ndarray, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    Image.fromarray(pixels, mode="L").save(tmp, format="PNG")
    os.replace(tmp, dest)


def build_two_versions(lake: Path, store) -> Built:
    """Write the lake, build v1, change it, build v2; both through pipeline.datasets.build."""
    from pipeline.datasets.build import build

    images, labels = _digits()
    per_class: dict[int, int] = {}
    written: list[str] = []
    for i, (px, y) in enumerate(zip(images, labels, strict=True)):
        if per_class.get(int(y), 0) >= 8:
            continue
        per_class[int(y)] = per_class.get(int(y), 0) + 1
        rel = f"digits/{int(y)}/{i:04d}.png"
        _save(px, lake / rel)
        written.append(rel)
    v1 = build("digits", workers=1, store=store)
    assert v1 is not None

    removed = [written[0], written[9]]
    for rel in removed:
        (lake / rel).unlink()
    changed = written[20]
    _save(255 - images[int(Path(changed).stem)], lake / changed)
    added = []
    for i in range(1700, 1703):
        rel = f"digits/{int(labels[i])}/{i:04d}.png"
        _save(images[i], lake / rel)
        added.append(rel)
    _save(images[1703], lake / EVIL_PATH)
    added.append(EVIL_PATH)
    invalid = "digits/3/broken.png"
    (lake / invalid).write_bytes(b"\x89PNG\r\n\x1a\n this is not a png")
    v2 = build("digits", workers=1, store=store)
    assert v2 is not None
    return Built(v1.to_dict(), v2.to_dict(), removed, changed, added, invalid)


def lake_env(home: Path) -> dict[str, str]:
    """The laketrain settings for a test home (the repo's recipes: digits stays 8×8)."""
    return {
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(home / "lake"),
        "DATA_ROOT": str(home / "data"),
        "CHECKPOINT_URL": (home / "objects").as_uri(),
        "RECIPES_DIR": str(REPO / "recipes"),
        "SETTLE_SECONDS": "0",
    }

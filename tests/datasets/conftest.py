"""Fixtures for the dataset-store tests: small lakes of real image files, recipes, and a
fingerprint of the whole lake tree (to prove a build never touches it)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

SMALL_IMAGE_RECIPE = (
    'modality = "image"\n\n[image]\nsize = 16\nchannels = 3\nresize = "center_crop"\n\n'
    '[labels]\nrule = "parent_dir"\n\n[split]\nval_fraction = 0.3\n'
)


def write_jpeg(path: Path, seed: int, size: tuple[int, int] = (24, 20)) -> Path:
    """A random-noise RGB JPEG (distinct content per seed), back-dated so it is settled."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(
        tmp, format="JPEG", quality=90
    )
    os.replace(tmp, path)
    return path


def write_near_copy(src: Path, dst: Path) -> Path:
    """The picture at ``src`` with one pixel nudged, as a PNG: other bytes, a near-duplicate
    (the same ``src`` always gives the same bytes)."""
    pixels = np.asarray(Image.open(src).convert("RGB")).copy()
    pixels[0, 0] = (pixels[0, 0].astype(int) + 9) % 256
    dst.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(dst, format="PNG")
    return dst


def write_recipe(home: Path, dataset: str, text: str = SMALL_IMAGE_RECIPE) -> Path:
    path = home / "recipes" / f"{dataset}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def image_lake(
    home: Path,
    dataset: str = "pets",
    per_class: int = 6,
    classes: tuple[str, ...] = ("cat", "dog"),
    *,
    seed0: int = 0,
    recipe: str = SMALL_IMAGE_RECIPE,
) -> list[str]:
    """Write ``per_class`` JPEGs per class folder and the dataset's recipe; return the
    lake-relative paths."""
    write_recipe(home, dataset, recipe)
    paths = []
    for ci, cls in enumerate(classes):
        for i in range(per_class):
            rel = f"{dataset}/{cls}/{i:03d}.jpg"
            write_jpeg(home / "lake" / rel, seed=seed0 + 1000 * ci + i)
            paths.append(rel)
    return paths


def tree_digest(root: Path) -> dict[str, tuple[str, int, int]]:
    """Bytes, mode and mtime of every entry under ``root``."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            digest = (
                hashlib.sha256(p.read_bytes()).hexdigest()
                if p.is_file() and not p.is_symlink()
                else ""
            )
            out[str(p.relative_to(root))] = (digest, st.st_mode, st.st_mtime_ns)
    return out


def copy_lake(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, copy_function=shutil.copy2)


@pytest.fixture
def home(lt_env: Path) -> Path:
    return lt_env


@pytest.fixture
def sqlite_store(lt_env: Path, monkeypatch: pytest.MonkeyPatch):
    """A SQLite store for tests where the backend does not matter (reader, export)."""
    from pipeline.metadata.store import MetadataStore
    from pipeline.settings import get_settings

    url = f"sqlite:///{lt_env / 'data' / 'metadata.db'}"
    monkeypatch.setenv("METADATA_DB_URL", url)
    get_settings.cache_clear()
    s = MetadataStore(url)
    yield s
    s.dispose()

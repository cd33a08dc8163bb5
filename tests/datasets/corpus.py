"""A corpus of awkward and broken input files, written with real Pillow / numpy / csv.

Used by the preprocessor tests and by the end-to-end build test ("the good files build, each
bad one is listed with its reason, the lake is byte-for-byte unchanged").

``write_bad_corpus(dataset_dir, modality=...)`` writes one dataset folder of one modality (a
recipe has one modality) and returns ``{key: expected}``:
- ``key`` is the path relative to ``dataset_dir`` (posix); for table rows it is
  ``"<relpath>#<line>"`` (a row of that file, CSV line numbers with the header as line 1);
- ``expected`` is a substring of the InvalidInput reason (or of the invalid-row reason), or
  ``None`` for a file (or row) that must decode fine.
``corpus_recipe_toml(modality)`` is the recipe text the corpus is meant to be built with.
"""

from __future__ import annotations

import io
import pickle
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

CORPUS_RECIPES = {
    "image": 'modality = "image"\n\n[image]\nsize = 16\nchannels = 3\nresize = "center_crop"\n\n'
    '[labels]\nrule = "parent_dir"\n\n[split]\nval_fraction = 0.2\n',
    "array": 'modality = "array"\n\n[array]\nshape = [4, 4]\ndtype = "float32"\n\n[labels]\nrule = "parent_dir"\n',
    "table": 'modality = "table"\n\n[table]\nlabel_column = "label"\nfeature_columns = ["x1", "x2"]\n',
}


def corpus_recipe_toml(modality: str = "image") -> str:
    return CORPUS_RECIPES[modality]


# ---- single files (also used directly by the unit tests) -------------------------------------


def noise_rgb(w: int, h: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), mode="RGB")


def write_jpeg(path: Path, img: Image.Image, **kwargs: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="JPEG", quality=90, **kwargs)
    return path


def write_truncated_jpeg(path: Path, keep: float = 0.5) -> Path:
    buf = io.BytesIO()
    noise_rgb(96, 96, seed=1).save(buf, format="JPEG", quality=95)
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def write_bomb_png(path: Path, width: int = 20_000, height: int = 20_000) -> Path:
    """A tiny PNG whose header claims width x height pixels (default 400 M, past Pillow's
    hard limit): a decompression bomb recognisable from its header alone."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    idat = zlib.compress(b"\x00" * 64)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )
    return path


def write_gray16_png(path: Path, w: int = 32, h: int = 8) -> Path:
    """A 16-bit greyscale horizontal gradient 0 → 65535."""
    row = np.linspace(0, 65535, w).round().astype(np.uint16)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.tile(row, (h, 1))).save(path, format="PNG")
    return path


def write_cmyk_jpeg(
    path: Path, cmyk: tuple[int, int, int, int] = (0, 255, 255, 0), size: int = 24
) -> Path:
    """A solid CMYK JPEG (default pure red: no cyan, full magenta and yellow)."""
    return write_jpeg(path, Image.new("CMYK", (size, size), cmyk))


def write_exif_rotated_jpeg(path: Path, orientation: int = 6) -> Path:
    """Stored 40 wide x 20 high, left half red and right half blue, with EXIF orientation 6
    (display rotated 90 degrees clockwise): shown 20 wide x 40 high, red on top, blue below."""
    a = np.zeros((20, 40, 3), dtype=np.uint8)
    a[:, :20] = (255, 0, 0)
    a[:, 20:] = (0, 0, 255)
    img = Image.fromarray(a, mode="RGB")
    exif = img.getexif()
    exif[0x0112] = orientation
    return write_jpeg(path, img, exif=exif.tobytes())


def write_text_as_jpg(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("this is not a JPEG, just some notes someone saved with the wrong name\n")
    return path


def write_empty(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def write_pickled_npy(path: Path) -> Path:
    """An object-dtype .npy: loading it needs pickle (allow_pickle=True), which we refuse."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    return path


def write_raw_pickle_as_npy(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"not": "an array"}))
    return path


# ---- whole corpora ---------------------------------------------------------------------------


def write_bad_corpus(dataset_dir: Path, *, modality: str = "image") -> dict[str, str | None]:
    """Write the corpus for ``modality`` under ``dataset_dir``; return {key: expected reason
    substring, or None for inputs that must decode}. See the module docstring."""
    dataset_dir = Path(dataset_dir)
    dataset_dir.mkdir(parents=True, exist_ok=True)
    if modality == "image":
        return _image_corpus(dataset_dir)
    if modality == "array":
        return _array_corpus(dataset_dir)
    if modality == "table":
        return _table_corpus(dataset_dir)
    raise ValueError(f"unknown modality {modality!r}")


def _image_corpus(d: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i in range(3):
        write_jpeg(d / "cat" / f"good_{i}.jpg", noise_rgb(40 + 8 * i, 30, seed=10 + i))
        out[f"cat/good_{i}.jpg"] = None
    (d / "dog").mkdir(parents=True, exist_ok=True)
    noise_rgb(20, 20, seed=20).save(d / "dog" / "good.png", format="PNG")
    noise_rgb(20, 20, seed=21).save(d / "dog" / "good.bmp", format="BMP")
    noise_rgb(20, 20, seed=22).save(d / "dog" / "good.webp", format="WEBP", lossless=True)
    noise_rgb(20, 20, seed=23).save(d / "dog" / "good.tiff", format="TIFF")
    rgba = noise_rgb(20, 20, seed=24).convert("RGBA")
    rgba.putalpha(128)
    rgba.save(d / "dog" / "rgba.png", format="PNG")
    noise_rgb(20, 20, seed=25).convert("P").save(d / "dog" / "palette.png", format="PNG")
    out.update(
        {
            f"dog/{n}": None
            for n in ("good.png", "good.bmp", "good.webp", "good.tiff", "rgba.png", "palette.png")
        }
    )
    write_gray16_png(d / "dog" / "gray16.png")
    write_cmyk_jpeg(d / "cat" / "cmyk.jpg")
    write_exif_rotated_jpeg(d / "cat" / "exif_rotated.jpg")
    out.update({"dog/gray16.png": None, "cat/cmyk.jpg": None, "cat/exif_rotated.jpg": None})
    write_truncated_jpeg(d / "cat" / "truncated.jpg")
    write_empty(d / "dog" / "empty.png")
    write_text_as_jpg(d / "dog" / "notes.jpg")
    write_bomb_png(d / "cat" / "bomb.png")
    out.update(
        {
            "cat/truncated.jpg": "truncated",
            "dog/empty.png": "empty file",
            "dog/notes.jpg": "not an image file",
            "cat/bomb.png": "decompression bomb",
        }
    )
    return out


def _array_corpus(d: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    rng = np.random.default_rng(3)
    for i in range(3):
        (d / "a").mkdir(parents=True, exist_ok=True)
        np.save(d / "a" / f"good_{i}.npy", rng.standard_normal((4, 4)).astype(np.float32))
        out[f"a/good_{i}.npy"] = None
    (d / "b").mkdir(parents=True, exist_ok=True)
    np.save(d / "b" / "big_endian.npy", rng.standard_normal((4, 4)).astype(">f4"))
    out["b/big_endian.npy"] = None
    np.save(d / "b" / "wrong_shape.npy", np.zeros((3, 4), dtype=np.float32))
    out["b/wrong_shape.npy"] = "!= recipe shape"
    np.save(d / "b" / "wrong_dtype.npy", np.zeros((4, 4), dtype=np.int64))
    out["b/wrong_dtype.npy"] = "!= recipe dtype"
    write_pickled_npy(d / "b" / "pickled.npy")
    out["b/pickled.npy"] = "pickled .npy refused"
    write_raw_pickle_as_npy(d / "a" / "raw_pickle.npy")
    out["a/raw_pickle.npy"] = "pickled .npy refused"
    write_empty(d / "a" / "empty.npy")
    out["a/empty.npy"] = ".npy"
    return out


def _table_corpus(d: Path) -> dict[str, str | None]:
    lines = [
        "x1,x2,label",  # line 1
        "1.0,2.0,a",  # 2 good
        "3.5,-1,b",  # 3 good
        "4.0,5.0,",  # 4 missing label
        "1.0,abc,a",  # 5 non-numeric
        "2.0,,b",  # 6 empty cell
        "7,8,b",  # 7 good
    ]
    (d / "rows.csv").write_text("\n".join(lines) + "\n")
    (d / "notes.csv").write_bytes(b"\xff\xfe\x00garbage")  # not UTF-8
    return {
        "rows.csv#2": None,
        "rows.csv#3": None,
        "rows.csv#4": "missing label",
        "rows.csv#5": "is not a number: 'abc'",
        "rows.csv#6": "column 'x2' is empty",
        "rows.csv#7": None,
        "notes.csv": "not UTF-8",
    }

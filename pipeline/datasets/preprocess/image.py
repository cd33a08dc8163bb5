"""Image preprocessor: one PNG/JPEG/BMP/WebP/TIFF file → uint8 (C, size, size).

Order of work, and why:
1. Refuse empty files and anything Pillow does not identify as one of the five formats (Pillow
   is told to try only those parsers, which keeps exotic decoders out of reach of lake files).
2. Refuse decompression bombs from the header size alone, before any pixel is decoded.
3. For JPEG, ask for draft mode: libjpeg then decodes at 1/2, 1/4 or 1/8 scale straight from
   the DCT, which makes downscaling large photos several times faster.
4. ``load()`` the full image: a truncated file fails here (``LOAD_TRUNCATED_IMAGES`` stays off;
   ``verify()`` alone would miss truncated pixel data).
5. Apply the EXIF orientation, convert the mode to the recipe's channels, resize.

Mode conversion: transparent images (LA, RGBA, PA, P with a transparent colour) are composited
on WHITE, the usual look of a transparent PNG on a page (black would turn black-on-transparent
line art into an all-black square). 16-bit images are scaled to 8 bits (x * 255 / 65535,
rounded), not clipped. CMYK is converted with Pillow's (profile-less) formula; ICC profiles
are not applied. ``pad`` fills with black.
"""

from __future__ import annotations

import functools
import os
import re
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from pipeline.datasets.preprocess.base import Decoded, DecodeResult, InvalidInput
from pipeline.datasets.recipe_model import CODE_VERSIONS, ImageShape, Recipe

CODE_VERSION = CODE_VERSIONS["image"]  # bumped in recipe_model.py: part of recipe_hash

# Image.open(formats=...) names; MPO is the JPEG variant many phone cameras write.
FORMATS = ("PNG", "JPEG", "MPO", "BMP", "WEBP", "TIFF")
RESAMPLE = Image.Resampling.BICUBIC
# Modes whose values are wider than 8 bits, scaled down in numpy.
_WIDE_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")


class ImagePreprocessor:
    name = "image"
    code_version = CODE_VERSION

    def decode(self, abspath: str, recipe: Recipe) -> DecodeResult:
        assert recipe.image is not None
        return DecodeResult([Decoded(decode_image(abspath, recipe.image))])


def decode_image(abspath: str, spec: ImageShape) -> np.ndarray:
    """Decode ``abspath`` to uint8 (channels, size, size); raise InvalidInput with the reason."""
    try:
        if os.path.getsize(abspath) == 0:
            raise InvalidInput("empty file (0 bytes)")
    except OSError as exc:
        raise InvalidInput(f"unreadable file: {exc.strerror or exc}") from None
    try:
        with warnings.catch_warnings():
            # Our own limit (spec.max_pixels) is checked below; Pillow's warning is redundant.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(abspath, formats=_formats())
    except Image.DecompressionBombError as exc:
        m = re.search(r"\((\d+) pixels\) exceeds limit of (\d+)", str(exc))
        detail = (
            f"{m.group(1)} pixels > limit {min(int(m.group(2)), spec.max_pixels)}"
            if m
            else str(exc)
        )
        raise InvalidInput(f"decompression bomb: {detail}") from None
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise InvalidInput(f"unreadable file: {exc.strerror or exc}") from None
    except UnidentifiedImageError:
        raise InvalidInput(
            "not an image file (not a readable PNG, JPEG, BMP, WebP or TIFF)"
        ) from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise InvalidInput(f"corrupt image header: {exc}") from None
    with img:
        w, h = img.size
        if w * h > spec.max_pixels:
            raise InvalidInput(f"decompression bomb: {w * h} pixels > limit {spec.max_pixels}")
        if w < 1 or h < 1:
            raise InvalidInput(f"image has no pixels ({w}x{h})")
        if img.format in ("JPEG", "MPO"):
            # Request (size, size): draft keeps both sides >= size, which every resize mode needs.
            img.draft("L" if spec.channels == 1 else "RGB", (spec.size, spec.size))
        try:
            img.load()
        except OSError as exc:
            text = str(exc)
            if "truncated" in text or "broken data stream" in text:
                raise InvalidInput(f"truncated image: {text}") from None
            raise InvalidInput(f"corrupt image data: {text}") from None
        except (SyntaxError, ValueError, EOFError, MemoryError) as exc:
            raise InvalidInput(f"corrupt image data: {exc}") from None
        oriented = _exif_transpose(img)
        converted = to_channels(oriented, spec.channels)
        # Still inside ``with``: closing the file also frees the pixels of ``img`` itself.
        arr = np.array(resize(converted, spec.size, spec.resize), dtype=np.uint8)
    if arr.ndim == 2:
        arr = arr[None, :, :]
    else:
        arr = arr.transpose(2, 0, 1)
    return np.ascontiguousarray(arr)


@functools.cache
def _formats() -> tuple[str, ...]:
    # Pillow registers WebP, TIFF and MPO only after init(); open(formats=...) needs them loaded.
    Image.init()
    return tuple(f for f in FORMATS if f in Image.OPEN)


def _exif_transpose(img: Image.Image) -> Image.Image:
    try:
        return ImageOps.exif_transpose(img)
    except Exception:  # a malformed EXIF block must not throw away good pixels: keep as stored
        return img


def _wide_to_l(img: Image.Image) -> Image.Image:
    """16-bit (or 32-bit int holding 16-bit data) grey → 8-bit, scaled, not clipped."""
    a = np.asarray(img).astype(np.float64)
    if img.mode == "I" and a.size and (a.min() < 0 or a.max() > 65535):
        lo, hi = float(a.min()), float(a.max())  # not 16-bit data: stretch its actual range
        a = (a - lo) * (65535.0 / (hi - lo or 1.0))
    return Image.fromarray(np.rint(a * (255.0 / 65535.0)).clip(0, 255).astype(np.uint8), mode="L")


def _float_to_l(img: Image.Image) -> Image.Image:
    a = np.nan_to_num(np.asarray(img, dtype=np.float64))
    # A float image is taken as 0..1 when it fits there, else as 0..255.
    scale = 255.0 if a.size and a.min() >= 0.0 and a.max() <= 1.0 else 1.0
    return Image.fromarray(np.rint(a * scale).clip(0, 255).astype(np.uint8), mode="L")


def _has_alpha(img: Image.Image) -> bool:
    return img.mode in ("LA", "La", "RGBA", "RGBa", "PA") or (
        img.mode == "P" and "transparency" in img.info
    )


def to_channels(img: Image.Image, channels: int) -> Image.Image:
    """Any Pillow mode → "L" (channels=1) or "RGB" (channels=3)."""
    if img.mode in _WIDE_MODES:
        img = _wide_to_l(img)
    elif img.mode == "F":
        img = _float_to_l(img)
    elif _has_alpha(img):
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(white, rgba).convert("RGB")
    target = "L" if channels == 1 else "RGB"
    if img.mode != target:
        img = img.convert(target)
    return img


def resize(img: Image.Image, size: int, mode: str) -> Image.Image:
    """squash: stretch to size×size; center_crop: the centred largest square, scaled;
    pad: scale the longest side to ``size`` and centre on black."""
    w, h = img.size
    if mode == "squash":
        return img if (w, h) == (size, size) else img.resize((size, size), RESAMPLE)
    if mode == "center_crop":
        s = min(w, h)
        left, top = (w - s) // 2, (h - s) // 2
        if (w, h) == (size, size):
            return img
        return img.resize((size, size), RESAMPLE, box=(left, top, left + s, top + s))
    if mode == "pad":
        scale = size / max(w, h)
        nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
        inner = img if (nw, nh) == (w, h) else img.resize((nw, nh), RESAMPLE)
        canvas = Image.new(img.mode, (size, size), 0)
        canvas.paste(inner, ((size - nw) // 2, (size - nh) // 2))
        return canvas
    raise ValueError(f"unknown resize mode {mode!r}")

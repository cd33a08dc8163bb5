"""Create the sample lake from real data shipped inside packages (no network needed).

- ``digits/<class>/NNNN.png``: scikit-learn's ``load_digits`` (1,797 8x8 images, 0-16 scaled
  to 0-255), the dataset ``make run`` ingests and trains on;
- ``photos/<name>.jpg``: scikit-learn's and scikit-image's sample photos.
"""

from __future__ import annotations

import os
from pathlib import Path


def lake_is_empty(lake: Path) -> bool:
    if not lake.exists():
        return True
    return not any(not e.name.startswith(".") for e in os.scandir(lake))


def write_digits(lake: Path) -> int:
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    count = 0
    for i, (image, label) in enumerate(zip(digits.images, digits.target, strict=True)):
        folder = lake / "digits" / str(int(label))
        folder.mkdir(parents=True, exist_ok=True)
        pixels = np.clip(image * (255.0 / 16.0), 0, 255).astype("uint8")
        _atomic_save(Image.fromarray(pixels, mode="L"), folder / f"{i:04d}.png")
        count += 1
    return count


def write_photos(lake: Path) -> int:
    from PIL import Image
    from sklearn.datasets import load_sample_images

    folder = lake / "photos"
    folder.mkdir(parents=True, exist_ok=True)
    sk = load_sample_images()
    photos = {Path(name).stem: image for name, image in zip(sk.filenames, sk.images, strict=True)}
    try:
        from skimage import data

        for name in ("astronaut", "coffee", "chelsea", "rocket"):
            photos[name] = getattr(data, name)()
    except Exception:  # scikit-image is optional; its photos are a bonus
        pass
    for name, pixels in photos.items():
        _atomic_save(
            Image.fromarray(pixels).convert("RGB"),
            folder / "unlabelled" / f"{name}.jpg",
            quality=90,
        )
    return len(photos)


def _atomic_save(image: object, dest: Path, **kwargs: object) -> None:
    # A .part name is ignored by the scanner, so a half-written sample file is never ingested.
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    image.save(tmp, format="PNG" if dest.suffix == ".png" else "JPEG", **kwargs)  # type: ignore[attr-defined]
    os.replace(tmp, dest)


class S3LakeNotWritten(ValueError):
    """The lake is in S3, which laketrain only ever reads: the samples are not uploaded."""


def create_sample_lake(lake: Path | str, *, force: bool = False) -> dict[str, int]:
    """Write the sample lake when ``lake`` is empty (or ``force``); return files per dataset.
    An ``s3://`` lake raises S3LakeNotWritten, saying how to upload the samples instead."""
    if isinstance(lake, str) and lake.startswith("s3://"):
        raise S3LakeNotWritten(
            f"LAKE_DIR is {lake}: laketrain never writes to an S3 lake (it only lists and reads "
            "it). Write the samples to a folder (LAKE_DIR=/some/folder laketrain sample-lake), "
            f"then upload them: aws s3 cp --recursive /some/folder {lake}/ (docs/s3-lake.md)"
        )
    lake = Path(lake)
    if not force and not lake_is_empty(lake):
        return {}
    lake.mkdir(parents=True, exist_ok=True)
    return {"digits": write_digits(lake), "photos": write_photos(lake)}

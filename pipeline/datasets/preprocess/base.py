"""What every preprocessor returns (registry.py picks one for a recipe).

A preprocessor turns ONE lake file into samples: an image or a ``.npy`` file into one sample,
a table into one sample per row. A file that cannot be used at all raises :class:`InvalidInput`
(the build records it in the ledger as ``invalid`` with ``reason`` and leaves it out); a table
row that cannot be used goes to ``DecodeResult.invalid_rows`` while the good rows are kept.

``code_version`` is part of ``recipe_hash``: bump it (``CODE_VERSIONS`` in
pipeline/datasets/recipe_model.py) whenever a change to a preprocessor would change its output
for the same input, so that stale processed samples are never reused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from pipeline.datasets.recipe_model import Recipe


class InvalidInput(Exception):
    """The whole file is unusable; ``reason`` is a short human-readable sentence."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class Decoded:
    """One sample. ``x``: uint8 (C, H, W) for images, the recipe dtype/shape for arrays,
    float32 (F,) for tables. ``label``: set by tables (label column); images and arrays leave
    None and the build applies the recipe's label rule. ``row``: tables only, the 1-based line
    number in a CSV (header = line 1) or the 1-based row number in a Parquet file."""

    x: np.ndarray
    label: str | None = None
    row: int | None = None
    # Tables: what decides the row's split (its id, or a hash of its features); None = the
    # file's split rule (md5 or group_regex) decides.
    key: str | None = None


@dataclass(slots=True)
class DecodeResult:
    samples: list[Decoded]
    invalid_rows: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)


@runtime_checkable
class Preprocessor(Protocol):
    name: str
    code_version: str

    def decode(self, abspath: str, recipe: Recipe) -> DecodeResult:
        """Decode one file; raise InvalidInput when the whole file is unusable."""
        ...


def sample_shape(recipe: Recipe) -> tuple[int, ...]:
    """The shape of one sample's ``x``, so that the store can allocate segments. For a table
    whose recipe leaves ``feature_columns`` out, the feature count is only known from the file:
    the dimension is -1 and the store takes it from the decoded samples."""
    if recipe.modality == "image":
        assert recipe.image is not None
        return (recipe.image.channels, recipe.image.size, recipe.image.size)
    if recipe.modality == "array":
        assert recipe.array is not None
        return tuple(recipe.array.shape)
    assert recipe.table is not None
    return (len(recipe.table.feature_columns),) if recipe.table.feature_columns else (-1,)


def sample_dtype(recipe: Recipe) -> np.dtype:
    if recipe.modality == "image":
        return np.dtype(np.uint8)
    if recipe.modality == "array":
        assert recipe.array is not None
        return np.dtype(recipe.array.dtype)
    return np.dtype(np.float32)

"""The preprocessor for a recipe's modality. Kept apart from base.py, which every
preprocessor imports: base.py then imports none of them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.datasets.preprocess.base import Preprocessor

if TYPE_CHECKING:
    from pipeline.datasets.recipe_model import Recipe


def preprocessor_for(recipe: Recipe) -> Preprocessor:
    """The preprocessor for the recipe's modality (imported lazily: Pillow only when needed)."""
    if recipe.modality == "image":
        from pipeline.datasets.preprocess.image import ImagePreprocessor

        return ImagePreprocessor()
    if recipe.modality == "array":
        from pipeline.datasets.preprocess.array import ArrayPreprocessor

        return ArrayPreprocessor()
    if recipe.modality == "table":
        from pipeline.datasets.preprocess.table import TablePreprocessor

        return TablePreprocessor()
    raise ValueError(f"no preprocessor for modality {recipe.modality!r}")

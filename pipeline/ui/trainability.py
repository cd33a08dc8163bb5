"""Whether a version can be trained on, decided from its manifest alone.

The trainer learns ``len(classes)`` classes; a version with none (every sample unlabelled:
``labels.rule = "none"``, or images directly in the dataset folder, which have no class
folder) fails there with "labels outside 0..-1". The page says why instead of offering a run.
"""

from __future__ import annotations

from typing import Any


def untrainable_reason(manifest: dict[str, Any], dataset: str) -> str | None:
    """None when the version has classes to learn; else one sentence saying why not."""
    classes = manifest.get("classes")
    if isinstance(classes, list) and classes:
        return None
    if not manifest:
        return "its manifest cannot be read, so its classes are unknown"
    recipe = manifest.get("recipe") if isinstance(manifest.get("recipe"), dict) else {}
    labels = recipe.get("labels") if isinstance(recipe.get("labels"), dict) else {}
    rule = labels.get("rule")
    if rule == "none" and manifest.get("modality") != "table":
        return (
            f"it is unlabelled: the recipe of {dataset!r} has labels.rule = 'none', so its "
            "samples have no classes to learn"
        )
    if rule == "sidecar":
        return (
            f"none of its samples has a label: no sample is named in the labels file "
            f"{labels.get('file', 'labels.csv')!r} of {dataset!r}"
        )
    return (
        f"none of its samples has a label: a file's class is its folder under lake/{dataset}/ "
        f"(lake/{dataset}/<class>/...), and files directly in lake/{dataset}/ have none"
    )

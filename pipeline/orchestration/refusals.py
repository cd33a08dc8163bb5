"""What a DAG run refuses at its first task: unknown conf keys, dataset names that are not one
lake folder, datasets that cannot be trained (no labels).

Plain functions of plain values (no Airflow, no database unless a version is given), so the
same rules serve the tasks at run time and ``dagconfig`` at parse time.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("laketrain.orchestration")

NO_LABELS_HINT = (
    "put the images in class folders (<dataset>/<class>/<file>) or name a labels file in the "
    'recipe ([labels] rule = "sidecar", file = "labels.csv")'
)


class RunRefused(ValueError):
    """The run cannot succeed as asked (bad conf, missing version, leakage, no labels): fail
    without retrying."""


def check_conf_keys(conf: Mapping[str, Any] | None, allowed: Iterable[str], *, dag_id: str) -> None:
    """RunRefused when ``conf`` has a key the DAG does not take. Airflow merges unknown keys
    into the params without a word, so ``{"epoch": 2}`` would train with the default epochs."""
    allowed = list(allowed)
    unknown = sorted(str(k) for k in (conf or {}) if k not in allowed)
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hints.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    takes = (
        f"allowed keys: {', '.join(allowed)}"
        if allowed
        else "it takes no conf (it builds every dataset the ledger knows)"
    )
    raise RunRefused(f"{dag_id}: unknown conf key(s) {', '.join(hints)}; {takes}")


def check_dataset(name: Any, *, field: str = "dataset") -> str:
    """``name`` when it is a dataset name ``load_recipe`` accepts (one lake folder), else
    RunRefused naming ``field``."""
    from pipeline.datasets.recipes import DatasetNameError, check_dataset_name

    if not isinstance(name, str):
        raise RunRefused(f"{field}: must be a dataset name (a string), got {name!r}")
    try:
        return check_dataset_name(name)
    except DatasetNameError as exc:
        raise RunRefused(f"{field}: {exc}") from None


def untrainable_reason(
    dataset: str, *, recipes_dir: Path | None = None, lake_dir: Path | str | None = None
) -> str | None:
    """Why ``dataset`` cannot be trained, judged from its recipe and the top level of its lake
    folder only (cheap enough for parse time: no database, no walk of the lake); None when it
    may be trained. A recipe that does not load is a reason too (its error)."""
    from pipeline.datasets.recipes import load_recipe

    try:
        recipe = load_recipe(dataset, recipes_dir=recipes_dir, lake_dir=lake_dir)
    except ValueError as exc:
        return f"recipe not usable: {exc}"
    lake = _lake_dir(lake_dir)
    # An S3 lake is not looked at: this runs at DAG parse time, which makes no network call;
    # files directly in its dataset prefix are left out as invalid by the build instead.
    return labels_problem(recipe, None if lake is None else lake / dataset)


def labels_problem(recipe: Any, folder: Path | None = None) -> str | None:
    """Why a dataset with ``recipe`` has no labels to train on, or None. ``folder`` (the
    dataset's lake folder) adds a look at its top level for a ``parent_dir`` recipe."""
    if recipe.modality == "table":
        return None  # the label is table.label_column; a missing column is reported per file
    if recipe.labels.rule == "none":
        return f'no labels: its recipe sets [labels] rule = "none"; {NO_LABELS_HINT}'
    if recipe.labels.rule == "parent_dir" and folder is not None:
        if _has_files_but_no_class_folder(folder):
            return f"no labels: its files lie directly in the dataset folder; {NO_LABELS_HINT}"
    return None


def _lake_dir(lake_dir: Path | str | None) -> Path | None:
    """The lake folder; None for an ``s3://`` lake (a Path would collapse its URL)."""
    if lake_dir is None:
        from pipeline.settings import get_settings

        lake_dir = get_settings().lake_dir
    if isinstance(lake_dir, str) and lake_dir.startswith("s3://"):
        return None
    return Path(lake_dir)


def _has_files_but_no_class_folder(folder: Path) -> bool:
    """One scandir of the dataset folder: files there, and no (visible) folder to be a class."""
    files = folders = 0
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if entry.name.startswith((".", "_")):
                    continue  # the names the lake walk skips
                if entry.is_dir(follow_symlinks=False):
                    folders += 1
                    break
                files += 1
    except OSError:  # no folder yet (or not listable): nothing to judge by
        return False
    return files > 0 and folders == 0


def version_label_problem(version: Mapping[str, Any]) -> str | None:
    """Why the version (``queries.get_version`` output) cannot be trained: it has no class at
    all (an unlabelled recipe, or every file lacked a label and was left out as invalid);
    None otherwise. A file without a label in a labelled recipe is invalid, never a sample,
    so a version with classes has a label on every sample."""
    classes = (version.get("manifest") or {}).get("classes") or version.get("classes") or []
    if classes:
        return None
    target = (version.get("manifest") or {}).get("target") or {}
    if (version.get("manifest") or {}).get("task") == "regression" and (
        (target.get("train") or {}).get("n")
    ):
        return None  # numeric targets (recipe task = "regression"): no classes by design
    invalid = version.get("invalid") or 0
    left_out = f", {invalid} file(s) left out as invalid" if invalid else ""
    return (
        f"no labels: version {version.get('tag')} of {version.get('dataset')!r} has "
        f"{version.get('samples') or 0} sample(s) and no class{left_out}; {NO_LABELS_HINT}"
    )


def recipe_labels_problem(dataset: str) -> str | None:
    """``labels_problem`` of the dataset's recipe as the resolve task sees it: a recipe that
    says there are no labels. A recipe that does not load is left to the version check (an
    old version stays trainable after its lake folder is gone)."""
    from pipeline.datasets.recipes import load_recipe

    try:
        recipe = load_recipe(dataset)
    except ValueError:
        return None
    return labels_problem(recipe)

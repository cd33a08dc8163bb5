"""Recipes: reading how a lake folder becomes samples (``recipes/<dataset>.toml``).

The schema itself (the pydantic models, `Recipe`, `recipe_hash`, `RecipeError`) is
pipeline/datasets/recipe_model.py; this module reads recipes: the TOML file of a dataset,
with every problem raised as :class:`RecipeError` naming the file, the field (dotted path)
and what is allowed; :func:`default_recipe` for a lake folder without one, chosen from its
file types; and the labels sidecar. The schema's names are re-exported here, so that
``from pipeline.datasets.recipes import Recipe, load_recipe`` keeps working.
"""

from __future__ import annotations

import csv
import os
import re
import tomllib
import typing
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from pipeline.datasets.recipe_model import (  # noqa: F401 - re-exported: the recipes API
    ARRAY_SUFFIXES,
    IMAGE_SUFFIXES,
    TABLE_SUFFIXES,
    ImageShape,
    Recipe,
    RecipeError,
    TableSpec,
    split_of,
)


class SidecarError(ValueError):
    """The labels sidecar of a dataset is missing or malformed; the message names the file and line."""


def load_sidecar(dataset_dir: Path | str, recipe: Recipe) -> dict[str, str]:
    """Read ``<dataset_dir>/<labels.file>``: CSV rows ``path,label`` (an optional header row
    ``path,label``), paths relative to the dataset folder. {} unless the rule is sidecar.
    ``dataset_dir`` may be a dataset prefix of an S3 lake (one GET)."""
    if recipe.labels.rule != "sidecar":
        return {}
    location = _lake_location(dataset_dir)
    path: Path | str
    try:
        if isinstance(location, str):
            from pipeline.storage.listing import LakeReader
            from pipeline.storage.urls import join

            path = join(location, recipe.labels.file)
            text = LakeReader().store.read_bytes(path).decode("utf-8-sig")
        else:
            path = location / recipe.labels.file
            text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise SidecarError(
            f"{path}: labels sidecar not found (recipe labels.rule = 'sidecar')"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SidecarError(f"{path}: unreadable labels sidecar: {exc}") from None
    out: dict[str, str] = {}
    reader = csv.reader(text.splitlines())
    for row in reader:
        if not row or all(not c.strip() for c in row):
            continue
        if reader.line_num == 1 and [c.strip().lower() for c in row] == ["path", "label"]:
            continue
        if len(row) != 2 or not row[0].strip() or not row[1].strip():
            raise SidecarError(
                f"{path}: line {reader.line_num}: expected 'path,label' (got {row!r})"
            )
        key = Path(row[0].strip()).as_posix().removeprefix("./")
        out[key] = row[1].strip()
    return out


# ---- loading ---------------------------------------------------------------------------------


def _settings_dirs(
    recipes_dir: Path | None, lake_dir: Path | str | None
) -> tuple[Path, Path | str]:
    """The recipes folder, and the lake: a Path, or an ``s3://`` URL kept a string."""
    if recipes_dir is None or lake_dir is None:
        from pipeline.settings import get_settings

        s = get_settings()
        recipes_dir = recipes_dir if recipes_dir is not None else s.recipes_dir
        lake_dir = lake_dir if lake_dir is not None else s.lake_dir
    return Path(recipes_dir), _lake_location(lake_dir)


def _lake_location(lake: Path | str) -> Path | str:
    text = str(lake)
    if isinstance(lake, Path) and text.startswith("s3:/") and not text.startswith("s3://"):
        # A caller turned the lake's URL into a Path, which collapsed "s3://" into "s3:/":
        # the URL is recovered rather than read as a local folder named "s3:".
        return "s3://" + text[len("s3:/") :]
    if text.startswith("s3://"):
        return text.rstrip("/")
    return Path(lake)


def _display(path: Path) -> str:
    try:
        return (
            Path(os.path.relpath(path)).as_posix()
            if not os.path.relpath(path).startswith("..")
            else str(path)
        )
    except ValueError:
        return str(path)


def _allowed_keys(loc: tuple[Any, ...]) -> list[str] | None:
    """The keys a section accepts, found by following ``loc`` through the model annotations."""
    model: Any = Recipe
    for part in loc:
        if not isinstance(part, str):
            continue
        if (
            not (isinstance(model, type) and issubclass(model, BaseModel))
            or part not in model.model_fields
        ):
            break
        ann = model.model_fields[part].annotation
        args = [a for a in typing.get_args(ann) if a is not type(None)] or [ann]
        model = args[0]
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return None


def _describe(err: dict[str, Any]) -> tuple[str, str]:
    loc = tuple(err["loc"])
    field = ".".join(str(p) for p in loc)
    kind = err["type"]
    got = err.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1]) or []
        return field, f"unknown key; allowed keys: {', '.join(allowed)}"
    if kind == "missing":
        return field, "required"
    if kind == "literal_error":
        expected = str(err.get("ctx", {}).get("expected", ""))
        options = re.findall(r"'([^']*)'|(\d+)", expected)
        allowed = ", ".join(a or b for a, b in options) or expected
        return field, f"must be one of {allowed} (got {got!r})"
    msg = str(err["msg"])
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
        # A validator may name a sub-field first ("rule: must be ..."): fold it into the path.
        m = re.match(r"^([a-z_]+): (.*)$", msg, re.S)
        if m and m.group(1) not in ("must",):
            field = f"{field}.{m.group(1)}" if field else m.group(1)
            msg = m.group(2)
        return field, msg
    msg = msg.replace("Input should be", "must be")
    return field, f"{msg} (got {got!r})" if got is not None and not isinstance(got, dict) else msg


def parse_recipe(data: dict[str, Any], *, source: str = "<recipe>") -> Recipe:
    """Validate a recipe dict; raise RecipeError naming ``source``, each field and what is allowed."""
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(source, [_describe(e) for e in exc.errors()]) from None


class DatasetNameError(ValueError):
    """A dataset name that cannot be a first-level folder of the lake."""


def check_dataset_name(dataset: str) -> str:
    """``dataset`` unchanged if it names one first-level lake folder the scan would walk; else
    DatasetNameError. Every entry point (build, plan, process, commit) passes through
    load_recipe, so ``../etc`` is refused for its name before any path is built from it."""
    from pipeline.lake.walk import is_ignored_name

    problem = None
    if not dataset:
        problem = "must not be empty"
    elif "/" in dataset or "\x00" in dataset or dataset in (".", ".."):
        problem = "must be one folder name of the lake, without '/' (not '.' or '..')"
    elif is_ignored_name(dataset, is_dir=True):
        problem = "must not start with '.' or '_' (the lake scan skips such folders)"
    elif len(dataset.encode()) > 255:
        problem = "must be at most 255 bytes (a folder name)"
    if problem:
        raise DatasetNameError(f"dataset name {dataset!r}: {problem}")
    return dataset


def load_recipe(
    dataset: str, *, recipes_dir: Path | None = None, lake_dir: Path | str | None = None
) -> Recipe:
    """The recipe of ``dataset``: ``recipes/<dataset>.toml`` when it exists, else the default
    recipe for the file types in ``lake/<dataset>``."""
    check_dataset_name(dataset)
    recipes_dir, lake_dir = _settings_dirs(recipes_dir, lake_dir)
    path = recipes_dir / f"{dataset}.toml"
    source = _display(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return default_recipe(dataset, lake_dir)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RecipeError(source, [("", f"not valid TOML: {exc}")]) from None
    return parse_recipe(data, source=source)


def list_recipes(recipes_dir: Path | None = None) -> list[str]:
    """Datasets that have a recipe file (sorted)."""
    recipes_dir, _ = _settings_dirs(recipes_dir, Path("."))
    if not recipes_dir.is_dir():
        return []
    return sorted(p.stem for p in recipes_dir.glob("*.toml") if not p.name.startswith("."))


def _dataset_files(folder: Path) -> list[Path]:
    out: list[Path] = []
    for root, dirs, files in os.walk(folder):
        # The same names the lake walk skips: hidden entries, _-folders, partial files.
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        out.extend(
            Path(root) / f
            for f in sorted(files)
            if not f.startswith(".") and not f.endswith((".tmp", ".part"))
        )
    return out


def default_recipe(dataset: str, lake_dir: Path | str | None = None) -> Recipe:
    """The recipe of a folder without one, from its most common file type (ties: image, then
    array, then table): images → 3×64×64 center_crop, labels from the parent folder; .npy →
    the shape/dtype of the first file; CSV/Parquet → label column ``label``, features = the
    first file's other columns."""
    _, lake_dir = _settings_dirs(Path("."), lake_dir)
    if isinstance(lake_dir, str):
        # An S3 lake: one listing of the dataset's prefix; a header is read off one GET.
        from pipeline.lake.s3files import S3DatasetFiles

        with S3DatasetFiles(lake_dir, dataset) as remote:
            return _default_recipe(
                dataset, f"default recipe for {remote.url}", remote.paths(), remote.local
            )
    folder = Path(lake_dir) / dataset
    files = _dataset_files(folder) if folder.is_dir() else []
    return _default_recipe(dataset, f"default recipe for {_display(folder)}", files, Path)


def _default_recipe(
    dataset: str, source: str, files: list[Any], local: typing.Callable[[Any], Path]
) -> Recipe:
    """default_recipe from the dataset's file names; ``local(f)`` is a local copy of one."""
    kinds = Counter()
    for f in files:
        suffix = f.suffix.lower()
        if suffix in IMAGE_SUFFIXES:
            kinds["image"] += 1
        elif suffix in ARRAY_SUFFIXES:
            kinds["array"] += 1
        elif suffix in TABLE_SUFFIXES:
            kinds["table"] += 1
    if not kinds:
        raise RecipeError(
            source,
            [
                (
                    "modality",
                    f"no recipe {dataset}.toml and no image, .npy, .csv or .parquet files to choose a default from",
                )
            ],
        )
    order = ["image", "array", "table"]
    modality = max(order, key=lambda k: (kinds[k], -order.index(k)))
    if modality == "image":
        return parse_recipe(
            {"modality": "image", "image": {"size": 64, "channels": 3, "resize": "center_crop"}},
            source=source,
        )
    if modality == "array":
        for f in files:
            if f.suffix.lower() in ARRAY_SUFFIXES:
                header = _npy_header(local(f))
                if header is not None:
                    shape, dtype = header
                    return parse_recipe(
                        {"modality": "array", "array": {"shape": list(shape), "dtype": dtype}},
                        source=source,
                    )
        raise RecipeError(
            source, [("array", "no readable numeric .npy file to take the shape and dtype from")]
        )
    for f in files:
        if f.suffix.lower() in TABLE_SUFFIXES:
            columns = _table_columns(local(f))
            if columns and "label" in columns:
                features = [c for c in columns if c != "label"]
                if features:
                    return parse_recipe(
                        {
                            "modality": "table",
                            "table": {"label_column": "label", "feature_columns": features},
                        },
                        source=source,
                    )
    return parse_recipe({"modality": "table", "table": {"label_column": "label"}}, source=source)


def _npy_header(path: Path) -> tuple[tuple[int, ...], str] | None:
    """Shape and dtype from a .npy header without reading the data (None if unusable)."""
    import numpy as np

    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                return None
    except (OSError, ValueError):
        return None
    if dtype.kind not in "biuf" or not shape or any(d < 1 for d in shape):
        return None
    return tuple(int(d) for d in shape), dtype.newbyteorder("=").name


def _table_columns(path: Path) -> list[str] | None:
    try:
        if path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
        with open(path, encoding="utf-8-sig", newline="") as fh:
            header = next(csv.reader(fh), None)
        return [c.strip() for c in header] if header else None
    except Exception:  # an unreadable first file just means no feature list in the default
        return None

"""Recipes: how a lake folder becomes samples (``recipes/<dataset>.toml``).

A recipe fixes the modality, the output shape, the label rule, the split rule, the offline
augmentation and the storage format. It is validated with pydantic up front, and any problem
is raised as :class:`RecipeError` naming the file, the field (dotted path) and what is allowed,
so a bad recipe fails before a single file is decoded.

``recipe_hash`` keys derived data: it covers everything that changes what is stored (all fields
but ``auto_train`` and ``[quality]``), the preprocessor's ``code_version`` and this module's hash format, so a
change to either invalidates the processed samples.

A lake folder without a recipe gets :func:`default_recipe`, chosen from its file types.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import tomllib
import typing
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipeline.datasets.quality.rules import QualityRules

# Bump when the way recipe_hash is computed (or the meaning of a field) changes.
RECIPE_HASH_FORMAT = "laketrain-recipe-1"

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff"})
ARRAY_SUFFIXES = frozenset({".npy"})
TABLE_SUFFIXES = frozenset({".csv", ".parquet"})

# Pillow's own MAX_IMAGE_PIXELS, written out so that a Pillow upgrade cannot move recipe_hash.
DEFAULT_MAX_PIXELS = 89_478_485
# Pillow raises DecompressionBombError past twice its limit whatever we ask; a recipe cannot
# lift the limit past that without a process-wide switch, which we refuse to flip.
MAX_MAX_PIXELS = 2 * DEFAULT_MAX_PIXELS

Modality = Literal["image", "array", "table"]
AugmentOp = Literal["hflip", "random_resized_crop", "color_jitter"]


class RecipeError(ValueError):
    """A recipe is invalid. ``str()`` is one line per problem: ``FILE: FIELD: what is allowed``;
    ``problems`` holds the (field, message) pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [
            f"{source}: {field}: {msg}" if field else f"{source}: {msg}" for field, msg in problems
        ]
        super().__init__("\n".join(lines))


class _Section(BaseModel):
    # Unknown keys are typos: fail and name them rather than silently ignore them.
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageShape(_Section):
    """Output of the image preprocessor: uint8 (channels, size, size)."""

    size: int = Field(64, ge=1, le=4096, description="Output height and width in pixels.")
    channels: Literal[1, 3] = Field(3, description="1 = grayscale (L), 3 = RGB.")
    resize: Literal["squash", "center_crop", "pad"] = Field(
        "center_crop",
        description="squash: stretch to a square; center_crop: crop the largest centred square; "
        "pad: fit the longest side and pad with black.",
    )
    max_pixels: int = Field(
        DEFAULT_MAX_PIXELS,
        ge=1,
        le=MAX_MAX_PIXELS,
        description="Source images with more pixels are refused as decompression bombs.",
    )


class ArrayShape(_Section):
    """Each ``.npy`` file is one sample of exactly this shape and dtype."""

    shape: list[Annotated[int, Field(ge=1)]] = Field(min_length=1)
    dtype: str = "float32"

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, value: str) -> str:
        import numpy as np

        try:
            dt = np.dtype(value)
        except TypeError:
            raise ValueError(
                f"must be a numpy dtype name such as float32, uint8, int64 (got {value!r})"
            ) from None
        if dt.kind not in "biuf":
            raise ValueError(f"must be a numeric dtype (bool, int, uint, float) (got {value!r})")
        return dt.name  # canonical spelling: "f4" and "float32" hash the same


class TableSpec(_Section):
    """Each row of a CSV / Parquet file is one sample: float32 features + a label. Each row
    gets its own split, by its key: the ``id_column`` value when given (a row without one is
    invalid), else a hash of its features, so identical rows never straddle the split and a
    row keeps its split when rows are appended to its file."""

    label_column: str = Field("label", min_length=1)
    feature_columns: list[str] | None = Field(
        None,
        description="Feature columns in order; None = every column but the label (and the "
        "id column), in file order.",
    )
    id_column: str | None = Field(
        None,
        min_length=1,
        description="A column naming each row (a record id): the row's split follows it. None "
        "= the split follows a hash of the row's features.",
    )

    @field_validator("feature_columns")
    @classmethod
    def _features(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not value:
                raise ValueError("must list at least one column (or be left out for all columns)")
            dup = sorted({c for c in value if value.count(c) > 1})
            if dup:
                raise ValueError(f"must not repeat a column (repeated: {', '.join(dup)})")
        return value

    @model_validator(mode="after")
    def _label_not_feature(self) -> TableSpec:
        if self.feature_columns and self.label_column in self.feature_columns:
            raise ValueError(
                f"feature_columns: must not contain the label column {self.label_column!r}"
            )
        if self.id_column is not None:
            if self.id_column == self.label_column:
                raise ValueError(f"id_column: must not be the label column {self.label_column!r}")
            if self.feature_columns and self.id_column in self.feature_columns:
                raise ValueError(
                    f"feature_columns: must not contain the id column {self.id_column!r}"
                )
        return self


class LabelRule(_Section):
    """parent_dir: the class is the file's parent folder (ImageFolder); sidecar: ``file`` (a CSV
    of path,label with paths relative to the dataset folder); none: unlabelled.
    Tables take their label from ``table.label_column`` and need ``rule = "none"``."""

    rule: Literal["parent_dir", "sidecar", "none"] = "parent_dir"
    file: str = Field("labels.csv", min_length=1)

    @field_validator("file")
    @classmethod
    def _relative(cls, value: str) -> str:
        p = Path(value)
        if p.is_absolute() or ".." in p.parts:
            raise ValueError(f"must be a path inside the dataset folder (got {value!r})")
        return p.as_posix()


class SplitRule(_Section):
    """A sample is in val when a hash of its key falls below ``val_fraction``; the key is the
    md5, or the ``group_regex`` capture on the lake-relative path (e.g. a patient id)."""

    val_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    group_regex: str | None = None

    @field_validator("group_regex")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(
                f"must be a valid regular expression ({exc}) (got {value!r})"
            ) from None
        if compiled.groups != 1:
            raise ValueError(
                f"must have exactly one capture group, e.g. 'patient_(\\d+)/' (got {value!r} "
                f"with {compiled.groups})"
            )
        return value


class Augment(_Section):
    """Offline augmentation: ``copies`` extra augmented copies of each training image (the
    original is always kept; validation samples are never augmented). Deterministic from the
    sample's md5 and the copy index."""

    copies: int = Field(0, ge=0, le=64)
    ops: list[AugmentOp] = Field(default_factory=list)

    @model_validator(mode="after")
    def _ops_when_copies(self) -> Augment:
        if self.copies > 0 and not self.ops:
            raise ValueError(
                "ops: must list at least one of hflip, random_resized_crop, color_jitter when copies > 0"
            )
        return self


class Recipe(_Section):
    """A validated recipe. Build one with :func:`load_recipe` (or ``Recipe.model_validate``)."""

    modality: Modality
    image: ImageShape | None = Field(None, validate_default=True)
    array: ArrayShape | None = Field(None, validate_default=True)
    table: TableSpec | None = Field(None, validate_default=True)
    labels: LabelRule = Field(None, validate_default=True)  # type: ignore[assignment]
    split: SplitRule = Field(default_factory=SplitRule)
    augment: Augment = Field(default_factory=Augment)
    format: Literal["npy", "zarr"] = "npy"
    # What the label is: a class name (classification) or a number (regression: a table's
    # label_column, an array's folder or sidecar label, parsed as float32 at build time).
    task: Literal["classification", "regression"] = "classification"
    auto_train: bool = False
    # The quality gate's rules (pipeline/datasets/quality/rules.py); not in recipe_hash.
    quality: QualityRules = Field(default_factory=QualityRules)

    @field_validator("image", "array", "table")
    @classmethod
    def _section_matches_modality(cls, value: Any, info: ValidationInfo) -> Any:
        modality = info.data.get("modality")
        if modality is None:  # modality itself failed; that error is enough
            return value
        if info.field_name == modality and value is None:
            if modality == "image":
                return ImageShape()
            if modality == "table":
                return TableSpec()
            raise ValueError(f"required when modality = {modality!r}: add an [{modality}] table")
        if info.field_name != modality and value is not None:
            raise ValueError(
                f"only allowed when modality = {info.field_name!r} (modality is {modality!r})"
            )
        return value

    @field_validator("labels", mode="before")
    @classmethod
    def _default_labels(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return {"rule": "none"} if info.data.get("modality") == "table" else {}
        return value

    @field_validator("labels")
    @classmethod
    def _table_labels(cls, value: LabelRule, info: ValidationInfo) -> LabelRule:
        if info.data.get("modality") == "table" and value.rule != "none":
            raise ValueError("rule: must be 'none' for a table (its label is table.label_column)")
        return value

    @field_validator("augment")
    @classmethod
    def _augment_images_only(cls, value: Augment, info: ValidationInfo) -> Augment:
        modality = info.data.get("modality")
        if value.copies > 0 and modality is not None and modality != "image":
            raise ValueError(
                f"copies: must be 0 unless modality = 'image' (modality is {modality!r})"
            )
        return value

    @model_validator(mode="after")
    def _regression_needs_numbers(self) -> Recipe:
        if self.task == "regression":
            if self.modality == "image":
                raise ValueError(
                    "task: 'regression' needs modality 'table' or 'array' (modality is 'image')"
                )
            if self.modality == "array" and self.labels.rule == "none":
                raise ValueError(
                    "task: 'regression' needs a target: labels.rule 'parent_dir' or 'sidecar' "
                    "(labels.rule is 'none')"
                )
        return self

    @property
    def is_regression(self) -> bool:
        return self.task == "regression"

    # ---- identity -------------------------------------------------------------------------

    def canonical(self) -> dict[str, Any]:
        """The fields that shape the stored data, as plain JSON (``auto_train`` is left out: it
        only tells the orchestrator what to do next, and flipping it must not reprocess).
        ``task`` only when it is regression, so that every classification recipe keeps the
        recipe_hash (and version ids) it had before the field existed."""
        exclude = {"auto_train"} if self.task == "regression" else {"auto_train", "task"}
        # [quality] judges versions, it never changes what is stored: tightening a rule must
        # not reprocess the lake (pipeline/datasets/quality/rules.py).
        exclude.add("quality")
        return self.model_dump(mode="json", exclude=exclude)

    @property
    def code_version(self) -> str:
        from pipeline.datasets.preprocess import preprocessor_for

        return preprocessor_for(self).code_version

    @property
    def recipe_hash(self) -> str:
        payload = {
            "format": RECIPE_HASH_FORMAT,
            "code_version": self.code_version,
            "recipe": self.canonical(),
        }
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    # ---- labels and splits ----------------------------------------------------------------

    def label_for(self, relpath: str, sidecar: dict[str, str] | None = None) -> str | None:
        """The label of a lake file (``relpath`` relative to the lake root, posix, first part =
        dataset), or None when it has none. Tables' labels come from the decoder instead."""
        parts = relpath.split("/")
        if self.labels.rule == "parent_dir":
            # ImageFolder: the class is the FIRST folder under the dataset, whatever lies below
            # it (``<dataset>/4/deep/x.png`` is a 4), so sub-folders never invent classes. A
            # file directly in the dataset folder has no class folder. Labels are not part of
            # the processed samples, so recipe_hash need not move: an old version keeps the
            # labels it was published with, and a nested lake's next build gets a new
            # version_id (labels are hashed into it) that diffs as "changed".
            return parts[1] if len(parts) >= 3 else None
        if self.labels.rule == "sidecar":
            return (sidecar or {}).get("/".join(parts[1:]))
        return None

    def is_sidecar(self, relpath: str) -> bool:
        """True for the labels file itself, which the build must not decode as a sample."""
        parts = relpath.split("/", 1)
        return self.labels.rule == "sidecar" and len(parts) == 2 and parts[1] == self.labels.file

    def split_key(self, relpath: str, md5: str) -> str:
        """What decides the split: the group_regex capture on ``relpath`` when it matches,
        else the content md5 (so duplicates never straddle the split)."""
        if self.split.group_regex:
            m = re.search(self.split.group_regex, relpath)
            if m and m.group(1):
                return m.group(1)
        return md5

    def split_for(self, relpath: str, md5: str) -> Literal["train", "val"]:
        return split_of(self.split_key(relpath, md5), self.split.val_fraction)


def split_of(key: str, val_fraction: float) -> Literal["train", "val"]:
    """Deterministic split of a key: the same key lands in the same split in every version."""
    bucket = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 2**32
    return "val" if bucket < val_fraction else "train"


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


def recipe_path(dataset: str, recipes_dir: Path | None = None) -> Path:
    recipes_dir, _ = _settings_dirs(recipes_dir, Path("."))
    return recipes_dir / f"{dataset}.toml"


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

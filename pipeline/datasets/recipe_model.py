"""The recipe schema: how a lake folder becomes samples, as validated pydantic models.

A recipe fixes the modality, the output shape, the label rule, the split rule, the offline
augmentation and the storage format. Any problem is raised as :class:`RecipeError` naming the
file, the field (dotted path) and what is allowed, so a bad recipe fails before a single file
is decoded. Reading recipes (TOML files, defaults for a folder without one, the labels
sidecar) is pipeline/datasets/recipes.py, which also re-exports these names.

``recipe_hash`` keys derived data: it covers everything that changes what is stored (all fields
but ``auto_train`` and ``[quality]``), the code version of the modality's preprocessor and
this module's hash format, so a change to either invalidates the processed samples. The code
versions are kept here (``CODE_VERSIONS``), and the preprocessors read theirs from here: the
schema needs no preprocessor to compute a hash, and the preprocessors import the schema only.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipeline.datasets.quality.rules import QualityRules

# Bump when the way recipe_hash is computed (or the meaning of a field) changes.
RECIPE_HASH_FORMAT = "laketrain-recipe-1"

# Each modality's preprocessor version (pipeline/datasets/preprocess/): bump one whenever a
# change to that preprocessor would change its output for the same input, so that stale
# processed samples are never reused. Part of recipe_hash.
CODE_VERSIONS: dict[str, str] = {
    "image": "image-1",
    "array": "array-1",
    # table-2: row keys (per-row splits), and the id column is never a default feature.
    "table": "table-2",
}

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
        return CODE_VERSIONS[self.modality]

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

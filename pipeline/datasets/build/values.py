"""The values that travel between the build steps (XCom-safe), and the rows commit reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from pipeline.datasets.segments import (
    segment_id_for,
)

# ---- values that travel between the steps (XCom-safe) -----------------------------------------


@dataclass(frozen=True, slots=True)
class ShardFile:
    md5: str
    path: str  # lake-relative; any current path with this content
    size: int


@dataclass(frozen=True)
class Shard:
    dataset: str
    recipe_hash: str
    format: str
    files: list[ShardFile]

    @property
    def segment_id(self) -> str:
        return segment_id_for(self.recipe_hash, self.format, [f.md5 for f in self.files])

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "recipe_hash": self.recipe_hash,
            "format": self.format,
            "files": [[f.md5, f.path, f.size] for f in self.files],
        }

    @classmethod
    def from_dict(cls, data: dict) -> Shard:
        return cls(
            data["dataset"],
            data["recipe_hash"],
            data["format"],
            [ShardFile(*f) for f in data["files"]],
        )


@dataclass(frozen=True)
class SegmentRef:
    dataset: str
    recipe_hash: str
    segment_id: str
    format: str
    path: str  # relative to DATA_ROOT
    n_rows: int
    n_files: int
    decoded: int  # files decoded by this call (0 when the segment was reused)
    invalid: int
    reused: bool

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SegmentRef:
        return cls(**data)


@dataclass(frozen=True)
class Version:
    dataset: str
    version_id: str
    tag: str
    parent_id: str | None
    samples: int
    train: int
    val: int
    added: int
    removed: int
    changed: int
    created_at: str
    path: str
    invalid: int = 0
    # What the commit that returned this did with the dataset's head: "published" (a new
    # version, now the head) or "returned" (the lake went back to this older version's
    # content; the head moved back to it). None on a Version not returned by commit.
    head_move: str | None = None
    # "quarantined": the quality gate held it (not the head, no dataset event); ``gate`` then
    # says why and whether lake_ingest asks a person (pipeline/datasets/quality/at_commit.py).
    status: str = "committed"
    gate: dict | None = None

    @property
    def short_id(self) -> str:
        return self.version_id[:8]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BuildReport:
    dataset: str
    version: Version | None
    shards: int = 0
    decoded: int = 0
    invalid: int = 0
    reused_segments: int = 0
    scan: dict | None = None
    segments: list[SegmentRef] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per phase

    def to_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "version": self.version.to_dict() if self.version else None,
            "shards": self.shards,
            "decoded": self.decoded,
            "invalid": self.invalid,
            "reused_segments": self.reused_segments,
            "scan": self.scan,
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
        }


@dataclass(slots=True)
class _Sample:
    path: str
    md5: str
    label: str | None
    split: str
    segment_id: str
    row: int
    size: int | None
    mtime_ns: int | None
    duplicate: bool
    line: int | None
    copy: int


class _Processed(NamedTuple):
    """One processed_samples row as read by commit: a tuple, built straight from the driver's
    row (one per content of the dataset on every commit)."""

    md5: str
    segment_id: str | None
    row: int
    n_rows: int
    status: str
    reason: str | None
    labels: str | None
    lines: str | None
    invalid_rows: str | None
    stats: str | None


class _Stats(NamedTuple):
    """What a leaf's summary reads of a content's processed row (summaries.summarize): its rows
    per sample and its pixel sums."""

    n_rows: int
    stats: str | None


# ---- plan -------------------------------------------------------------------------------------


def _settings():
    from pipeline.settings import get_settings

    return get_settings()


def _recipe(dataset: str):
    from pipeline.datasets.recipes import load_recipe

    return load_recipe(dataset)

"""QualityReport: what a version's quality report holds, JSON-safe, and the numbers rules test.

The report is computed at commit (pipeline/datasets/quality/compute.py), stored verbatim in the
manifest's ``quality`` key and in ``dataset_versions.quality``. Listings (``files``, ``listed``)
are capped at ``LIST_CAP`` entries each; the counts beside them are always exact, so a rule
never reads a truncated number.

``metrics()`` is the contract with the gate (pipeline/datasets/quality/ rules, recipe
``[quality]``): a rule ``max_<name>`` / ``min_<name>`` tests ``metrics()[<name>]``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

LIST_CAP = 100  # entries per listing: the report stays small in a manifest of 1M samples

LEAK_NEAR_DUPLICATE = "near_duplicate"
LEAK_LABEL_CONFLICT = "label_conflict"


@dataclass
class Invalid:
    count: int = 0
    new_since_parent: int = 0
    files: list[dict[str, Any]] = field(default_factory=list)  # [{path, reason}] capped


@dataclass
class ExactDuplicates:
    groups: int = 0  # md5s held by more than one path
    samples: int = 0  # samples in those groups
    listed: list[dict[str, Any]] = field(default_factory=list)  # [{md5, paths}] capped


@dataclass
class LabelConflicts:
    count: int = 0  # md5s held under more than one label
    listed: list[dict[str, Any]] = field(default_factory=list)  # [{md5, paths, labels}] capped


@dataclass
class NearDuplicates:
    threshold: int = 4  # Hamming distance of 64 bits (images); 0 for tables (identical rows)
    kind: str = "image"  # image | table | none
    groups: int = 0  # groups of >= 2 distinct contents within threshold
    samples: int = 0
    new_samples: int = 0  # hashed and looked up for this version (the O(changes) part)
    listed: list[dict[str, Any]] = field(default_factory=list)  # [{paths, splits}] capped


@dataclass
class Leaks:
    count: int = 0
    cross_split_near_duplicates: int = 0  # near-duplicate groups with samples in both splits
    label_conflicts_across_splits: int = 0
    # [{kind: near_duplicate | label_conflict, paths, splits}] capped
    listed: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Drift:
    parent: str | None = None  # the parent version's tag, None for a first version
    # {split: {label: {"count": n, "change": n - parent_n}}}
    per_split: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    new_classes: list[str] = field(default_factory=list)
    vanished_classes: list[str] = field(default_factory=list)
    label_tv_distance: float = 0.0  # total variation of the label histograms vs the parent
    # tables: {column: {missing_rate, min, max, parent_min, parent_max, constant}}
    columns: dict[str, dict[str, Any]] = field(default_factory=dict)
    constant_columns: list[str] = field(default_factory=list)


@dataclass
class QualityReport:
    samples: int = 0
    train: int = 0
    val: int = 0
    files: int = 0
    invalid: Invalid = field(default_factory=Invalid)
    exact_duplicates: ExactDuplicates = field(default_factory=ExactDuplicates)
    label_conflicts: LabelConflicts = field(default_factory=LabelConflicts)
    near_duplicates: NearDuplicates = field(default_factory=NearDuplicates)
    leaks: Leaks = field(default_factory=Leaks)
    drift: Drift = field(default_factory=Drift)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> QualityReport:
        """The report from its stored form; unknown keys are ignored and missing ones take
        their defaults, so a report written by an older or newer laketrain still reads."""
        data = data or {}
        parts = {
            "invalid": Invalid,
            "exact_duplicates": ExactDuplicates,
            "label_conflicts": LabelConflicts,
            "near_duplicates": NearDuplicates,
            "leaks": Leaks,
            "drift": Drift,
        }
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            if f.name in parts:
                sub = parts[f.name]
                names = {g.name for g in fields(sub)}
                kwargs[f.name] = sub(
                    **{k: v for k, v in (data[f.name] or {}).items() if k in names}
                )
            else:
                kwargs[f.name] = data[f.name]
        return cls(**kwargs)

    def metrics(self) -> dict[str, float | int]:
        """The flat numbers a ``[quality]`` rule tests, by the rule's name without max_/min_."""
        files = max(self.files, self.samples + self.invalid.count)
        return {
            "samples": self.samples,
            "train_samples": self.train,
            "val_samples": self.val,
            "invalid": self.invalid.count,
            "invalid_fraction": (self.invalid.count / files) if files else 0.0,
            "new_invalid": self.invalid.new_since_parent,
            "exact_duplicate_groups": self.exact_duplicates.groups,
            "label_conflicts": self.label_conflicts.count,
            "near_duplicate_groups": self.near_duplicates.groups,
            "cross_split_near_duplicates": self.leaks.cross_split_near_duplicates,
            "leaks": self.leaks.count,
            "label_drift": self.drift.label_tv_distance,
            "new_classes": len(self.drift.new_classes),
            "vanished_classes": len(self.drift.vanished_classes),
            "constant_columns": len(self.drift.constant_columns),
        }

    def summary_line(self) -> str:
        """One line for the ingest commit log."""
        return (
            f"quality: {self.invalid.count} invalid (+{self.invalid.new_since_parent} new), "
            f"{self.exact_duplicates.groups} exact-duplicate groups, "
            f"{self.label_conflicts.count} label conflicts, "
            f"{self.near_duplicates.groups} near-duplicate groups, "
            f"{self.leaks.count} cross-split leaks, "
            f"label drift {self.drift.label_tv_distance:.3f}"
        )


def capped(items: list[Any], cap: int = LIST_CAP) -> list[Any]:
    return items[:cap]

"""The recipe's ``[quality]`` section: the gate's blocking rules and when a person must approve.

Every rule is optional; an unset rule never blocks. A rule ``max_<name>`` / ``min_<name>``
tests ``QualityReport.metrics()[<name>]`` (pipeline/datasets/quality/gate.py). The section is
left out of ``recipe_hash``: tightening a rule re-judges versions, it never reprocesses a
sample (``near_duplicate_distance`` changes the report and the splits of new near-duplicates,
and the version id covers every split already).

``approval``:

- ``never`` (default): no human step in ``lake_ingest``. A failing rule still blocks: the
  version is published ``quarantined`` (not ``latest``, no dataset event) and stays so until
  ``laketrain approve`` or a change of the lake gives a version that passes.
- ``on_failure``: a failing rule quarantines the version and ``lake_ingest`` waits for a
  person's answer (Airflow's "Required Actions"); approving publishes it.
- ``always``: every version is quarantined and waits for approval, even one that passes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

APPROVAL_NEVER = "never"
APPROVAL_ON_FAILURE = "on_failure"
APPROVAL_ALWAYS = "always"

# Rule field -> (metric of QualityReport.metrics(), "max" | "min", what the metric means).
RULES: dict[str, tuple[str, str, str]] = {
    "max_invalid_fraction": ("invalid_fraction", "max", "fraction of the files left out invalid"),
    "max_label_conflicts": ("label_conflicts", "max", "contents held under two or more labels"),
    "max_cross_split_near_duplicates": (
        "cross_split_near_duplicates",
        "max",
        "near-duplicate groups with samples in both train and val",
    ),
    "min_val_samples": ("val_samples", "min", "samples in the validation split"),
    "max_label_drift": (
        "label_drift",
        "max",
        "total variation distance of the label histogram from the parent's",
    ),
}


class QualityRules(BaseModel):
    """``[quality]`` of a recipe. Unknown keys are refused (a typo must not drop a rule)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_invalid_fraction: float | None = Field(None, ge=0.0, le=1.0)
    max_label_conflicts: int | None = Field(None, ge=0)
    max_cross_split_near_duplicates: int | None = Field(None, ge=0)
    min_val_samples: int | None = Field(None, ge=0)
    max_label_drift: float | None = Field(None, ge=0.0, le=1.0)
    # Hamming distance (of 64 bits) under which two images are near-duplicates; read by the
    # report (pipeline/datasets/quality/). 4 is conservative: re-encodes, small resizes and
    # slight brightening stay within it, distinct photos are far above it.
    near_duplicate_distance: int = Field(4, ge=0, le=32)
    approval: Literal["never", "on_failure", "always"] = APPROVAL_NEVER

    @field_validator(*RULES, "near_duplicate_distance", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        # TOML `true` would pass as 1 for an int rule: a limit is a number, say so.
        if isinstance(value, bool):
            raise ValueError(f"must be a number, not a boolean (got {value!r})")
        return value

    def active(self) -> dict[str, float | int]:
        """The rules that are set, by field name."""
        return {name: getattr(self, name) for name in RULES if getattr(self, name) is not None}

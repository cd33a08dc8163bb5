"""The quality gate: a version's report judged by its recipe's ``[quality]`` rules.

``judge(report, rules)`` gives the failed rules, each with a reason a person can act on, and
whether the version is held (published ``quarantined``) and whether ``lake_ingest`` asks a
person (``needs_approval``). The rules are in pipeline/datasets/quality/rules.py; what a
quarantined version is and how it is released is in pipeline/datasets/quality/review.py.

A rule whose number the report lacks (a report from an older laketrain, or none at all) fails
with that as its reason: a gate that cannot check a rule must not let the version through.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.datasets.quality.rules import (
    APPROVAL_ALWAYS,
    APPROVAL_NEVER,
    RULES,
    QualityRules,
)

__all__ = ["Failure", "GateResult", "judge"]


@dataclass(frozen=True)
class Failure:
    rule: str  # the recipe field, e.g. max_label_conflicts
    limit: float | int
    value: float | int | None  # None: the report has no such number
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GateResult:
    approval: str
    failures: list[Failure] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def quarantined(self) -> bool:
        """Held from ``latest``, training and the dataset event until approved."""
        return bool(self.failures) or self.approval == APPROVAL_ALWAYS

    @property
    def needs_approval(self) -> bool:
        """Whether ``lake_ingest`` waits on a person's answer (approval on_failure/always)."""
        return self.quarantined and self.approval != APPROVAL_NEVER

    def reasons(self) -> list[str]:
        if self.failures:
            return [f.reason for f in self.failures]
        if self.quarantined:
            return ["the recipe asks for approval of every version (quality.approval = 'always')"]
        return []

    def summary(self) -> str:
        if not self.quarantined:
            return "quality gate: passed"
        what = "waits for approval" if self.needs_approval else "blocked"
        return f"quality gate: quarantined ({what}): " + "; ".join(self.reasons())

    def to_dict(self) -> dict[str, Any]:
        return {
            "approval": self.approval,
            "passed": self.passed,
            "quarantined": self.quarantined,
            "needs_approval": self.needs_approval,
            "failures": [f.to_dict() for f in self.failures],
            "reasons": self.reasons(),
        }


def _fmt(x: float | int) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def judge(metrics: dict[str, float | int] | None, rules: QualityRules) -> GateResult:
    """The gate's verdict on a version whose report's ``metrics()`` are ``metrics`` (None: the
    version has no report)."""
    failures: list[Failure] = []
    for name, limit in rules.active().items():
        metric, kind, meaning = RULES[name]
        value = None if metrics is None else metrics.get(metric)
        if value is None:
            failures.append(
                Failure(
                    name,
                    limit,
                    None,
                    f"{name} = {_fmt(limit)} cannot be checked: the quality report has no "
                    f"{metric!r} ({meaning})",
                )
            )
            continue
        bad = value > limit if kind == "max" else value < limit
        if bad:
            op = ">" if kind == "max" else "<"
            failures.append(
                Failure(
                    name,
                    limit,
                    value,
                    f"{metric} = {_fmt(value)} {op} {name} = {_fmt(limit)} ({meaning})",
                )
            )
    return GateResult(rules.approval, failures)

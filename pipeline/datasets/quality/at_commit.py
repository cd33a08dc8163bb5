"""The gate's part of ``commit`` (pipeline/datasets/build/committing.py), kept here so the
commit path only calls it: judge the new version, hold it, or find a held one again."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from pipeline.datasets.quality import review
from pipeline.datasets.quality.gate import GateResult, judge
from pipeline.datasets.quality.report import QualityReport
from pipeline.datasets.quality.rules import QualityRules
from pipeline.metadata.datasets import VERSION_COMMITTED, DatasetVersion


def judge_manifest(manifest: dict[str, Any], rules: QualityRules) -> GateResult:
    """The gate's verdict on a version from the report in its manifest (``quality`` key)."""
    report = manifest.get("quality")
    metrics = QualityReport.from_dict(report).metrics() if isinstance(report, dict) else None
    return judge(metrics, rules)


def status_for(gate: GateResult) -> str:
    return review.VERSION_QUARANTINED if gate.quarantined else VERSION_COMMITTED


def hold(session: Session, row: DatasetVersion, gate: GateResult) -> dict[str, Any]:
    """A new version the gate holds: record why (its first ``quarantine`` review). Returns
    what ``Version.gate`` carries to the ingest task."""
    review.record_quarantine(session, row, gate.reasons())
    return {**gate.to_dict(), "standing": None, "again": False}


def held_again(session: Session, row: DatasetVersion, rules: QualityRules) -> dict[str, Any]:
    """A build whose result is a version already held: it stays quarantined (the rules are not
    re-run on it: a person's decision, or a new lake content, releases it). Recorded again only
    when the lake had moved away from it in between."""
    reasons = _stored_reasons(session, row)
    review.record_quarantine(session, row, reasons, again=True)
    standing = review.standing(session, row.version_id)
    return {
        "approval": rules.approval,
        "passed": False,
        "quarantined": True,
        "failures": [],
        "reasons": reasons,
        "standing": standing,
        # A rejected version waits for nobody: the lake must change, or someone approve it.
        "needs_approval": rules.approval != "never" and standing != "reject",
        "again": True,
    }


def _stored_reasons(session: Session, row: DatasetVersion) -> list[str]:
    for entry in reversed(review.history(session, row.version_id)):
        if entry["decision"] == review.REVIEW_QUARANTINE and entry["reason"]:
            return entry["reason"].split("; ")
    return []

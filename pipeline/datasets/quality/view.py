"""A version's quality as the CLI (``laketrain quality``) and the UI's version page show it:
the report, the gate's verdict under the dataset's recipe, and the review history."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

from pipeline.datasets.quality import review
from pipeline.datasets.quality.gate import judge
from pipeline.datasets.quality.report import QualityReport
from pipeline.metadata.datasets import DatasetVersion
from pipeline.metadata.store import MetadataStore, open_store


def stored_report(v: DatasetVersion) -> dict[str, Any] | None:
    """The report of a version: the store's column, else the manifest's ``quality`` key; None
    for a version built before reports existed."""
    if isinstance(v.quality, dict):
        return v.quality
    try:
        m = json.loads(v.manifest or "{}")
    except ValueError:
        return None
    q = m.get("quality") if isinstance(m, dict) else None
    return q if isinstance(q, dict) else None


def _gate(v: DatasetVersion, report: dict[str, Any] | None) -> dict[str, Any]:
    from pipeline.datasets.recipes import load_recipe

    try:
        rules = load_recipe(v.dataset).quality
    except ValueError as exc:  # a broken recipe: say so, the report is still shown
        return {"error": str(exc)}
    metrics = QualityReport.from_dict(report).metrics() if report is not None else None
    return judge(metrics, rules).to_dict()


def version_quality(session: Session, v: DatasetVersion) -> dict[str, Any]:
    report = stored_report(v)
    reviews = review.history(session, v.version_id)
    held = [r for r in reviews if r["decision"] == review.REVIEW_QUARANTINE and r["reason"]]
    return {
        "dataset": v.dataset,
        "version_id": v.version_id,
        "tag": v.tag,
        "status": v.status,
        "report": report,
        "metrics": QualityReport.from_dict(report).metrics() if report is not None else None,
        "summary": QualityReport.from_dict(report).summary_line() if report is not None else None,
        # Why the gate held it, as recorded when it was built (the recipe may have changed).
        "held_for": held[-1]["reason"].split("; ") if held else [],
        # The verdict of the dataset's recipe as it is now.
        "gate": _gate(v, report),
        "standing": review.standing(session, v.version_id),
        "reviews": reviews,
    }


def quality_of(
    ref: str, dataset: str | None = None, *, store: MetadataStore | None = None
) -> dict[str, Any]:
    """``version_quality`` of the version ``ref`` names (quarantined ones included)."""
    from pipeline.datasets.refs import resolve_row

    store = store or open_store()
    with store.session() as session:
        return version_quality(session, resolve_row(session, ref, dataset))

"""lake_ingest's approval step: which held versions wait for a person, what the Required Action
says, and what each answer does. Plain functions of JSON values (no Airflow here); the
operator that asks is ``approval_operator.VersionApprovalOperator``.

A version the quality gate holds (docs/quality.md) is asked about when its recipe sets
``quality.approval = "on_failure"`` or ``"always"``, it is still the lake's content, and
nobody rejected it. "Approve" makes it committed and ``latest`` and fires its dataset event,
so auto-training starts; "Reject" keeps it quarantined with the reason typed in the form. No
answer within the response timeout leaves it quarantined, undecided: the ingest run ends (it
holds every later ingest while it waits: one ingest runs at a time) and the next one asks
again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

log = logging.getLogger("laketrain.orchestration")

# How long one ingest run waits for an answer; the next run asks again. An hour: the
# reconcile schedule, so a pending question holds back ingest by one run at most.
DEFAULT_RESPONSE_TIMEOUT_S = 3600
TIMEOUT_ENV = "LAKETRAIN_APPROVAL_TIMEOUT_S"
APPROVE = "Approve"
REJECT = "Reject"
NO_REASON = "rejected in Airflow (no reason given)"


def response_timeout() -> timedelta:
    """Parse-time value (the DAG file reads it): LAKETRAIN_APPROVAL_TIMEOUT_S, default 3600."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        seconds = float(raw) if raw else DEFAULT_RESPONSE_TIMEOUT_S
    except ValueError:
        log.warning("%s=%r is not a number of seconds: using %d", TIMEOUT_ENV, raw, 3600)
        seconds = DEFAULT_RESPONSE_TIMEOUT_S
    return timedelta(seconds=max(1.0, seconds))


def log_held(version: Any, *, logger: logging.Logger = log) -> None:
    """The commit log's lines for a version the gate held (a build's ``Version``)."""
    gate = version.gate or {}
    again = " again" if gate.get("again") else ""
    if gate.get("standing") == "reject":
        what = "rejected before: not asking again (the lake must change, or `laketrain approve`)"
    elif gate.get("needs_approval"):
        what = "waits for approval (the approve step, under Required Actions)"
    else:
        what = "blocked (quality.approval = 'never': `laketrain approve` releases it)"
    logger.warning(
        "dataset %s: version %s quarantined%s by the quality gate, not latest, no dataset "
        "event; %s",
        version.dataset,
        version.tag,
        again,
        what,
    )
    for reason in gate.get("reasons") or ():
        logger.warning("dataset %s: quality gate: %s", version.dataset, reason)


def pending_reviews(datasets: list[str] | None, *, store: Any = None) -> list[dict[str, Any]]:
    """One entry per held version that waits for a person, as the approve operator's mapped
    kwargs: ``subject``, ``body`` and ``version`` ({dataset, version_id, tag})."""
    from sqlalchemy import select

    from pipeline.datasets.quality import review
    from pipeline.datasets.recipes import load_recipe
    from pipeline.metadata.datasets import DatasetVersion
    from pipeline.metadata.store import open_store

    store = store or open_store()
    out = []
    with store.session() as session:
        for name in datasets or ():
            try:
                rules = load_recipe(name).quality
            except ValueError as exc:  # logged by plan already; never blocks the others
                log.error("dataset %s: recipe unreadable, not asking: %s", name, exc)
                continue
            if rules.approval == "never":
                continue
            held = session.scalars(
                select(DatasetVersion).where(
                    DatasetVersion.dataset == name,
                    DatasetVersion.status == review.VERSION_QUARANTINED,
                )
            ).all()
            for v in held:
                if not review.is_lake_content(session, v):
                    continue
                if review.standing(session, v.version_id) == review.REVIEW_REJECT:
                    continue
                reasons = _held_for(review.history(session, v.version_id))
                out.append(
                    {
                        "subject": f"Approve {v.tag} of {name} for training?",
                        "body": review_body(v, reasons),
                        "version": {
                            "dataset": v.dataset,
                            "version_id": v.version_id,
                            "tag": v.tag,
                        },
                    }
                )
    return out


def _held_for(history: list[dict[str, Any]]) -> list[str]:
    for entry in reversed(history):
        if entry["decision"] == "quarantine" and entry["reason"]:
            return entry["reason"].split("; ")
    return []


def review_body(v: Any, reasons: list[str]) -> str:
    """The Required Action's text (Markdown): why it is held, what each answer does."""
    lines = [
        f"Version **{v.tag}** of **{v.dataset}** ({v.samples} samples: {v.train} train, "
        f"{v.val} val; +{v.added} −{v.removed} ~{v.changed} against its parent) is held by "
        "the quality gate:",
        "",
        *[f"- {r}" for r in reasons or ["the recipe asks for approval of every version"]],
        "",
        "**Approve**: it becomes `latest` and its dataset event starts auto-training.",
        "**Reject**: it stays quarantined (give a reason). The Datasets page shows its quality "
        f"report (`laketrain quality {v.tag}`).",
    ]
    return "\n".join(lines)


def decide(
    version: Mapping[str, Any], approved: bool, *, who: str, reason: str | None = None
) -> dict[str, Any] | None:
    """Apply a person's answer; the dataset event's extra when the version became latest."""
    from pipeline.datasets.quality import review

    if approved:
        outcome = review.approve(
            version["version_id"], who=who, reason=reason or None, dataset=version["dataset"]
        )
    else:
        outcome = review.reject(
            version["version_id"], who=who, reason=reason or NO_REASON, dataset=version["dataset"]
        )
    log.info("dataset %s: %s (by %s)", version["dataset"], outcome.message, who)
    return outcome.event_extra()


def responder(user: Mapping[str, Any] | None) -> str:
    """Who answered, from the HITL response's ``responded_by_user`` ({id, name})."""
    if not user:
        return "airflow (unknown user)"
    return str(user.get("name") or user.get("id") or "airflow (unknown user)")

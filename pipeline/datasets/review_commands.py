"""``laketrain quality``, ``approve`` and ``reject``: a version's quality report and the
decisions on a version the quality gate holds (docs/quality.md, "The gate").

Registered by ``pipeline/datasets/commands.py``; everything heavy is imported inside the
commands so that ``laketrain --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from pipeline.console import fail, out, print_json, say

_LATEST_HELP = "Dataset that 'latest' means (default: the only dataset with versions)."
_BY_HELP = "Who decides, as recorded (default: the OS user running the command)."


def _errors() -> tuple[type[BaseException], ...]:
    from pipeline.datasets.manifest import VersionNotFound
    from pipeline.datasets.quality.review import ReviewError

    return (VersionNotFound, ReviewError)


def _dataset(version: str, dataset: str | None) -> str | None:
    from pipeline.datasets.cli_refs import dataset_for_refs

    return dataset_for_refs([version], dataset)


def quality_cmd(
    version: Annotated[str, typer.Argument(help="Id, unique id prefix, tag or 'latest'.")],
    dataset: Annotated[str | None, typer.Option(help=_LATEST_HELP)] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the whole report as JSON.")
    ] = False,
) -> None:
    """Show a version's quality report, the gate's verdict and its review history."""
    from pipeline.datasets.quality.view import quality_of

    try:
        q = quality_of(version, _dataset(version, dataset))
    except _errors() as exc:
        fail(str(exc))
    if as_json:
        print_json(q)
        return
    say(f"{q['tag']}  {q['version_id']}  status {q['status']}")
    out().print(q["summary"] or "no quality report (built before reports existed)", markup=False)
    report = q["report"] or {}
    for title, key, rows in (
        ("label conflicts", "label_conflicts", "listed"),
        ("near-duplicate groups", "near_duplicates", "listed"),
        ("cross-split leaks", "leaks", "listed"),
        ("exact duplicates", "exact_duplicates", "listed"),
    ):
        listed = (report.get(key) or {}).get(rows) or []
        if listed:
            out().print(f"{title}:", markup=False)
        for entry in listed:
            labels = entry.get("labels") or entry.get("splits") or ""
            paths = ", ".join(entry.get("paths") or [])
            out().print(f"  {paths}" + (f"  ({labels})" if labels else ""), markup=False)
    gate = q["gate"]
    if "error" in gate:
        out().print(f"gate: recipe unreadable: {gate['error']}", markup=False)
    elif gate["quarantined"]:
        out().print("gate: would hold this version:", markup=False)
        for reason in gate["reasons"]:
            out().print(f"  {reason}", markup=False)
    else:
        out().print("gate: passes the recipe's [quality] rules", markup=False)
    if q["status"] == "quarantined" and q["held_for"]:
        out().print("quarantined because:", markup=False)
        for reason in q["held_for"]:
            out().print(f"  {reason}", markup=False)
    for r in q["reviews"]:
        why = f": {r['reason']}" if r["reason"] else ""
        out().print(f"{r['at'][:19]}  {r['decision']} by {r['who']}{why}", markup=False)


def approve_cmd(
    version: Annotated[str, typer.Argument(help="Id, unique id prefix or tag of the version.")],
    by: Annotated[str | None, typer.Option("--by", help=_BY_HELP)] = None,
    reason: Annotated[str | None, typer.Option(help="Why (recorded).")] = None,
    dataset: Annotated[str | None, typer.Option(help="Only this dataset's versions.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Release a quarantined version: it becomes committed, and latest if the lake still holds
    its content. Run outside Airflow, no dataset event is sent (trigger `train` by hand, or
    answer the Required Action in Airflow instead)."""
    from pipeline.datasets.quality.review import approve

    _decide(approve, version, by=by, reason=reason, dataset=dataset, as_json=as_json)


def reject_cmd(
    version: Annotated[str, typer.Argument(help="Id, unique id prefix or tag of the version.")],
    reason: Annotated[str, typer.Option(help="Why (required, recorded).")],
    by: Annotated[str | None, typer.Option("--by", help=_BY_HELP)] = None,
    dataset: Annotated[str | None, typer.Option(help="Only this dataset's versions.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Keep a quarantined version quarantined, recording who and why."""
    from pipeline.datasets.quality.review import reject

    _decide(reject, version, by=by, reason=reason, dataset=dataset, as_json=as_json)


def _decide(
    decision: Callable[..., Any],
    version: str,
    *,
    by: str | None,
    reason: str | None,
    dataset: str | None,
    as_json: bool,
) -> None:
    """Record an approve/reject decision (who: --by, else the OS user) and print its outcome."""
    from pipeline.datasets.quality.review import current_user

    try:
        outcome = decision(version, who=by or current_user(), reason=reason, dataset=dataset)
    except _errors() as exc:
        fail(str(exc), code=1)
    if as_json:
        print_json(outcome.to_dict())
    else:
        say(outcome.message)


def register(app: typer.Typer) -> None:
    app.command("quality")(quality_cmd)
    app.command("approve")(approve_cmd)
    app.command("reject")(reject_cmd)

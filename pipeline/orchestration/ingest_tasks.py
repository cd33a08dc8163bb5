"""The bodies of the ``lake_ingest`` DAG's tasks: scan the lake, plan and process the shards,
commit each dataset's version (the train DAG's bodies live in ``tasks``).

Plain functions of plain JSON values, callable and testable without a scheduler: inputs and
outputs are small JSON dicts (ids, names, counts), never data and never credentials. Every
refused, unreadable or invalid file is named in the log with its reason.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from pipeline.orchestration.refusals import RunRefused, check_dataset
from pipeline.orchestration.rejected import (
    invalid_ledger_files,
    log_files,
    log_rejected,
    rejected_ledger_files,
)

# The orchestration logger, as in tasks: the ingest logs are read (and tested) under its name.
log = logging.getLogger("laketrain.orchestration")


def scan_lake() -> dict[str, Any]:
    """Scan the lake into the ledger; log the summary and every refused/unreadable/invalid
    file; return the summary and the datasets to build (all datasets the ledger knows: the
    build decides from the ledger what changed, never from the trigger's payload)."""
    from pipeline.lake.scan import scan

    result = scan()
    summary = result.summary()
    log.info("scan summary: %s", json.dumps(summary, sort_keys=True))
    log_files("refused", result.refused, logger=log)
    log_files("unreadable", result.unreadable, logger=log)
    # Files decoded before and found invalid (a file new to this scan is decoded by process,
    # whose log names it).
    invalid = invalid_ledger_files()
    log_files("invalid", invalid, logger=log)
    return {"summary": summary, "datasets": ledger_datasets(), "invalid": len(invalid)}


def ledger_datasets() -> list[str]:
    """Every dataset the ledger has rows for (present or deleted files)."""
    from sqlalchemy import select

    from pipeline.metadata.ledger import LedgerFile
    from pipeline.metadata.store import open_store

    with open_store().session() as session:
        names = session.scalars(select(LedgerFile.dataset).distinct()).all()
    out = []
    for name in sorted(n for n in names if n):
        try:
            out.append(check_dataset(name))
        except RunRefused as exc:  # never a path to build from; the others still build
            log.error("not building %r: %s", name, exc)
    return out


def plan_shards(datasets: list[str]) -> list[dict[str, Any]]:
    """The shards to preprocess, over all datasets, as JSON dicts (``Shard.to_dict``). A dataset
    whose recipe is broken is logged and left out, so it never blocks the others."""
    from pipeline.datasets import build

    shards: list[dict[str, Any]] = []
    for name in datasets:
        try:
            planned = build.plan(name)
        except ValueError as exc:  # RecipeError names the file and field
            log.error("dataset %s not planned: %s", name, exc)
            continue
        files = sum(len(s.files) for s in planned)
        log.info("dataset %s: %d shard(s), %d file(s) to preprocess", name, len(planned), files)
        shards.extend(s.to_dict() for s in planned)
    return shards


def process_shard(shard: Mapping[str, Any]) -> dict[str, Any]:
    from pipeline.datasets import build

    shard_ = build.Shard.from_dict(dict(shard))
    ref = build.process(shard_)
    log.info(
        "shard of %s: segment %s, %d rows, %d decoded, %d invalid%s",
        ref.dataset,
        ref.segment_id[:12],
        ref.n_rows,
        ref.decoded,
        ref.invalid,
        " (reused)" if ref.reused else "",
    )
    if ref.invalid:
        # Name them: "2 invalid" alone does not say which files, nor why.
        rows = rejected_ledger_files(
            ref.dataset, md5s=[f.md5 for f in shard_.files], statuses=("invalid",)
        )
        log_rejected(rows, logger=log)
    return ref.to_dict()


def commit_dataset(dataset: str, segments: list[Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """Commit ``dataset`` from the ledger; the version event's extra, or None when nothing
    changed. ``segments`` are every processed shard of this run (all datasets)."""
    from pipeline.datasets import build

    # Named here too: a drop of only bad files commits no version, and says so below.
    log_rejected(rejected_ledger_files(dataset), logger=log)
    mine = [
        build.SegmentRef.from_dict(dict(s))
        for s in segments or ()
        if s and s.get("dataset") == dataset
    ]
    version = build.commit(dataset, mine)
    if version is None:
        log.info("dataset %s: nothing changed, no new version", dataset)
        return None
    log_quality_summary(version, logger=log)
    if version.status == "quarantined":
        # Held by the quality gate: not latest, so no dataset event (auto-training must not
        # start); the approve step of lake_ingest (or `laketrain approve`) releases it.
        from pipeline.orchestration.approval import log_held

        log_held(version, logger=log)
        return None
    extra = version_event_extra(version.to_dict())
    # A head moved back to an older version is an event too: training on latest must see it.
    what = "head moved back to" if version.head_move == "returned" else "committed"
    log.info("dataset %s: %s version %s (%s)", dataset, what, version.version_id, json.dumps(extra))
    if version.invalid:
        log.warning("dataset %s: %d file(s) left out as invalid", dataset, version.invalid)
    return extra


def log_quality_summary(version: Any, *, logger: logging.Logger) -> None:
    """One line of the version's quality report (from its manifest) in the commit log."""
    from pipeline.datasets.dataroot import work_root
    from pipeline.datasets.quality.report import QualityReport

    # Under DATA_ROOT, or the work root the commit published an s3:// DATA_ROOT from.
    manifest = work_root() / version.path / "manifest.json"
    try:
        report = json.loads(manifest.read_text()).get("quality")
    except (OSError, ValueError, TypeError):
        report = None
    if report:
        summary = QualityReport.from_dict(report).summary_line()
        logger.info("dataset %s: quality: %s", version.dataset, summary)


def version_event_extra(version: Mapping[str, Any]) -> dict[str, Any]:
    return {k: version[k] for k in ("dataset", "version_id", "tag", "samples", "added", "removed")}

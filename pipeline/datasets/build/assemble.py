"""The version's samples, assembled from the store alone, and their diff to the parent."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session

from pipeline.datasets.build.values import (
    _Processed,
    _Sample,
)
from pipeline.datasets.preprocess.table import target_text
from pipeline.metadata.datasets import (
    SAMPLE_INVALID,
)
from pipeline.metadata.driver import driver_rows
from pipeline.metadata.ledger import STATUS_INVALID, STATUS_OK


def _assemble(
    recipe, files, processed, sidecar, known_splits: dict[str, str] | None = None
) -> tuple[list[_Sample], list[dict]]:
    """Samples in (path, row) order, and the files/lines left out with their reason.
    ``known_splits`` (md5 -> split, from the parent version under the same recipe) spares
    recomputing the split hash of every content already placed."""
    known_splits = known_splits or {}
    samples: list[_Sample] = []
    invalid: list[dict] = []
    # Rows per source sample under this recipe: the original + its augmented copies.
    per_sample = recipe.augment.copies + 1
    split_by_md5: dict[str, str] = {}  # also: the contents already seen (duplicates)
    rule = recipe.labels.rule
    sidecar_path = f"/{recipe.labels.file}" if rule == "sidecar" else None
    for path, md5, size, mtime, status, error in files:
        if sidecar_path is not None and path.endswith(sidecar_path) and recipe.is_sidecar(path):
            continue
        if status not in (STATUS_OK, STATUS_INVALID) or md5 is None:
            invalid.append({"path": path, "md5": md5, "line": None, "reason": error or status})
            continue
        ps = processed.get(md5)
        if ps is None:
            continue  # arrived after the plan: the next build takes it
        if ps.status == SAMPLE_INVALID:
            invalid.append(
                {"path": path, "md5": md5, "line": None, "reason": ps.reason or "invalid"}
            )
            continue
        if ps.invalid_rows:
            for line, reason in json.loads(ps.invalid_rows):
                invalid.append({"path": path, "md5": md5, "line": line, "reason": reason})
        content_labels = json.loads(ps.labels) if ps.labels else None
        lines = json.loads(ps.lines) if ps.lines else None
        path_label = None
        if content_labels is None and rule != "none":
            path_label = recipe.label_for(path, sidecar)
            if path_label is None:
                where = "labels file" if rule == "sidecar" else "class folder"
                invalid.append(
                    {
                        "path": path,
                        "md5": md5,
                        "line": None,
                        "reason": f"no label: the file has no {where}",
                    }
                )
                continue
            if recipe.task == "regression":
                target = target_text(path_label)
                if target is None:
                    invalid.append(
                        {
                            "path": path,
                            "md5": md5,
                            "line": None,
                            "reason": f"target {path_label!r} is not a finite number (task = 'regression')",
                        }
                    )
                    continue
                path_label = target
        # A content's split is decided once, by its first path, so duplicates never straddle it.
        split = split_by_md5.get(md5)
        duplicate = split is not None
        if split is None:
            split = known_splits.get(md5) or recipe.split_for(path, md5)
            split_by_md5[md5] = split
        if ps.n_rows == 1 and content_labels is None and lines is None:
            # The common case (one image per file): no per-row loop.
            samples.append(
                _Sample(
                    path,
                    md5,
                    path_label,
                    split,
                    ps.segment_id,
                    ps.row,
                    size,
                    mtime,
                    duplicate,
                    None,
                    0,
                )
            )
            continue
        # Table rows have a split each, by their row key, unless a group_regex on the path
        # puts the whole file in its group's split.
        row_splits = _row_splits(ps) if lines is not None else None
        if row_splits is not None and recipe.split_key(path, md5) != md5:
            row_splits = None
        for k in range(ps.n_rows):
            copy = k % per_sample
            row_split = split if row_splits is None else row_splits[k]
            if copy and row_split == "val":
                continue  # augmented copies are for training only
            samples.append(
                _Sample(
                    path,
                    md5,
                    content_labels[k] if content_labels else path_label,
                    row_split,
                    ps.segment_id,
                    ps.row + k,
                    size,
                    mtime,
                    duplicate,
                    lines[k] if lines else None,
                    copy,
                )
            )
    return samples, invalid


def _row_splits(ps: _Processed) -> list[str] | None:
    """The per-row splits process recorded for a table's rows (None: the file's split)."""
    text = json.loads(ps.stats).get("splits") if ps.stats else None
    if not text or len(text) != ps.n_rows:
        return None
    return ["val" if c == "v" else "train" for c in text]


def _version_paths(
    session: Session, version_id: str
) -> tuple[dict[str, tuple[str, str | None]], dict[str, str]]:
    """{path: (md5, label)} of a version's samples (its first row per path), and {md5: split}."""
    # A chunked version: its leaves' entries (shared rows), at leaf start + place in the leaf.
    rows = driver_rows(
        session,
        "SELECT vc.start + ce.pos, ce.path, ce.md5, ce.label, ce.split FROM version_chunks vc "
        "JOIN chunk_entries ce ON ce.chunk_hash = vc.chunk_hash WHERE vc.version_id = ?",
        (version_id,),
    )
    if not rows:  # format 1: a row per sample
        rows = driver_rows(
            session,
            "SELECT idx, path, md5, label, split FROM version_samples WHERE version_id = ?",
            (version_id,),
        )
    rows.sort()  # by idx (unique per version): cheaper here than SQLite's temp B-tree
    out: dict[str, tuple[str, str | None]] = {}
    splits: dict[str, str] = {}
    for _idx, path, md5, label, split in rows:
        if path not in out:
            out[path] = (md5, label)
        splits[md5] = split
    return out, splits


def path_diff(old: dict[str, tuple], new: dict[str, tuple]) -> dict[str, list[str]]:
    """added / removed / changed lake paths between two {path: (md5, label)} maps."""
    return {
        "added": sorted(set(new) - set(old)),
        "removed": sorted(set(old) - set(new)),
        "changed": sorted(p for p in set(old) & set(new) if old[p] != new[p]),
    }


def _diff(parent_rows: dict, samples: list[_Sample]) -> dict[str, int]:
    """The counts of path_diff(parent_rows, {path: (md5, label)}), without building the lists."""
    new: dict[str, tuple] = {}
    for s in samples:
        if s.path not in new:
            new[s.path] = (s.md5, s.label)
    added = changed = 0
    get = parent_rows.get
    for path, value in new.items():
        old = get(path)
        if old is None:
            added += 1
        elif old != value:
            changed += 1
    return {"added": added, "removed": len(parent_rows) - (len(new) - added), "changed": changed}

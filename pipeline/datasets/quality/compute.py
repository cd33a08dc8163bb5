"""The quality report of a version, at commit (docs/quality.md).

Everything here reads what the commit already holds in memory (its samples, invalid files,
the parent's store row) plus the near-duplicate edges ``neardup.prepare`` returned: no sample
is decoded or hashed again, so a rebuild that adds nothing computes nothing new. Table column
statistics are the exception: they read the version's table rows (tables are small beside
images; the cost is one memory-mapped pass).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from sqlalchemy import select

from pipeline.datasets.quality.neardup import NearDupState, _segment_x, _take
from pipeline.datasets.quality.neargroups import NearGroups, keys_in, merged_entry
from pipeline.datasets.quality.report import (
    LEAK_LABEL_CONFLICT,
    LEAK_NEAR_DUPLICATE,
    Drift,
    ExactDuplicates,
    Invalid,
    LabelConflicts,
    Leaks,
    NearDuplicates,
    QualityReport,
    capped,
)
from pipeline.metadata.datasets import DatasetVersion, VersionInvalid

PATHS_CAP = 20  # paths listed per group


class SamplesView:
    """What the report reads of a version, from its samples in memory (the full commit)."""

    def __init__(self, samples: list) -> None:
        self.samples = samples
        self.count = len(samples)
        self.train = sum(s.split == "train" for s in samples)
        self.paths = len({s.path for s in samples})

    def contents(self) -> set[str]:
        return {s.md5 for s in self.samples}  # an augmented copy has its original's md5

    def present(self, keys: set[str]) -> set[str]:
        """Those of ``keys`` (contents) the version holds."""
        return keys & self.contents()

    def duplicated(self) -> set[str]:
        return {s.md5 for s in self.samples if s.duplicate}

    def members(self, wanted: set[str]) -> dict[str, list]:
        """The samples (augmented copies left out) of each content in ``wanted``."""
        by_md5: dict[str, list] = defaultdict(list)
        if wanted:
            for s in self.samples:
                if not s.copy and s.md5 in wanted:
                    by_md5[s.md5].append(s)
        return by_md5

    def plain_classes(self) -> dict[str, dict[str, int]]:
        return _class_counts(self.samples)


def compute_report(
    state: NearDupState,
    recipe,
    view,
    invalid: list[dict],
    parent: DatasetVersion | None,
    session,
    data_root: Path,
    processed: dict,
) -> QualityReport:
    """``view``: a SamplesView, or the delta commit's view of its head and changes (the same
    answers, build/delta.py)."""
    report = QualityReport()
    report.samples = view.count
    report.train = view.train
    report.val = report.samples - report.train
    report.files = view.paths + len({r["path"] for r in invalid})
    report.invalid = _invalid(invalid, parent, session)
    # The duplicated contents need their samples listed (the near-duplicate groups ask for
    # theirs: _near).
    duplicated = view.duplicated()
    by_md5 = defaultdict(list, view.members(duplicated))
    report.exact_duplicates = _exact({m: by_md5[m] for m in duplicated})
    report.label_conflicts, conflict_leaks = _label_conflicts(
        {m: by_md5[m] for m in duplicated}, state.kind
    )
    report.near_duplicates, near_leaks = _near(state, view, by_md5, processed)
    listed = near_leaks + conflict_leaks
    report.leaks = Leaks(
        count=len(listed),
        cross_split_near_duplicates=len(near_leaks),
        label_conflicts_across_splits=len(conflict_leaks),
        listed=capped(listed),
    )
    report.drift = _drift(recipe, view, invalid, parent, data_root)
    return report


def _invalid(invalid: list[dict], parent, session) -> Invalid:
    before: set[tuple] = set()
    if parent is not None:
        before = set(
            session.execute(
                select(VersionInvalid.path, VersionInvalid.line).where(
                    VersionInvalid.version_id == parent.version_id
                )
            ).all()
        )
    new = sum(1 for r in invalid if (r["path"], r.get("line")) not in before)
    files = [
        {"path": r["path"], "reason": r["reason"], **({"line": r["line"]} if r.get("line") else {})}
        for r in invalid
    ]
    return Invalid(count=len(invalid), new_since_parent=new, files=capped(files))


def _paths(group: list) -> list[str]:
    return sorted({s.path for s in group})


def _exact(by_md5: dict[str, list]) -> ExactDuplicates:
    groups = [(md5, _paths(g)) for md5, g in by_md5.items() if len(_paths(g)) > 1]
    groups.sort(key=lambda mg: (-len(mg[1]), mg[0]))
    return ExactDuplicates(
        groups=len(groups),
        samples=sum(len(p) for _, p in groups),
        listed=capped([{"md5": m, "paths": p[:PATHS_CAP]} for m, p in groups]),
    )


def _label_conflicts(by_md5: dict[str, list], kind: str) -> tuple[LabelConflicts, list[dict]]:
    listed, leaks = [], []
    for md5, group in sorted(by_md5.items()):
        if kind == "table":
            continue  # a table file's rows carry different labels by design; see _near
        labels = sorted({s.label for s in group if s.label is not None})
        if len(labels) < 2:
            continue
        splits = sorted({s.split for s in group})
        entry = {"md5": md5, "paths": _paths(group)[:PATHS_CAP], "labels": labels}
        listed.append({**entry, "splits": splits})
        if len(splits) > 1:
            leaks.append({"kind": LEAK_LABEL_CONFLICT, "paths": entry["paths"], "splits": splits})
    return LabelConflicts(count=len(listed), listed=capped(listed)), leaks


def _near(state: NearDupState, view, known, processed) -> tuple[NearDuplicates, list[dict]]:
    """The groups of the index's pairs among the contents the version holds: grown from the
    head's (a delta commit whose head has them: neargroups.py), else found in the whole graph.
    ``known``: samples of contents already asked for (the duplicated ones)."""
    out = NearDuplicates(threshold=state.threshold, kind=state.kind, new_samples=state.new_samples)
    if state.kind == "none":
        return out, []
    groups = _grown(state, view) if state.growth is not None else None
    if groups is not None:
        entries = groups.entries
    else:
        found = _whole_graph(state, view, known, processed)
        entries = [entry for _keys, entry, _splits in found]
        # Kept for the next delta commit (images; a group left out of the report is not
        # a group the next commit could grow exactly: then none is kept).
        complete = state.kind == "image" and all(s is not None for _k, _e, s in found)
        groups = NearGroups.of(state.threshold, found) if complete else None
    state.groups = groups
    leaks = [
        {"kind": LEAK_NEAR_DUPLICATE, "paths": e["paths"], "splits": e["splits"]}
        for e in entries
        if len(e["splits"]) > 1
    ]
    ordered = sorted(entries, key=lambda g: (-g["size"], g["paths"]))
    out.groups = len(ordered)
    out.samples = sum(g["size"] for g in ordered)
    out.listed = capped(ordered)
    return out, leaks


def _entry(kind: str, group: list) -> dict:
    """A group's report entry from its samples."""
    entry = {"paths": _paths(group)[:PATHS_CAP], "splits": sorted({s.split for s in group})}
    entry["size"] = len(group)
    if kind == "table":
        entry["lines"] = sorted({(s.path, s.line) for s in group})[:PATHS_CAP]
        entry["labels"] = sorted({str(s.label) for s in group if s.label is not None})
    return entry


def _whole_graph(state: NearDupState, view, known, processed) -> list[tuple]:
    """(keys, entry, each key's split or None) of every group, in order of smallest key."""
    graph = state.graph()
    present = view.present(graph.contents())
    by_md5 = {m: known[m] for m in present if m in known}
    by_md5.update(view.members(present - by_md5.keys()))
    if state.kind == "image":
        members = by_md5
    else:  # a table row's key is md5:<row within its file>
        members = defaultdict(list)
        for md5, group in by_md5.items():
            for s in group:
                members[f"{md5}:{s.row - processed[md5].row}"].append(s)
    out = []
    for keys in graph.groups(present):
        group = [s for k in keys for s in members.get(k, ())]
        held = [k for k in keys if k in members]
        if len(held) < 2:
            continue
        splits = [members[k][0].split for k in keys] if len(held) == len(keys) else None
        out.append((keys, _entry(state.kind, group), splits))
    return out


def _grown(state: NearDupState, view) -> NearGroups | None:
    """The version's groups from the head's and this commit's new edges (state.growth); None
    when a content the growth counted on has no sample in the version (the whole graph then
    decides)."""
    growth = state.growth
    head = growth.head
    touched_gids = set(head.group[keys_in(head.keys, growth.touched)].tolist())
    head_members = head.members() if touched_gids else []
    wanted = {k for comp in growth.components for k in comp.extra}
    for comp in growth.components:
        if touched_gids.intersection(comp.old):
            wanted.update(k.decode() for gid in comp.old for k in head_members[gid])
    for gid in touched_gids:
        wanted.update(k.decode() for k in head_members[gid])
    members = view.members(wanted)
    if wanted - members.keys():
        return None

    def samples(keys) -> list:
        return [s for k in sorted(keys) for s in members[k]]

    entries: dict[int, dict] = {}
    for ci, comp in enumerate(growth.components):
        if touched_gids.intersection(comp.old):
            keys = [k.decode() for gid in comp.old for k in head_members[gid]] + comp.extra
            entries[ci] = _entry(state.kind, samples(keys))
        else:
            parts = [head.entries[gid] for gid in comp.old]
            entries[ci] = merged_entry([*parts, _entry(state.kind, samples(comp.extra))], PATHS_CAP)
    in_components = {gid for comp in growth.components for gid in comp.old}
    replaced = {
        gid: _entry(state.kind, samples(k.decode() for k in head_members[gid]))
        for gid in touched_gids - in_components
    }
    extra_splits = {k: members[k][0].split for comp in growth.components for k in comp.extra}
    return growth.apply(entries, extra_splits, replaced)


def _class_counts(samples) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {"train": {}, "val": {}}
    # One Counter over (split, label): a third of a per-sample dict update loop's time.
    tally = Counter((s.split, s.label) for s in samples if s.label is not None and not s.copy)
    for (split, label), n in tally.items():
        per = counts.setdefault(split, {})
        per[str(label)] = per.get(str(label), 0) + n
    return counts


def _parent_manifest(parent) -> dict:
    try:
        return json.loads(parent.manifest) if parent is not None else {}
    except (TypeError, ValueError):
        return {}


def _drift(recipe, view, invalid, parent, data_root: Path) -> Drift:
    pm = _parent_manifest(parent)
    drift = Drift(parent=pm.get("tag") if pm else None)
    before_q = (parent.quality or {}).get("drift", {}) if parent is not None else {}
    if recipe.task != "regression":
        now = view.plain_classes()
        before = {
            split: {label: v["count"] for label, v in per.items()}
            for split, per in (before_q.get("per_split") or {}).items()
        }
        if not before and pm:  # a parent without a report: its manifest's class counts
            per_split = pm.get("counts", {}).get("per_split", {})
            before = {sp: dict(per_split.get(sp, {}).get("classes", {})) for sp in ("train", "val")}
        for split in ("train", "val"):
            labels = sorted(set(now.get(split, {})) | set(before.get(split, {})))
            drift.per_split[split] = {
                label: {
                    "count": now.get(split, {}).get(label, 0),
                    "change": now.get(split, {}).get(label, 0)
                    - before.get(split, {}).get(label, 0),
                }
                for label in labels
            }
        total_now = _totals(now)
        total_before = _totals(before)
        if parent is not None:
            drift.new_classes = sorted(set(total_now) - set(total_before))
            drift.vanished_classes = sorted(set(total_before) - set(total_now))
            drift.label_tv_distance = round(_tv(total_now, total_before), 6)
    if recipe.modality == "table":
        drift.columns, drift.constant_columns = _columns(
            recipe, view.samples, invalid, data_root, before_q.get("columns") or {}
        )
    return drift


def _totals(counts: dict[str, dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for per in counts.values():
        for label, n in per.items():
            out[label] = out.get(label, 0) + n
    return out


def _tv(p: dict[str, int], q: dict[str, int]) -> float:
    """Total variation distance of two label histograms (0: same shares, 1: disjoint)."""
    sp, sq = sum(p.values()), sum(q.values())
    if not sp or not sq:
        return 0.0 if sp == sq else 1.0
    return 0.5 * sum(abs(p.get(k, 0) / sp - q.get(k, 0) / sq) for k in set(p) | set(q))


_EMPTY = re.compile(r"column '(.+?)' is empty")


def _columns(recipe, samples, invalid, data_root: Path, before: dict) -> tuple[dict, list[str]]:
    """Per feature column: min/max over the version's rows (beside the parent's), constant or
    not, and the missing rate: a row with an empty feature is left out of the version (an
    invalid line naming the column), so the rate is those lines over all the lines read."""
    empty: dict[str, int] = defaultdict(int)
    for r in invalid:
        m = _EMPTY.search(r.get("reason") or "")
        if m:
            empty[m.group(1)] += 1
    lines = sum(1 for s in samples if not s.copy) + sum(1 for r in invalid if r.get("line"))
    names = list(getattr(recipe.table, "feature_columns", None) or [])
    by_segment: dict[str, list[int]] = defaultdict(list)
    for s in samples:
        if not s.copy:
            by_segment[s.segment_id].append(s.row)
    parts = [
        np.asarray(_take(_segment_x(data_root, recipe, seg), np.asarray(rows)), dtype=np.float64)
        for seg, rows in sorted(by_segment.items())
    ]
    if not parts:
        return {}, []
    x = np.concatenate([p.reshape(len(p), -1) for p in parts])
    if len(names) != x.shape[1]:
        names = [f"col{i}" for i in range(x.shape[1])]
    out: dict[str, dict] = {}
    constant: list[str] = []
    for i, name in enumerate(names):
        col = x[np.isfinite(x[:, i]), i]
        lo = float(col.min()) if len(col) else None
        hi = float(col.max()) if len(col) else None
        entry = {
            "missing_rate": round(empty.get(name, 0) / lines, 6) if lines else 0.0,
            "min": lo,
            "max": hi,
            "constant": bool(len(col) and lo == hi),
            "parent_min": (before.get(name) or {}).get("min"),
            "parent_max": (before.get(name) or {}).get("max"),
        }
        out[name] = entry
        if entry["constant"]:
            constant.append(name)
    return out, constant

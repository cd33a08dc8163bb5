"""Leaf summaries: what a version's manifest counts, per leaf, so that a version's counts and
mean/std are sums over its leaves (migration 0011, ``chunks.summary``).

A leaf's summary is a function of its bytes: its samples (path, md5, label, split, segment,
copy, duplicate) are in its metadata part, and their pixel sums are their contents' processed
stats under the recipe its segments name. So it is computed once, when the leaf is written (or,
for a leaf recorded before summaries, the first time a commit needs it), and every version that
holds the leaf reads it back. Both the full commit and the delta commit (delta.py) take mean/std
from the leaves' sums, summed in leaf order, so the two give the same figures to the bit.

The per-path counts (files, duplicate files) are per leaf; a path whose rows a cut split lies
in two adjacent leaves (one's last path is the next one's first) and is counted once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy.orm import Session

from pipeline.metadata.driver import driver_rows

log = logging.getLogger("laketrain.build")
_IN_BATCH = 900
_SPLITS = ("train", "val")


@dataclass
class LeafSummary:
    n: int
    split_n: dict[str, int]
    classes: dict[str, dict[str, int]]  # labelled samples per split, augmented copies included
    plain_classes: dict[str, dict[str, int]]  # the same without copies (the drift report's)
    files: int  # distinct paths
    dup_files: int  # distinct paths whose samples are duplicates of an earlier path's content
    first: str
    last: str
    last_dup: bool
    segments: list[str]
    dup_md5s: list[str]  # contents with a duplicate path in this leaf
    train_sum: list[float] = field(default_factory=list)  # weighted pixel sums (empty: none)
    train_sumsq: list[float] = field(default_factory=list)
    train_count: float = 0.0

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LeafSummary:
        return cls(**json.loads(text))


def summarize(samples: Sequence, processed: dict) -> LeafSummary:
    """The summary of one leaf's samples; ``processed`` holds (md5 -> _Processed) at least the
    contents of its train samples (their stats)."""
    split_n = {"train": 0, "val": 0}
    classes: dict[str, dict[str, int]] = {"train": {}, "val": {}}
    plain: dict[str, dict[str, int]] = {"train": {}, "val": {}}
    paths: set[str] = set()
    dup_paths: set[str] = set()
    segments: set[str] = set()
    dup_md5s: set[str] = set()
    weights: list[float] = []
    texts: list[str] = []
    for s in samples:
        split_n[s.split] += 1
        paths.add(s.path)
        segments.add(s.segment_id)
        if s.duplicate:
            dup_paths.add(s.path)
            dup_md5s.add(s.md5)
        if s.label is not None:
            per = classes[s.split]
            per[s.label] = per.get(s.label, 0) + 1
            if not s.copy:
                per = plain[s.split]
                per[s.label] = per.get(s.label, 0) + 1
        if s.split == "train":
            ps = processed.get(s.md5)
            if ps is not None and ps.stats:
                weights.append(1.0 / ps.n_rows)
                texts.append(ps.stats)
    out = LeafSummary(
        n=len(samples),
        split_n=split_n,
        classes=classes,
        plain_classes=plain,
        files=len(paths),
        dup_files=len(dup_paths),
        first=samples[0].path if samples else "",
        last=samples[-1].path if samples else "",
        last_dup=bool(samples[-1].duplicate) if samples else False,
        segments=sorted(segments),
        dup_md5s=sorted(dup_md5s),
    )
    # One JSON document for all stats: one C-level parse instead of one call per content.
    parsed = json.loads("[" + ",".join(texts) + "]")
    keep = [i for i, st in enumerate(parsed) if st.get("count")]
    if keep:
        w = np.asarray([weights[i] for i in keep])
        out.train_sum = (w @ np.asarray([parsed[i]["sum"] for i in keep], np.float64)).tolist()
        out.train_sumsq = (w @ np.asarray([parsed[i]["sumsq"] for i in keep], np.float64)).tolist()
        out.train_count = float(w @ np.asarray([parsed[i]["count"] for i in keep], np.float64))
    return out


def stored(session: Session, hashes: Sequence[str]) -> dict[str, LeafSummary]:
    """The summaries the store holds for these leaves (a leaf recorded before 0011 has none)."""
    out: dict[str, LeafSummary] = {}
    unique = sorted(set(hashes))
    for i in range(0, len(unique), _IN_BATCH):
        part = unique[i : i + _IN_BATCH]
        rows = driver_rows(
            session,
            "SELECT hash, summary FROM chunks WHERE summary IS NOT NULL "
            f"AND hash IN ({', '.join('?' * len(part))})",
            tuple(part),
        )
        try:
            # The batch as one JSON array: one C-level parse instead of one json.loads per
            # leaf (~8,000 leaves at a million samples, on every delta commit).
            # A value holding two documents makes the counts differ: zip(strict) raises.
            parsed = json.loads("[" + ",".join(text for _h, text in rows) + "]")
            out.update((h, LeafSummary(**d)) for (h, _t), d in zip(rows, parsed, strict=True))
        except (ValueError, TypeError):
            for h, text in rows:  # one value is damaged: find it, keep the others
                try:
                    out[h] = LeafSummary.from_json(text)
                except (ValueError, TypeError) as exc:
                    # A damaged value is no summary: computed again from the leaf's metadata
                    # part (as for a leaf recorded before 0011) and written over (store_missing).
                    log.warning(
                        "leaf %s: unreadable summary in the store (%s); recomputing", h, exc
                    )
    return out


def store_missing(session: Session, summaries: dict[str, LeafSummary]) -> None:
    """Write the summaries of leaves the store holds without a readable one (recorded before
    migration 0011, or damaged). A summary is a function of the leaf's bytes: writing it over
    a concurrent writer's is writing the same value."""
    from pipeline.metadata.driver import driver_executemany

    if summaries:
        driver_executemany(
            session,
            "UPDATE chunks SET summary = ? WHERE hash = ?",
            [(s.to_json(), h) for h, s in sorted(summaries.items())],
            batch=5000,
        )


@dataclass
class Totals:
    """A version's counts, summed over its leaves in order."""

    samples: int
    split_n: dict[str, int]
    classes: dict[str, dict[str, int]]
    plain_classes: dict[str, dict[str, int]]
    files: int
    dup_files: int
    segments: list[str]
    dup_md5s: set[str]
    mean: list[float]
    std: list[float]


def _add(into: dict[str, dict[str, int]], more: dict[str, dict[str, int]]) -> None:
    for split in _SPLITS:
        per = into[split]
        for label, n in more.get(split, {}).items():
            per[label] = per.get(label, 0) + n


def totals(leaves: Sequence[LeafSummary]) -> Totals:
    split_n = {"train": 0, "val": 0}
    classes: dict[str, dict[str, int]] = {"train": {}, "val": {}}
    plain: dict[str, dict[str, int]] = {"train": {}, "val": {}}
    files = dup_files = 0
    segments: set[str] = set()
    dup_md5s: set[str] = set()
    previous: LeafSummary | None = None
    for leaf in leaves:
        for split in _SPLITS:
            split_n[split] += leaf.split_n[split]
        _add(classes, leaf.classes)
        _add(plain, leaf.plain_classes)
        files += leaf.files
        dup_files += leaf.dup_files
        if previous is not None and leaf.n and previous.n and previous.last == leaf.first:
            # One path on both sides of a cut (a table's rows, augmented copies): counted once.
            files -= 1
            dup_files -= int(previous.last_dup)
        segments.update(leaf.segments)
        dup_md5s.update(leaf.dup_md5s)
        if leaf.n:
            previous = leaf
    mean, std = mean_std(leaves)
    return Totals(
        samples=sum(leaf.n for leaf in leaves),
        split_n=split_n,
        classes={sp: dict(sorted(classes[sp].items())) for sp in _SPLITS},
        plain_classes=plain,
        files=files,
        dup_files=dup_files,
        segments=sorted(segments),
        dup_md5s=dup_md5s,
        mean=mean,
        std=std,
    )


def mean_std(leaves: Sequence[LeafSummary]) -> tuple[list[float], list[float]]:
    """Per-channel mean/std of the train split (0..255 for images) from the leaves' sums, in
    leaf order (the same figures whichever commit computed them)."""
    with_stats = [leaf for leaf in leaves if leaf.train_count]
    if not with_stats:
        return [], []
    total = np.sum(np.asarray([leaf.train_sum for leaf in with_stats], np.float64), axis=0)
    total_sq = np.sum(np.asarray([leaf.train_sumsq for leaf in with_stats], np.float64), axis=0)
    count = float(np.sum(np.asarray([leaf.train_count for leaf in with_stats], np.float64)))
    if count == 0:
        return [], []
    mean = total / count
    var = np.maximum(total_sq / count - mean * mean, 0.0)
    return [round(float(v), 6) for v in mean], [round(float(v), 6) for v in np.sqrt(var)]


@dataclass
class TreeSummaries:
    ordered: list[LeafSummary]  # one per leaf of the tree, in order
    computed: dict[str, LeafSummary]  # those computed here (to store: the store lacked them)


def for_tree(session: Session, tree, processed: dict, load=None) -> TreeSummaries:
    """The summary of every leaf of a tree just written: the store's, or computed from the
    leaf's samples (``tree.parts``; else ``load(hash)`` -> (samples, processed), for a leaf
    the commit did not hold in memory, recorded before summaries)."""
    have = stored(session, [leaf.hash for leaf in tree.leaves])
    computed: dict[str, LeafSummary] = {}
    ordered: list[LeafSummary] = []
    for leaf in tree.leaves:
        summary = have.get(leaf.hash) or computed.get(leaf.hash)
        if summary is None:
            part = tree.parts.get(leaf.hash)
            if part is not None:
                summary = summarize(part, processed)
            elif load is not None:
                summary = summarize(*load(leaf.hash))
            else:
                raise LookupError(f"leaf {leaf.hash}: no summary and no samples to compute it")
            computed[leaf.hash] = summary
        ordered.append(summary)
    return TreeSummaries(ordered, computed)

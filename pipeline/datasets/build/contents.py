"""The manifest's contents: counts, classes, segments, mean/std."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import select

from pipeline.datasets import manifest as mf
from pipeline.datasets.build.values import (
    _Processed,
)
from pipeline.datasets.dataroot import work_root
from pipeline.datasets.segments import (
    read_info,
)
from pipeline.metadata.base import utcnow
from pipeline.metadata.datasets import (
    Segment,
)


@dataclass
class Counts:
    """What a manifest counts of a version's samples: from the samples themselves (counts_of)
    or summed over its leaves' summaries (counts_from, the delta commit)."""

    samples: int
    split_n: dict[str, int]
    split_counts: dict[str, dict[str, int]]  # labelled samples per split and label
    files: int
    duplicates: int  # files whose content an earlier file has
    segments: list[str]
    first_segment: str | None
    train_weights: dict[str, int] = field(default_factory=dict)  # md5 -> train samples


def counts_of(samples) -> Counts:
    # One pass over the samples for every count the manifest holds (this runs per sample on
    # every full commit): labels, segments, per-split class counts, train weight per content.
    seg_set: set[str] = set()
    paths: set[str] = set()
    dup_paths: set[str] = set()
    split_n = {"train": 0, "val": 0}
    split_counts: dict[str, dict[str, int]] = {"train": {}, "val": {}}
    train_weights: dict[str, int] = {}
    for s in samples:
        seg_set.add(s.segment_id)
        paths.add(s.path)
        if s.duplicate:
            dup_paths.add(s.path)
        split_n[s.split] += 1
        if s.label is not None:  # unlabelled samples count in "samples" only
            counts = split_counts[s.split]
            counts[s.label] = counts.get(s.label, 0) + 1
        if s.split == "train":
            train_weights[s.md5] = train_weights.get(s.md5, 0) + 1
    return Counts(
        samples=len(samples),
        split_n=split_n,
        split_counts=split_counts,
        files=len(paths),
        duplicates=len(dup_paths),
        segments=sorted(seg_set),
        first_segment=samples[0].segment_id if samples else None,
        train_weights=train_weights,
    )


def _manifest(
    dataset,
    recipe,
    version_id,
    parent,
    counts: Counts,
    invalid,
    diff,
    session,
    format_version: int = mf.FORMAT_VERSION,
    mean_std: tuple[list[float], list[float]] = ([], []),
) -> dict:
    """Every field of the manifest but a format-2 version's ``chunks`` (the writer adds it, and
    its mean/std, summed over the leaves: build/summaries.py)."""
    from pipeline.datasets.preprocess import sample_dtype, sample_shape

    created = utcnow()
    split_n, split_counts = counts.split_n, counts.split_counts
    target = None
    if recipe.task == "regression":
        # Numeric targets: no classes; a histogram per split instead (pipeline/datasets/targets.py).
        from pipeline.datasets.targets import target_histogram

        target = target_histogram(
            {
                split: [float(v) for v, n in per.items() for _ in range(n)]
                for split, per in split_counts.items()
            }
        )
        split_counts = {"train": {}, "val": {}}
    classes = sorted(set(split_counts["train"]) | set(split_counts["val"]))
    seg_ids = counts.segments
    seg_rows = (
        {
            s.segment_id: s
            for s in session.scalars(select(Segment).where(Segment.segment_id.in_(seg_ids)))
        }
        if seg_ids
        else {}
    )
    per_split = {
        split: {"samples": split_n[split], "classes": dict(sorted(split_counts[split].items()))}
        for split in ("train", "val")
    }
    mean, std = mean_std
    shape = list(sample_shape(recipe))
    if counts.first_segment is not None and -1 in shape:
        info = seg_rows.get(counts.first_segment)
        shape = _segment_shape(info) or shape
    extra = {"task": "regression", "target": target} if target is not None else {}
    return {
        **extra,
        "format_version": format_version,
        "id": version_id,
        "short_id": version_id[:8],
        "tag": mf.tag_for(dataset, version_id, created),
        "dataset": dataset,
        "parent": parent.version_id if parent else None,
        "recipe": recipe.model_dump(mode="json"),
        "recipe_hash": recipe.recipe_hash,
        "modality": recipe.modality,
        "format": recipe.format,
        "sample_shape": shape,
        "sample_dtype": str(sample_dtype(recipe)),
        "classes": classes,
        "counts": {
            "samples": counts.samples,
            "train": per_split["train"]["samples"],
            "val": per_split["val"]["samples"],
            "files": counts.files,
            "duplicates": counts.duplicates,
            "invalid": len(invalid),
            "per_split": per_split,
        },
        "diff": diff,
        "segments": [
            {
                "id": sid,
                "path": seg_rows[sid].path,
                "n_rows": seg_rows[sid].n_rows,
                "size_bytes": seg_rows[sid].size_bytes,
                "sha256": seg_rows[sid].sha256,
            }
            for sid in seg_ids
        ],
        "mean": mean,
        "std": std,
        "files": {
            "metadata": mf.METADATA,
            "invalid": mf.INVALID,
            "index_segment": mf.INDEX_SEGMENT,
            "index_row": mf.INDEX_ROW,
            "labels": mf.LABELS,
            "splits": mf.SPLITS,
        }
        if format_version == 1
        else {"parts": mf.PARTS, "invalid": mf.INVALID},
        "created_at": created.isoformat(),
    }


def _segment_shape(seg: Segment | None) -> list[int] | None:
    if seg is None:
        return None
    try:
        return read_info(work_root() / seg.path)["x_shape"]
    except (OSError, KeyError, ValueError):
        return None


def _train_mean_std(
    weights: dict[str, int], processed: dict[str, _Processed]
) -> tuple[list[float], list[float]]:
    """Per-channel mean/std of the train split (0..255 for images), from the per-content sums
    recorded by process: weighted by how many train samples (``weights``) each content gives."""
    scales: list[float] = []
    texts: list[str] = []
    for md5, n in weights.items():
        ps = processed[md5]
        if ps.stats:
            # Stats cover all n_rows of the content; scale to the rows this version uses.
            scales.append(n / ps.n_rows)
            texts.append(ps.stats)
    # One JSON document for all contents: one C-level parse instead of one call per content.
    parsed = json.loads("[" + ",".join(texts) + "]")
    keep = [i for i, st in enumerate(parsed) if st.get("count")]
    if not keep:
        return [], []
    w = np.asarray([scales[i] for i in keep])
    total = w @ np.asarray([parsed[i]["sum"] for i in keep], dtype=np.float64)
    total_sq = w @ np.asarray([parsed[i]["sumsq"] for i in keep], dtype=np.float64)
    count = float(w @ np.asarray([parsed[i]["count"] for i in keep], dtype=np.float64))
    if count == 0:
        return [], []
    mean = total / count
    var = np.maximum(total_sq / count - mean * mean, 0.0)
    return [round(float(v), 6) for v in mean], [round(float(v), 6) for v in np.sqrt(var)]


def counts_from(totals) -> Counts:
    """The Counts of a version summed over its leaves (summaries.Totals)."""
    return Counts(
        samples=totals.samples,
        split_n=dict(totals.split_n),
        split_counts={split: dict(per) for split, per in totals.classes.items()},
        files=totals.files,
        duplicates=totals.dup_files,
        segments=list(totals.segments),
        first_segment=totals.segments[0] if totals.segments else None,
    )

"""Regression targets in a version's manifest: a histogram and summary per split.

A regression version (recipe ``task = "regression"``) has no classes: its labels are numbers
(stored as the text of their float32 value, like a class name). The manifest carries
``target`` instead, computed once at commit, so that the UI and ``laketrain show`` draw the
target's distribution without reading a single sample:

    {"bins": [edge_0, ..., edge_B],            # B equal-width bins over all samples' targets
     "train": {"n", "counts": [B ints], "min", "max", "mean", "std"},
     "val": {...}}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

BINS = 20
REGRESSION = "regression"


def is_regression(manifest: Mapping[str, Any]) -> bool:
    return manifest.get("task") == REGRESSION


def target_histogram(by_split: Mapping[str, Iterable[float]], bins: int = BINS) -> dict[str, Any]:
    """The manifest's ``target`` from each split's targets; the bins span both splits so that
    train and val are drawn on one axis."""
    values = {k: np.asarray(list(v), dtype=np.float64) for k, v in by_split.items()}
    every = np.concatenate([v for v in values.values()]) if values else np.zeros(0)
    if every.size:
        lo, hi = float(every.min()), float(every.max())
        if lo == hi:  # one value: one bin around it
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, bins + 1)
    else:
        edges = np.zeros(0)
    out: dict[str, Any] = {"bins": [_r(e) for e in edges]}
    for split, v in values.items():
        summary: dict[str, Any] = {"n": int(v.size)}
        if v.size and edges.size:
            counts, _ = np.histogram(v, bins=edges)
            summary.update(
                counts=[int(c) for c in counts],
                min=_r(v.min()),
                max=_r(v.max()),
                mean=_r(v.mean()),
                std=_r(v.std()),
            )
        else:
            summary["counts"] = [0] * max(len(edges) - 1, 0)
        out[split] = summary
    return out


def _r(x: float) -> float:
    return round(float(x), 6)


def histogram_rows(target: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per bin: ``{"label": "[lo, hi)", "train", "val", "total"}`` (the last bin is
    closed), the shape of the UI's class rows so one chart draws either."""
    edges = target.get("bins") or []
    train = (target.get("train") or {}).get("counts") or [0] * max(len(edges) - 1, 0)
    val = (target.get("val") or {}).get("counts") or [0] * max(len(edges) - 1, 0)
    rows = []
    for i in range(max(len(edges) - 1, 0)):
        close = "]" if i == len(edges) - 2 else ")"
        rows.append(
            {
                "label": f"[{edges[i]:.4g}, {edges[i + 1]:.4g}{close}",
                "train": int(train[i]),
                "val": int(val[i]),
                "total": int(train[i]) + int(val[i]),
            }
        )
    return rows

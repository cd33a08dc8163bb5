"""A chunked version's index, assembled from its leaves in numpy at open time.

Each leaf's .idx holds its own small tables (the segment ids and labels it uses) and arrays
into them; here every leaf's tables are concatenated and mapped onto the version's sorted
segment list and classes with one np.searchsorted each, then every array is concatenated:
a handful of numpy calls per leaf and none per sample (~8,000 leaves for a million samples).
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path

import numpy as np

from pipeline.datasets.chunkread import node_indexes
from pipeline.datasets.chunks import ChunkError
from pipeline.datasets.manifest import ManifestError


def _map_onto(version_table: list[str], leaf_values: list[str], what: str) -> np.ndarray:
    """Positions of ``leaf_values`` in the sorted ``version_table``; an error naming the first
    value the version does not list (a leaf that does not belong to this manifest)."""
    table = np.asarray(version_table, dtype=str)
    values = np.asarray(leaf_values, dtype=str)
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    if len(table) and np.any(table[1:] < table[:-1]):
        order = np.argsort(table, kind="stable")
        pos = order[np.clip(np.searchsorted(table[order], values), 0, len(table) - 1)]
    else:
        pos = np.clip(np.searchsorted(table, values), 0, max(len(table) - 1, 0))
    bad = np.flatnonzero(table[pos] != values) if len(table) else np.arange(len(values))
    if len(bad):
        raise ManifestError(
            f"a leaf of this version names {what} {values[bad[0]]!r}, which its manifest does not list"
        )
    return pos.astype(np.int64)


def assemble_index(
    data_root: Path, manifest: dict
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(segment position int32, row int64, label int64 (-1 = none), is_val bool, md5 S32) of
    every sample of a format-2 version, in version order. A regression version's label is its
    float32 target (NaN = none)."""
    section = manifest["chunks"]
    # Node by node: a node's pack, when the data root has it, holds all its leaves' indexes.
    parts = [
        idx for node in section["nodes"] for _leaf, idx in node_indexes(data_root, node["hash"])
    ]
    if len(parts) != section["leaves"]:
        raise ChunkError(
            f"the chunk tree has {len(parts)} leaves, its manifest {section['leaves']}"
        )
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return (
            empty.astype(np.int32),
            empty,
            empty.astype(np.float32) if manifest.get("task") == "regression" else empty.copy(),
            empty.astype(bool),
            np.zeros(0, dtype="S32"),
        )
    counts = np.asarray([p["n"] for p in parts], dtype=np.int64)
    seg_sizes = np.asarray([len(p["segments"]) for p in parts], dtype=np.int64)
    lab_sizes = np.asarray([len(p["labels"]) for p in parts], dtype=np.int64)
    seg_map = _map_onto(
        [s["id"] for s in manifest["segments"]],
        list(chain.from_iterable(p["segments"] for p in parts)),
        "segment",
    )
    leaf_labels = list(chain.from_iterable(p["labels"] for p in parts))
    if manifest.get("task") == "regression":
        # A leaf's label table holds the targets' float32 text: the values themselves (NaN = none).
        lab_map = np.asarray(leaf_labels, dtype=np.float32)
    else:
        lab_map = _map_onto(manifest["classes"], leaf_labels, "label")
    # Each sample's leaf-local table position + its leaf's offset in the concatenated tables.
    seg_off = np.repeat(np.cumsum(seg_sizes) - seg_sizes, counts)
    lab_off = np.repeat(np.cumsum(lab_sizes) - lab_sizes, counts)
    seg_local = np.concatenate([p["seg"] for p in parts]).astype(np.int64)
    lab_local = np.concatenate([p["label"] for p in parts]).astype(np.int64)
    seg = seg_map[seg_local + seg_off].astype(np.int32)
    lab_map = np.append(lab_map, np.nan if lab_map.dtype.kind == "f" else -1)  # "no label"
    y = lab_map[np.where(lab_local < 0, len(lab_map) - 1, lab_local + lab_off)]
    row = np.concatenate([p["row"] for p in parts]).astype(np.int64)
    is_val = np.concatenate([p["split"] for p in parts]).astype(bool)
    md5 = np.concatenate([p["md5"] for p in parts])
    y = y.astype(np.float32 if y.dtype.kind == "f" else np.int64, copy=False)
    return seg, row, y, is_val, md5

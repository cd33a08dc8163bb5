"""The version writer: the version's files under a staging name, the manifest last, then the rename."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path

import numpy as np

from pipeline.datasets import manifest as mf
from pipeline.datasets.build.values import (
    _Sample,
)
from pipeline.datasets.hooks import pause_hook

# What json.dumps does to one string (ensure_ascii), without its per-call checks: this runs
# once per sample on every commit.
_json_string = json.encoder.encode_basestring_ascii


def _publish(folder: Path, manifest: dict, samples: list[_Sample], invalid: list[dict]) -> str:
    """Write the version under a staging name, manifest last, then rename it into place."""
    staging = folder.parent / f"{mf.STAGING_PREFIX}{secrets.token_hex(6)}"
    staging.mkdir(parents=True)
    try:
        seg_pos = {s["id"]: i for i, s in enumerate(manifest["segments"])}
        classes = {c: i for i, c in enumerate(manifest["classes"])}
        label_json: dict[str | None, str] = {}
        lines = [_metadata_line(i, s, label_json) for i, s in enumerate(samples)]
        raw = mf.manifest_bytes(manifest)
        # Every file, the manifest last, is synced before the staging folder is renamed into
        # place (the publish point). A staging folder is never read, only removed, so its files
        # need no order among themselves: one batch of syncs.
        mf.write_all_synced(
            staging,
            [
                (
                    mf.INDEX_SEGMENT,
                    _npy_bytes(
                        np.asarray([seg_pos[s.segment_id] for s in samples], dtype=np.int32)
                    ),
                ),
                (mf.INDEX_ROW, _npy_bytes(np.asarray([s.row for s in samples], dtype=np.int64))),
                (
                    mf.SPLITS,
                    _npy_bytes(np.asarray([s.split == "val" for s in samples], dtype=np.int8)),
                ),
                (
                    mf.LABELS,
                    _npy_bytes(
                        np.asarray(
                            [
                                classes.get(s.label, -1) if s.label is not None else -1
                                for s in samples
                            ],
                            dtype=np.int64,
                        )
                    ),
                ),
                (mf.METADATA, ("\n".join(lines) + "\n" if lines else "").encode()),
                (
                    mf.INVALID,
                    "".join(json.dumps(r, sort_keys=True) + "\n" for r in invalid).encode(),
                ),
                (mf.MANIFEST, raw),
            ],
        )
        mf.fsync_dir(staging)
        pause_hook("commit_staged")
        os.rename(staging, folder)
        mf.fsync_dir(folder.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return hashlib.sha256(raw).hexdigest()


def _metadata_line(i: int, s: _Sample, labels: dict[str | None, str] | None = None) -> str:
    """One metadata.jsonl line, keys sorted, exactly what json.dumps(sort_keys=True) writes;
    formatted by hand, in one f-string, because this runs once per sample on every commit.
    ``labels`` caches the JSON form of each label (a handful of classes)."""
    label = labels.get(s.label) if labels is not None else None
    if label is None:
        label = "null" if s.label is None else _json_string(s.label)
        if labels is not None:
            labels[s.label] = label
    copy = f'"copy": {s.copy}, ' if s.copy else ""
    line = f'"line": {int(s.line)}, ' if s.line is not None else ""
    # hex digests and split names never need escaping
    return (
        f'{{{copy}"duplicate": {"true" if s.duplicate else "false"}, "index": {i}, "label": {label}, '
        f'{line}"md5": "{s.md5}", "mtime_ns": {"null" if s.mtime_ns is None else int(s.mtime_ns)}, '
        f'"path": {_json_string(s.path)}, "row": {int(s.row)}, "segment": "{s.segment_id}", '
        f'"size": {"null" if s.size is None else int(s.size)}, "split": "{s.split}"}}'
    )


def _npy_bytes(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _clean_staging(dataset_dir: Path) -> None:
    """Staging folders left by a killed commit. Only called under the dataset lock, when no
    other commit of this dataset can be writing one."""
    if dataset_dir.is_dir():
        for stale in dataset_dir.glob(f"{mf.STAGING_PREFIX}*"):
            shutil.rmtree(stale, ignore_errors=True)

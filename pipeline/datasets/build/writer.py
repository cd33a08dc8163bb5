"""The version writer: the version's files under a staging name, the manifest last, then the rename."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from pipeline.datasets import manifest as mf
from pipeline.datasets.build.values import (
    _Sample,
)
from pipeline.datasets.chunks import META_SUFFIX, LeafRef, Present, Tree, chunk_relpath
from pipeline.datasets.chunkwrite import Piece, write_pieces, write_tree
from pipeline.datasets.crash_points import pause_hook
from pipeline.storage.durable import fsync_dir

# What json.dumps does to one string (ensure_ascii), without its per-call checks: this runs
# once per sample on every commit.
_json_string = json.encoder.encode_basestring_ascii


class VersionWriter:
    """Writes one version folder: data first, the manifest last, then the atomic rename.

    ``with VersionWriter(folder) as w:`` opens a staging folder beside ``folder``; ``w.chunks``
    writes the version's chunk files (shared, content-addressed, outside the folder) and its
    ``parts.txt``; ``w.add`` queues a file; ``w.publish(manifest)`` writes and syncs every file,
    the manifest last, and renames the staging folder into place (the publish point). Leaving
    the block without publishing, or by an error, removes the staging folder; chunk files that
    were written stay (content-addressed: a rerun reuses them, gc collects the unreferenced)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.staging = self.folder.parent / f"{mf.STAGING_PREFIX}{secrets.token_hex(6)}"
        self._files: list[tuple[str, bytes]] = []
        self.published = False

    def __enter__(self) -> VersionWriter:
        self.staging.mkdir(parents=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.published:
            shutil.rmtree(self.staging, ignore_errors=True)

    def add(self, name: str, data: bytes) -> None:
        self._files.append((name, data))

    def chunks(
        self,
        data_root: Path,
        samples: Sequence[_Sample],
        known: Callable[[list[str]], dict[str, str]] | None = None,
        parent: Sequence[tuple[LeafRef, bytes]] | None = None,
        settled: dict[str, bytes] | None = None,
    ) -> Tree:
        return self._listed(
            write_tree(data_root, samples, known=known, parent=parent, settled=settled)
        )

    def pieces(
        self,
        data_root: Path,
        pieces: Sequence[Piece],
        known: Callable[[list[str]], dict[str, str]] | None = None,
        present: Present | None = None,
        formatted: dict[str, bytes] | None = None,
    ) -> Tree:
        """The delta commit's chunks: leaves already cut (build/delta.py); ``present``, the
        reused leaves' files as the delta read them; ``formatted``, the new leaves' metadata
        parts as the cut made them."""
        return self._listed(
            write_pieces(data_root, pieces, known=known, present=present, formatted=formatted)
        )

    def _listed(self, tree: Tree) -> Tree:
        pause_hook("chunks_written")
        parts = "".join(chunk_relpath(leaf.hash, META_SUFFIX) + "\n" for leaf in tree.leaves)
        self.add(mf.PARTS, parts.encode())
        return tree

    def publish(self, manifest: dict) -> str:
        """Write the queued files and the manifest, then rename; the manifest's sha256."""
        raw = mf.manifest_bytes(manifest)
        # Every file, the manifest last, is synced before the staging folder is renamed into
        # place (the publish point). A staging folder is never read, only removed, so its files
        # need no order among themselves: one batch of syncs.
        mf.write_all_synced(self.staging, [*self._files, (mf.MANIFEST, raw)])
        fsync_dir(self.staging)
        pause_hook("commit_staged")
        os.rename(self.staging, self.folder)
        self.published = True
        fsync_dir(self.folder.parent)
        return hashlib.sha256(raw).hexdigest()


def invalid_bytes(invalid: list[dict]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in invalid).encode()


def _publish(folder: Path, manifest: dict, samples: list[_Sample], invalid: list[dict]) -> str:
    """Format 1: the whole version in its folder (index arrays and metadata.jsonl), manifest
    last, then the rename. Kept so that tests can write the old format (the reader's fallback
    and the store migration are tested against it)."""
    seg_pos = {s["id"]: i for i, s in enumerate(manifest["segments"])}
    classes = {c: i for i, c in enumerate(manifest["classes"])}
    label_json: dict[str | None, str] = {}
    lines = [_metadata_line(i, s, label_json) for i, s in enumerate(samples)]
    with VersionWriter(folder) as w:
        w.add(
            mf.INDEX_SEGMENT,
            _npy_bytes(np.asarray([seg_pos[s.segment_id] for s in samples], dtype=np.int32)),
        )
        w.add(mf.INDEX_ROW, _npy_bytes(np.asarray([s.row for s in samples], dtype=np.int64)))
        w.add(mf.SPLITS, _npy_bytes(np.asarray([s.split == "val" for s in samples], dtype=np.int8)))
        labels = [classes.get(s.label, -1) if s.label is not None else -1 for s in samples]
        w.add(mf.LABELS, _npy_bytes(np.asarray(labels, dtype=np.int64)))
        w.add(mf.METADATA, ("\n".join(lines) + "\n" if lines else "").encode())
        w.add(mf.INVALID, invalid_bytes(invalid))
        return w.publish(manifest)


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

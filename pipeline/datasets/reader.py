"""Read a published dataset version: random access, batches, split views.

``open_version`` resolves a version from the metadata store when one is given (or
METADATA_DB_URL is set), and otherwise from the files on disk (``latest`` from the dataset's
HEAD file, the rest from the manifests), so a training container needs nothing but DATA_ROOT.
An ``s3://`` DATA_ROOT is read through the local cache (``remote_reader.py``): the same
reader, over checked local copies.

npy segments are memory-mapped lazily, per process: the maps are opened on first use and
re-opened in a process that inherited them (a DataLoader worker), because a mapping must not be
shared through fork or pickling. zarr segments are read chunk by chunk: ``get_batch`` groups
its rows by chunk and reads every needed chunk once, whole.
"""

from __future__ import annotations

import json
import os
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.datasets import manifest as mf
from pipeline.datasets.chunkindex import assemble_index
from pipeline.datasets.leafmeta import FetchParts, LeafLines
from pipeline.datasets.manifest import ManifestError, VersionNotFound
from pipeline.datasets.segments import ZARR_NAME

__all__ = ["LATEST", "ManifestError", "VersionNotFound", "VersionReader", "open_version"]

LATEST = "latest"
# Whole zarr chunks kept per reader: random single-sample reads that fall in a recent chunk
# skip a fresh read (~0.6 ms per zarr call, MEASURED.md).
ZARR_CHUNK_CACHE = 16
# get_batch copies rows one by one (instead of fancy index + scatter) from this row size up.
_ROW_COPY_MIN_BYTES = 1024


def open_version(
    name: str,
    version: str = LATEST,
    *,
    data_root: Path | str | None = None,
    store: Any | None = None,
) -> VersionReader:
    """Open ``version`` (an id, a unique id prefix, a tag or ``latest``) of dataset ``name``."""
    if data_root is None:
        from pipeline.settings import get_settings

        data_root = get_settings().data_root
    if store is None and os.environ.get("METADATA_DB_URL"):
        from pipeline.metadata.store import open_store

        store = open_store()
    if isinstance(data_root, str) and data_root.startswith("s3://"):
        # Fetched into the local cache, checked, then read there (remote_reader.py).
        from pipeline.datasets.remote_reader import open_remote

        return open_remote(data_root.rstrip("/"), name, version, store=store)
    data_root = Path(data_root)
    if store is not None:
        from pipeline.datasets.queries import resolve_version

        row = resolve_version(version, dataset=name, store=store)
        folder = data_root / row["path"]
    else:
        from pipeline.datasets.refs import resolve_on_disk

        folder = resolve_on_disk(data_root, name, version)
    return VersionReader(folder, data_root)


class VersionReader:
    """One dataset version (or a split view of it). Picklable: a copy opens its own maps."""

    def __init__(
        self,
        folder: Path | str,
        data_root: Path | str | None = None,
        *,
        _subset: np.ndarray | None = None,
        _split: str | None = None,
        _shared: tuple | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.manifest, self.manifest_sha256 = mf.read_manifest(self.folder)
        # Segment paths are relative to DATA_ROOT; an exported copy keeps them in its own folder.
        self.data_root = Path(data_root) if data_root is not None else self.folder.parents[2]
        self._chunked = self.manifest["format_version"] >= 2
        self._md5_all: np.ndarray | None = None
        if _shared is not None:  # a split view: the full index is its parent's
            self._seg_all, self._row_all, self._y_all, self._val_all, self._md5_all = _shared
        elif self._chunked:
            self._seg_all, self._row_all, self._y_all, self._val_all, self._md5_all = (
                assemble_index(self.data_root, self.manifest)
            )
        else:  # format 1: a self-contained folder with the index arrays in it
            self._seg_all = np.load(self.folder / mf.INDEX_SEGMENT)
            self._row_all = np.load(self.folder / mf.INDEX_ROW)
            self._y_all = np.load(self.folder / mf.LABELS).astype(np.int64, copy=False)
            self._val_all = np.load(self.folder / mf.SPLITS).astype(bool)
        n = len(self._seg_all)
        if not (len(self._row_all) == len(self._y_all) == n == self.manifest["counts"]["samples"]):
            raise mf.ManifestError(
                f"{self.folder}: index arrays do not match the manifest's sample count"
            )
        self._indices = np.arange(n, dtype=np.int64) if _subset is None else _subset
        self._seg = self._seg_all[self._indices]
        self._row = self._row_all[self._indices]
        self._y = self._y_all[self._indices]
        self.split_name = _split
        self._is_npy = self.manifest["format"] == "npy"
        shape = [d for d in self.manifest["sample_shape"] if d > 0]
        self._row_bytes = (
            int(np.prod(shape, dtype=np.int64)) * np.dtype(self.manifest["sample_dtype"]).itemsize
        )
        # Plain lists for single-sample access: indexing a list is ~5x cheaper than a numpy
        # scalar, and __getitem__ is the hot path of a map-style DataLoader.
        self._seg_list: list[int] = self._seg.tolist()
        self._row_list: list[int] = self._row.tolist()
        self._y_list: list[int] = self._y.tolist()
        self._meta: list[str] | None = None  # format 1's metadata.jsonl lines
        self._leaf_meta: LeafLines | None = None  # a chunked version's, read by leaf
        self._arrays: dict[int, Any] = {}
        self._views: dict[int, memoryview] = {}
        self._row_layout: tuple[tuple[int, ...], np.dtype, int] | None = (
            None  # row shape, dtype, bytes
        )
        self._chunks: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        # A version read from an s3:// DATA_ROOT (remote_reader.py): the cache pins that keep
        # its objects from eviction while this reader or a split view lives, and what fetches
        # a leaf's metadata part when a record of it is first asked for.
        self._keep: tuple = ()
        self._fetch_parts: FetchParts | None = None
        _live_readers.add(self)

    # ---- identity ----------------------------------------------------------------------------

    @property
    def version_id(self) -> str:
        return self.manifest["id"]

    @property
    def tag(self) -> str:
        return self.manifest["tag"]

    @property
    def dataset(self) -> str:
        return self.manifest["dataset"]

    @property
    def modality(self) -> str:
        return self.manifest["modality"]

    @property
    def format(self) -> str:
        return self.manifest["format"]

    @property
    def classes(self) -> list[str]:
        return list(self.manifest["classes"])

    @property
    def task(self) -> str:
        """``classification`` (y = a class index, int64) or ``regression`` (y = float32)."""
        return self.manifest.get("task", "classification")

    @property
    def mean(self) -> list[float]:
        return list(self.manifest["mean"])

    @property
    def std(self) -> list[float]:
        return list(self.manifest["std"])

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.manifest["sample_shape"])

    def __repr__(self) -> str:
        split = f" split={self.split_name}" if self.split_name else ""
        return f"<VersionReader {self.tag} n={len(self)}{split}>"

    # ---- data --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        seg = self._seg_list[i]
        if self._is_npy:
            arr = self._arrays.get(seg)
            if arr is None:
                arr = self._x(seg)
            return arr[self._row_list[i]].copy(), self._y_list[i]
        return self._zarr_rows(seg, np.asarray([self._row_list[i]]))[0], self._y_list[i]

    def get_batch(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """x (B, ...) and y (B,) in the order asked (int64, float32 for regression). Image-sized npy rows are copied
        straight into place; smaller rows are read segment by segment in ascending row order;
        zarr rows whole chunk by whole chunk."""
        idx = np.asarray(indices, dtype=np.intp).reshape(-1)
        try:
            # numpy checks the range and counts negative indices from the end.
            segs = self._seg[idx]
        except IndexError:
            raise IndexError(f"index out of range for a version of {len(self)} samples") from None
        rows = self._row[idx]
        y = self._y[idx]  # int64 or float32 (see __init__), and a fresh array
        if idx.size == 0:
            return np.empty(
                (0, *self.sample_shape), dtype=np.dtype(self.manifest["sample_dtype"])
            ), y
        if self._is_npy and self._row_bytes >= _ROW_COPY_MIN_BYTES:
            return self._gather_rows(segs, rows), y
        # One sort by (segment, row): each segment's rows come out as one ascending run.
        key = (segs.astype(np.int64) << 40) | rows
        order = np.argsort(key)
        sorted_key = key[order]
        sorted_segs = sorted_key >> 40
        sorted_rows = sorted_key & ((1 << 40) - 1)
        bounds = np.flatnonzero(sorted_segs[1:] != sorted_segs[:-1]) + 1
        starts = [0, *bounds.tolist()]
        stops = [*bounds.tolist(), idx.size]
        out: np.ndarray | None = None
        for start, stop in zip(starts, stops, strict=True):
            seg = int(sorted_segs[start])
            part = sorted_rows[start:stop]
            data = self._x(seg)[part] if self._is_npy else self._zarr_rows(seg, part)
            if out is None:
                out = np.empty((idx.size, *data.shape[1:]), dtype=data.dtype)
            out[order[start:stop]] = data
        return out, y

    def _gather_rows(self, segs: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Copy each row straight to its place in the asked order: one memcpy per row and no
        sort. Fancy indexing per segment then scattering would copy every byte twice and pay
        numpy's per-call overhead once per segment (a batch of 64 spans ~10 segments), which
        costs more than this loop once a row is a KB or more (bench/reader.py)."""
        seg_list = segs.tolist()
        views = self._views
        if seg_list[0] not in views:
            self._view(seg_list[0])
        row_shape, dtype, rb = self._row_layout
        out = np.empty((len(seg_list), *row_shape), dtype=dtype)
        dst = memoryview(out).cast("B")
        d = 0
        for seg, s in zip(seg_list, np.multiply(rows, rb, out=rows).tolist(), strict=True):
            try:
                src = views[seg]
            except KeyError:
                src = self._view(seg)
            dst[d : d + rb] = src[s : s + rb]
            d += rb
        return out

    def _view(self, seg: int) -> memoryview:
        """A flat byte view of segment ``seg``'s (C-contiguous) map: slicing a memoryview is
        the cheapest copy Python has, with no array object made per row."""
        arr = self._x(seg)
        if self._row_layout is None:
            self._row_layout = (arr.shape[1:], arr.dtype, arr.strides[0])
        elif arr.shape[1:] != self._row_layout[0] or arr.dtype != self._row_layout[1]:
            raise mf.ManifestError(
                f"{self._segment_folder(seg)}: rows of shape {arr.shape[1:]} {arr.dtype}, not {self._row_layout[0]} {self._row_layout[1]} like the version's other segments"
            )
        view = self._views[seg] = memoryview(arr).cast("B")
        return view

    def split(self, name: str) -> VersionReader:
        """A view of the train or val samples."""
        if name not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {name!r}")
        is_val = self._val_all[self._indices]
        subset = self._indices[is_val if name == "val" else ~is_val]
        shared = (self._seg_all, self._row_all, self._y_all, self._val_all, self._md5_all)
        view = VersionReader(
            self.folder, self.data_root, _subset=subset, _split=name, _shared=shared
        )
        view._keep, view._fetch_parts = self._keep, self._fetch_parts
        view._leaf_meta = self._leaf_meta
        return view

    def shuffled_indices(self, seed: int, *, window_chunks: int = 4) -> np.ndarray:
        """A random order of this reader's indices for one epoch. For zarr it is chunk-aware:
        chunks are visited in random order, ``window_chunks`` at a time, and shuffled within
        each window, so consecutive batches touch few chunks and every chunk is read whole
        (single random reads of a zarr chunk cost ~60x more, MEASURED.md)."""
        rng = np.random.default_rng(seed)
        n = len(self)
        if self.format != "zarr" or n == 0:
            return rng.permutation(n)
        per_segment = np.ones(len(self.manifest["segments"]), dtype=np.int64)
        for seg in np.unique(self._seg):
            per_segment[seg] = self._x(int(seg)).chunks[0]
        keys = self._seg.astype(np.int64) * (1 << 32) + self._row // per_segment[self._seg]
        uniq, groups = np.unique(keys, return_inverse=True)
        chunk_order = rng.permutation(len(uniq))
        rank = np.empty_like(chunk_order)
        rank[chunk_order] = np.arange(len(uniq))
        window = rank[groups] // max(1, window_chunks)
        return np.lexsort((rng.random(n), window))

    def labels(self) -> np.ndarray:
        """Class indices (int64), or a regression version's float32 targets."""
        return self._y.astype(np.float32 if self.task == "regression" else np.int64)

    def md5s(self) -> np.ndarray:
        if self._md5_all is not None:
            return self._md5_all[self._indices].astype(str)
        lines = self._metadata_lines()
        return np.asarray([json.loads(lines[int(j)])["md5"] for j in self._indices], dtype=str)

    def metadata(self, i: int) -> dict:
        """The metadata.jsonl record of sample ``i`` (path, md5, label, split, segment, row...)."""
        j = int(self._indices[i])
        if not self._chunked:
            return json.loads(self._metadata_lines()[j])
        record = json.loads(self._leaf_lines().line(j))
        # A leaf's part has no position-dependent field: ``index`` is the place in the version,
        # as format 1 wrote it (keys sorted like its lines).
        record["index"] = j
        return dict(sorted(record.items()))

    # ---- internals ---------------------------------------------------------------------------

    def _metadata_lines(self) -> list[str]:
        """A format-1 version's metadata.jsonl, every line (a chunked version's are read by
        leaf, _leaf_lines)."""
        if self._meta is None:
            self._meta = (self.folder / mf.METADATA).read_text().splitlines()
        return self._meta

    def _leaf_lines(self) -> LeafLines:
        if self._leaf_meta is None:
            self._leaf_meta = LeafLines(self.data_root, self.manifest["chunks"], self._fetch_parts)
        return self._leaf_meta

    def _forget_maps(self) -> None:
        self._arrays = {}
        self._views = {}
        self._chunks = OrderedDict()

    def _segment_folder(self, seg: int) -> Path:
        return self.data_root / self.manifest["segments"][seg]["path"]

    def _x(self, seg: int) -> Any:
        arr = self._arrays.get(seg)
        if arr is None:
            folder = self._segment_folder(seg)
            if self.format == "npy":
                # A plain ndarray view of the map: np.memmap's own __getitem__ adds overhead
                # to every read and buys nothing here.
                arr = np.load(folder / "x.npy", mmap_mode="r", allow_pickle=False).view(np.ndarray)
            else:
                import zarr

                arr = zarr.open_group(str(folder / ZARR_NAME), mode="r")["x"]
            self._arrays[seg] = arr
        return arr

    def _zarr_rows(self, seg: int, sorted_rows: np.ndarray) -> np.ndarray:
        arr = self._x(seg)
        chunk = arr.chunks[0]
        chunk_ids = sorted_rows // chunk
        parts = []
        for cid in np.unique(chunk_ids):
            key = (seg, int(cid))
            block = self._chunks.get(key)
            if block is None:
                start = int(cid) * chunk
                block = arr[start : min(start + chunk, arr.shape[0])]
                self._chunks[key] = block
                if len(self._chunks) > ZARR_CHUNK_CACHE:
                    self._chunks.popitem(last=False)
            else:
                self._chunks.move_to_end(key)
            parts.append(block[sorted_rows[chunk_ids == cid] - int(cid) * chunk])
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_arrays"] = {}
        state["_views"] = {}
        state["_chunks"] = OrderedDict()
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        _live_readers.add(self)


# Maps must not cross a fork: a child (e.g. a DataLoader worker) drops the maps it inherited
# and opens its own on first use. Registered once; costs nothing on the read path.
_live_readers: weakref.WeakSet[VersionReader] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for reader in list(_live_readers):
        reader._forget_maps()


os.register_at_fork(after_in_child=_after_fork_in_child)

"""The near-duplicate index of one dataset under one recipe, persisted under DATA_ROOT/quality/.

``DATA_ROOT/quality/<dataset>/<recipe_hash>/d<threshold>/<run>/`` holds immutable runs. A run
is the keys (an md5, or ``md5:row`` for a table row) and hashes one commit added, the
near-duplicate edges it found (key pairs), and per lookup key the sorted keys and their order
(mih.BandIndex), all ``.npy`` so a lookup memory-maps them and touches O(log n) pages. A run
folder is named by the sha256 of its content and published by one rename: a crash leaves a
whole run or none, and a rerun writes the same name.

A commit looks up only its NEW hashes in every run and among themselves, then writes one run:
its cost is O(changes · log n). Runs are merged two at a time when the newest is at least half
the size of the one before (a log-structured merge), so there are O(log n) of them.
Commits of a dataset are serialised by its lock row, which is what makes the merge safe.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.datasets.quality.mih import BandIndex, band_shifts, query_pairs, self_pairs

FILES = ("keys.npy", "hashes.npy", "edges.npy", "bandkeys.npy", "orders.npy")


def index_root(data_root: Path, dataset: str, recipe_hash: str, threshold: int) -> Path:
    return Path(data_root) / "quality" / dataset / recipe_hash / f"d{threshold}"


@dataclass
class Run:
    folder: Path
    keys: np.ndarray  # S-bytes
    index: BandIndex
    edges: np.ndarray  # (k, 2) S-bytes

    @classmethod
    def load(cls, folder: Path, threshold: int) -> Run:
        def arr(name: str) -> np.ndarray:
            return np.load(folder / name, mmap_mode="r", allow_pickle=False)

        bandkeys, orders = arr("bandkeys.npy"), arr("orders.npy")
        index = BandIndex(
            arr("hashes.npy"), threshold, [bandkeys[b] for b in range(len(bandkeys))], list(orders)
        )
        # Memory-mapped like the rest: a lookup reads none of a run's edges (a million pairs on
        # photos that overlap), only ``edges()`` and a merge do.
        return cls(folder, arr("keys.npy"), index, arr("edges.npy"))

    def __len__(self) -> int:
        return len(self.keys)


def _as_bytes(keys: list[str] | np.ndarray) -> np.ndarray:
    if isinstance(keys, np.ndarray) and keys.dtype.kind == "S":
        return keys
    return np.array([k.encode() for k in keys], dtype="S") if len(keys) else np.zeros(0, "S32")


class NearIndex:
    def __init__(self, root: Path, threshold: int) -> None:
        self.root = Path(root)
        self.threshold = threshold
        band_shifts(threshold)  # a bad threshold fails here, naming itself

    def has_runs(self) -> bool:
        return self.root.is_dir() and any(
            (p / FILES[-1]).is_file() for p in self.root.iterdir() if not p.name.startswith(".")
        )

    def runs(self) -> list[Run]:
        if not self.root.is_dir():
            return []
        runs = [
            Run.load(p, self.threshold)
            for p in sorted(self.root.iterdir())
            if not p.name.startswith(".") and (p / FILES[-1]).is_file()
        ]
        return sorted(runs, key=_largest_first)

    def add(self, keys: list[str], hashes: np.ndarray) -> tuple[np.ndarray, int]:
        """``insert``, then every edge the index knows (``edges``)."""
        _, fresh = self.insert(keys, hashes)
        return self.edges(), fresh

    def insert(self, keys: list[str], hashes: np.ndarray) -> tuple[np.ndarray, int]:
        """Look the new (key, hash)s up and record them as a run; return the edges that run
        holds ((k, 2) S-bytes key pairs, smaller key first: each has a key new to the index)
        and how many hashes were new to it."""
        keys_b = _as_bytes(keys)
        hashes = np.asarray(hashes, dtype=np.uint64)
        self._clean_temps()
        known = np.zeros(len(keys_b), dtype=bool)
        # Each edge as two positions into `ends`: the new keys, then the indexed keys the
        # lookups met. Deduplicated and sorted as integer ranks (edges_by_rank), not as bytes.
        ends, a_at, b_at = [keys_b], [], []
        met = len(keys_b)
        runs = self.runs()
        for run in runs:
            pairs = query_pairs(hashes, run.index, self.threshold)
            if not len(pairs):
                continue
            b = np.asarray(run.keys[pairs[:, 1]])
            # A key met in a run was indexed before (a commit that crashed, or went back).
            known[pairs[keys_b[pairs[:, 0]] == b, 0]] = True
            ends.append(b)
            a_at.append(pairs[:, 0])
            b_at.append(met + np.arange(len(pairs), dtype=np.int64))
            met += len(pairs)
        pairs = self_pairs(hashes, self.threshold)
        a_at.append(pairs[:, 0])
        b_at.append(pairs[:, 1])
        fresh = ~known
        edges = edges_by_rank(
            np.concatenate(ends), np.concatenate(a_at), np.concatenate(b_at), len(keys_b), fresh
        )
        if fresh.any():
            written = self._write(keys_b[fresh], hashes[fresh], edges)
            self._merge(_with(runs, Run.load(written, self.threshold)))
        return edges, int(fresh.sum())

    def edges(self) -> np.ndarray:
        """Every edge the index knows, in no particular order. Each run's edges are unique,
        and no two runs hold the same edge (it is recorded by the run that added the later of
        its keys; a merge keeps one of each): the union is their concatenation. Sorting it
        again was most of a commit on photos that overlap. (A merge killed before it removed
        its inputs leaves an edge twice until the next merge: harmless, the groups are the
        same.)"""
        parts = [run.edges for run in self.runs() if len(run.edges)]
        if not parts:
            return np.zeros((0, 2), dtype="S32")
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _clean_temps(self) -> None:
        """A temp folder here is a killed commit's: commits of the dataset hold its lock row
        while they call ``add``, so no live writer can own one."""
        if self.root.is_dir():
            for tmp in self.root.glob(".tmp-*"):
                shutil.rmtree(tmp, ignore_errors=True)

    def _write(self, keys: np.ndarray, hashes: np.ndarray, edges: np.ndarray) -> Path:
        order = np.argsort(keys, kind="stable")
        keys, hashes = keys[order], hashes[order]
        index = BandIndex.build(hashes, self.threshold)
        arrays = {
            "keys.npy": keys,
            "hashes.npy": hashes,
            "edges.npy": edges,
            "bandkeys.npy": np.stack(index.keys) if index.keys else np.zeros((0, 0), np.uint64),
            "orders.npy": np.stack(index.orders) if index.orders else np.zeros((0, 0), np.int64),
        }
        digest = hashlib.sha256()
        for name in ("keys.npy", "hashes.npy", "edges.npy"):
            digest.update(name.encode() + np.ascontiguousarray(arrays[name]).tobytes())
        final = self.root / digest.hexdigest()[:32]
        if (final / FILES[-1]).is_file():
            return final
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
        try:
            for name in FILES:  # orders.npy last: its presence marks a whole run
                np.save(tmp / name, arrays[name], allow_pickle=False)
            os.rename(tmp, final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (final / FILES[-1]).is_file():
                raise
        return final

    def _merge(self, runs: list[Run]) -> None:
        """Merge the two smallest of ``runs`` (every run, largest first, as ``runs()`` orders
        them; kept up to date here rather than read again from disk) while the smaller is at
        least half the other."""
        while True:
            if len(runs) < 2 or 2 * len(runs[-1]) < len(runs[-2]):
                return
            a, b = runs[-2], runs[-1]
            keys = np.concatenate([np.asarray(a.keys), np.asarray(b.keys)])
            hashes = np.concatenate([np.asarray(a.index.hashes), np.asarray(b.index.hashes)])
            edges = np.concatenate([a.edges, b.edges])
            if _overlap(np.asarray(a.keys), np.asarray(b.keys)):
                # Only a merge killed before it removed its inputs leaves two runs sharing
                # keys, and so edges. Otherwise each edge is in the run of the later of its
                # keys, so the two runs' edges are disjoint: sorting ~1M 64-byte pairs again
                # was most of a commit that merged.
                edges = _sorted_edges(edges)
            keys, first = np.unique(keys, return_index=True)
            merged = self._write(keys, hashes[first], edges)
            for run in (a, b):
                if run.folder != merged:
                    shutil.rmtree(run.folder, ignore_errors=True)
            runs = _with(runs[:-2], Run.load(merged, self.threshold))


def _largest_first(run: Run) -> tuple[int, str]:
    return (-len(run), run.folder.name)


def _with(runs: list[Run], run: Run) -> list[Run]:
    """``runs`` with ``run`` among them (once), in ``NearIndex.runs()`` order."""
    others = [r for r in runs if r.folder != run.folder]
    return sorted([*others, run], key=_largest_first)


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two runs' keys (each sorted: _write sorts them) share one."""
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    if not len(small):
        return False
    at = np.minimum(np.searchsorted(large, small), len(large) - 1)
    return bool(np.any(large[at] == small))


def edges_by_rank(
    ends: np.ndarray, a: np.ndarray, b: np.ndarray, n_new: int, fresh: np.ndarray
) -> np.ndarray:
    """The edges ``ends[a] -- ends[b]`` as unique (smaller, larger) key pairs, sorted, without
    the self-edges of a key met twice, and only those with a ``fresh`` key among the first
    ``n_new`` (an edge between two keys indexed before was recorded by the later of them).
    Keys are ranked once (np.unique over the keys, not over the edges), and the edges sorted
    and deduplicated as integer pairs of ranks: rank order is byte order, so the result is
    _sorted_edges's, for a fraction of its cost (~300,000 edges of 64 bytes among 3,000 keys)."""
    if not len(a):
        return np.zeros((0, 2), dtype=ends.dtype if len(ends) else "S32")
    keys, rank = np.unique(ends, return_inverse=True)
    ra, rb = rank[a], rank[b]
    lo, hi = np.minimum(ra, rb), np.maximum(ra, rb)
    is_fresh = np.zeros(len(keys), dtype=bool)
    is_fresh[rank[:n_new][fresh]] = True
    keep = (lo != hi) & (is_fresh[lo] | is_fresh[hi])
    n = np.int64(len(keys))
    code = np.unique(lo[keep].astype(np.int64) * n + hi[keep])
    return np.stack([keys[code // n], keys[code % n]], axis=1)


def _sorted_edges(edges: np.ndarray | None) -> np.ndarray:
    """Edges as unique (smaller, larger) key pairs, sorted; (0, 2) when none. Each pair is
    sorted as ONE string of both keys' bytes (a row of two fixed-width fields read as a field
    twice as wide), not by np.unique(axis=0)'s row compare: ~1.6x faster. The order is the
    same: fixed-width fields, padded with NULs, compare byte by byte, the first field first."""
    if edges is None or not len(edges):
        return np.zeros((0, 2), dtype="S32")
    swap = edges[:, 0] > edges[:, 1]
    lo = np.where(swap, edges[:, 1], edges[:, 0])
    hi = np.where(swap, edges[:, 0], edges[:, 1])
    rows = np.ascontiguousarray(np.stack([lo, hi], axis=1))
    width = rows.dtype.itemsize
    return np.unique(rows.view(f"S{2 * width}").reshape(-1)).view(f"S{width}").reshape(-1, 2)

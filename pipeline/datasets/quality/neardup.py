"""Near-duplicates at commit: hash the NEW samples only, look them up, decide their split.

``prepare`` runs before the commit assembles its samples: it hashes the stored rows of the
contents the parent version does not hold (images: phash.perceptual_hash, which process
already computed into segment.json; tables: one exact hash per normalised row) and adds them
to the dataset's index (nearindex.py), which returns the new edges; every edge the index
knows is read only when the groups are found from the whole graph (a delta commit starts from
its head's groups instead where it can: neargroups.py). A new image that is a near-duplicate
of contents already in the version joins their split (``splits``, handed to assemble as known
splits); a group of new contents only takes the split of its smallest md5. An existing
content's split never changes: a new sample bridging two groups of different splits joins one
of them, and the report names the group as a leak. Table rows keep the split process gave
them (by row key); their groups are reported only.
"""

from __future__ import annotations

import binascii
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.datasets.quality.neargroups import Growth, NearGroups, grow
from pipeline.datasets.quality.neargroups import load as load_groups
from pipeline.datasets.quality.nearindex import NearIndex, index_root
from pipeline.datasets.quality.phash import MIN_SIDE, perceptual_hash, row_hashes
from pipeline.metadata.datasets import SAMPLE_OK

DEFAULT_DISTANCE = 4  # of 64 bits: conservative, no false group on distinct photos (tests)


def near_duplicate_distance(recipe) -> int:
    """The recipe's ``[quality] near_duplicate_distance``, or the default where the recipe
    has no such field (the gate's section is optional)."""
    section = getattr(recipe, "quality", None)
    value = getattr(section, "near_duplicate_distance", None)
    return DEFAULT_DISTANCE if value is None else int(value)


@dataclass
class NearDupState:
    kind: str  # image | table | none
    threshold: int
    new_samples: int = 0  # hashes looked up by this commit
    splits: dict[str, str] = field(default_factory=dict)  # md5 -> split, for new md5s
    # The delta commit's groups from the head's (neargroups.py), when they tell exactly.
    growth: Growth | None = None
    # The groups of the version (set by the report): written for the next delta commit.
    groups: NearGroups | None = None
    _edges: Callable[[], np.ndarray] | None = field(default=None, repr=False)
    _graph: EdgeGraph | None = field(default=None, repr=False)

    def graph(self) -> EdgeGraph:
        """Every edge the index knows as a graph, read and built on first use and kept."""
        if self._graph is None:
            self._graph = EdgeGraph(
                self._edges() if self._edges is not None else np.zeros((0, 2), "S32")
            )
        return self._graph


@dataclass
class HeadNear:
    """What a delta commit's near-duplicate step knows of its head."""

    groups: NearGroups | None  # its groups file (neargroups.py), None when it has none
    touched: set[str]  # the change set's contents (every md5 the affected paths had or have)
    splits_of: Callable[[set[str]], dict[str, str]]  # the head's split of contents it holds


def kind_of(recipe) -> str:
    if recipe.modality == "image" and recipe.image.size < MIN_SIDE:
        return "none"  # too small for a perceptual hash (phash.MIN_SIDE): nothing to read
    return {"image": "image", "table": "table"}.get(recipe.modality, "none")


def index_ready(data_root: Path, dataset: str, recipe) -> bool:
    """Whether a commit may hash only its new contents: no near-duplicate index is needed, or
    the recipe's index exists (else prepare hashes every content of the version, once)."""
    index = _index(data_root, dataset, recipe)
    return index is None or index.has_runs()


def head_groups(data_root: Path, dataset: str, recipe, version_id: str, leaves):
    """The head's near-duplicate groups file (neargroups.py), or None (none, or not images)."""
    if kind_of(recipe) != "image":
        return None
    return load_groups(data_root, dataset, version_id, leaves, near_duplicate_distance(recipe))


def _index(data_root: Path, dataset: str, recipe) -> NearIndex | None:
    """The recipe's near-duplicate index (None: its samples get no near-duplicate check)."""
    kind = kind_of(recipe)
    if kind == "none":
        return None
    threshold = near_duplicate_distance(recipe) if kind == "image" else 0
    return NearIndex(index_root(data_root, dataset, recipe.recipe_hash, threshold), threshold)


def prepare(
    data_root: Path,
    dataset: str,
    recipe,
    files,
    processed,
    known_splits: dict[str, str],
    head: HeadNear | None = None,
) -> NearDupState:
    """``head``: the delta commit's, whose ``files`` are only the changed ones."""
    index = _index(data_root, dataset, recipe)
    if index is None:
        return NearDupState("none", 0)
    kind = kind_of(recipe)
    state = NearDupState(kind, index.threshold, _edges=index.edges)
    first_path: dict[str, str] = {}
    for path, md5, *_ in files:
        ps = processed.get(md5) if md5 else None
        if ps is not None and ps.status == SAMPLE_OK and ps.n_rows and md5 not in first_path:
            if not recipe.is_sidecar(path):
                first_path[md5] = path
    new = sorted(m for m in first_path if m not in known_splits)
    # An index not there yet (the first build under this recipe and distance, e.g. after the
    # recipe's near_duplicate_distance changed) starts from every content the version holds,
    # once: the parent's contents were indexed under another distance, or not at all.
    to_hash = new if index.has_runs() else sorted(first_path)
    keys, hashes = _hash_new(data_root, recipe, kind, [processed[m] for m in to_hash])
    state.new_samples = len(keys)
    new_edges, fresh = index.insert(keys, hashes)
    if head is not None and head.groups is not None and kind == "image" and fresh == len(keys):
        # Every hashed content is new to the index, so every edge it adds is in new_edges.
        state.growth = grow(
            head.groups, new_edges, first_path, head.touched, known_splits, head.splits_of
        )
    splits_needed = kind == "image" and new and not recipe.split.group_regex
    if state.growth is not None:
        if splits_needed:
            state.splits = state.growth.splits_for_new(new, first_path, recipe)
    elif splits_needed:
        graph = state.graph()
        extra = head.splits_of(graph.contents() - head.touched) if head is not None else {}
        state.splits = _splits_for_new(
            graph, new, first_path, {**extra, **known_splits}, recipe, set(extra)
        )
    return state


def _hash_new(data_root: Path, recipe, kind: str, new: list) -> tuple[list[str], np.ndarray]:
    """Keys and hashes of the new contents' stored rows, read one segment at a time."""
    by_segment: dict[str, list] = {}
    for ps in new:
        by_segment.setdefault(ps.segment_id, []).append(ps)
    keys: list[str] = []
    parts: list[np.ndarray] = []
    for segment_id, group in sorted(by_segment.items()):
        if kind == "image":
            stored = _stored_hashes(data_root, recipe, segment_id, group)
            if stored is None:  # a segment written before process hashed its samples
                x = _segment_x(data_root, recipe, segment_id)
                rows = np.asarray([ps.row for ps in group], dtype=np.int64)
                stored = perceptual_hash(_take(x, rows))
            hashes, unhashable = stored
            parts.append(hashes[~unhashable])  # flat frames would all collide: left out
            keys += [ps.md5 for ps, skip in zip(group, unhashable, strict=True) if not skip]
        else:
            x = _segment_x(data_root, recipe, segment_id)
            rows = np.concatenate(
                [np.arange(ps.row, ps.row + ps.n_rows, dtype=np.int64) for ps in group]
            )
            parts.append(row_hashes(_take(x, rows)))
            keys += [f"{ps.md5}:{k}" for ps in group for k in range(ps.n_rows)]
    hashes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
    return keys, hashes


def _stored_hashes(
    data_root: Path, recipe, segment_id: str, group: list
) -> tuple[np.ndarray, np.ndarray] | None:
    """(hashes, unhashable) of ``group`` as process stored them in segment.json (each entry's
    ``phash``: perceptual_hash of its sample, None when unhashable), or None when the segment
    has none (written by an older process)."""
    from pipeline.datasets.segments import read_info, segment_relpath

    info = read_info(Path(data_root) / segment_relpath(recipe.recipe_hash, segment_id))
    by_md5 = {e["md5"]: e for e in info["entries"]}
    try:
        values = [by_md5[ps.md5]["phash"] for ps in group]
    except KeyError:
        return None
    unhashable = np.asarray([v is None for v in values], dtype=bool)
    hashes = np.asarray([0 if v is None else v for v in values], dtype=np.uint64)
    return hashes, unhashable


def _segment_x(data_root: Path, recipe, segment_id: str):
    from pipeline.datasets.segments import ZARR_NAME, segment_relpath

    folder = Path(data_root) / segment_relpath(recipe.recipe_hash, segment_id)
    if (folder / "x.npy").is_file():
        return np.load(folder / "x.npy", mmap_mode="r", allow_pickle=False)
    import zarr

    return zarr.open_group(str(folder / ZARR_NAME), mode="r")["x"]


def _take(x, rows: np.ndarray) -> np.ndarray:
    order = np.argsort(rows)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    sorted_rows = rows[order]
    data = x[sorted_rows] if isinstance(x, np.ndarray) else x.oindex[sorted_rows]
    return np.asarray(data)[inverse]


class EdgeGraph:
    """The index's edges as a graph over integer ids, built once per commit: the index returns
    every edge it knows on each commit (photos cropped from one scene give hundreds of
    thousands), and sorting their keys is the dear step, which the split decision, the report's
    groups and its list of contents in a pair would otherwise each pay again."""

    def __init__(self, edges: np.ndarray) -> None:
        self.keys, inverse = _unique_keys(edges.ravel())
        self.a, self.b = inverse.reshape(-1, 2).T
        # A key is a content's md5, or md5:<row> for a table row: the content is what is held.
        self.content = np.char.partition(self.keys, b":")[:, 0] if len(self.keys) else self.keys

    def contents(self) -> set[str]:
        """The contents in at least one pair."""
        return set(np.unique(self.content).astype(str).tolist())

    def groups(self, present: set[str] | None = None) -> list[list[str]]:
        """Connected groups (sorted, each of >= 2 keys) of the edges whose two keys' contents
        are in ``present`` (None: all). In numpy, not a Python union-find over the edges: each
        key takes the smallest label of its neighbours, then of its label's label (pointer
        jumping), until nothing moves: a few rounds, as many as the groups' diameters need."""
        a, b = self.a, self.b
        if present is not None:
            wanted = np.asarray(sorted(present), dtype=self.content.dtype)
            held = np.isin(self.content, wanted) if len(wanted) else np.zeros(len(self.keys), bool)
            keep = held[a] & held[b]
            a, b = a[keep], b[keep]
        if not len(a):
            return []
        label = np.arange(len(self.keys))
        while True:
            low = np.minimum(label[a], label[b])
            before = label.copy()
            np.minimum.at(label, a, low)
            np.minimum.at(label, b, low)
            label = label[label]
            if np.array_equal(label, before):
                break
        used = np.zeros(len(self.keys), dtype=bool)
        used[a] = used[b] = True
        ids = np.flatnonzero(used)
        order = ids[np.argsort(label[ids], kind="stable")]  # ids are in key order: sorted groups
        cuts = np.flatnonzero(np.diff(label[order])) + 1
        names = self.keys.astype(str)
        return sorted(names[idx].tolist() for idx in np.split(order, cuts) if len(idx) > 1)


def _unique_keys(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(flat, return_inverse=True)`` of an edge list's keys, sorted as bytes. Image
    keys are md5s: 32 hex digits, whose first 16 read as a big-endian integer sort as the
    string does; so unless two keys share them, a sort of integers gives the same answer as the
    sort of a million 32-byte strings, which was most of a commit on overlapping photos."""
    if flat.dtype.itemsize == 32 and len(flat):
        try:
            raw = binascii.unhexlify(flat.tobytes())  # any other byte (":" of a row key) fails
        except binascii.Error:
            raw = None
        if raw is not None:
            halves = np.frombuffer(raw, dtype=">u8").reshape(-1, 2)
            _, first, inverse = np.unique(halves[:, 0], return_index=True, return_inverse=True)
            keys = flat[first]
            # Exact or not taken: no two keys share a first half, and the keys are strictly
            # increasing as strings (upper-case hex would sort apart from its value).
            if np.array_equal(halves[first[inverse], 1], halves[:, 1]) and bool(
                np.all(keys[1:] > keys[:-1])
            ):
                return keys, inverse.ravel()
    keys, inverse = np.unique(flat, return_inverse=True)
    return keys, inverse.ravel()


def components(edges: np.ndarray, present: set[str] | None = None) -> list[list[str]]:
    """Connected groups (sorted, each of >= 2 keys) of the edges whose two keys are present."""
    return EdgeGraph(edges).groups(present)


def _content(key: str) -> str:
    return key.split(":", 1)[0]


def _splits_for_new(
    graph: EdgeGraph, new: list[str], first_path, known_splits, recipe, also: set[str] = frozenset()
) -> dict[str, str]:
    new_set = set(new)
    out: dict[str, str] = {}
    for group in graph.groups(set(first_path) | also):
        members = [m for m in group if m in new_set]
        if not members:
            continue
        held = Counter(known_splits[m] for m in group if m in known_splits)
        if held:
            # The split most of the group's existing contents are in (ties: train first).
            split = sorted(held.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        else:
            anchor = group[0]
            split = recipe.split_for(first_path[anchor], anchor)
        for m in members:
            out[m] = split
    return out

"""The head's near-duplicate groups, kept so that a delta commit's report costs what changed.

The report's near-duplicate part is the connected groups of the index's edges among the
contents a version holds (compute.py). Found from the edges, that is O(every edge the index
knows) on every commit: the 5,000-JPEG bench's photos form one group of ~1 M edges, and
loading, sorting and walking them was ~250 ms of a +50-file commit that otherwise takes
~280 ms. So a commit that makes an image version the head also writes its GROUPS: each
grouped content's key, its group and its split, and each group's report entry (size, splits,
first paths). The next delta commit starts from them (``grow``):

- its new edges (each has a content new to the index) are kept where both ends are in the
  version; their ends join the groups they are in, or stand alone, and the joined groups are
  found on that small graph alone;
- a new content takes the split most of its group's existing contents hold (per-group split
  counts), as ``neardup._splits_for_new`` decides it from the whole graph;
- an entry is summed from the groups it joins and its new contents' samples, or read again
  from the store where one of its contents was touched (moved, relabelled, copied).

When the head's groups cannot give the answer exactly, the commit takes the whole-graph path
as before: no groups file (the first commit after an upgrade, or a head moved by approve), a
damaged or foreign one, a content indexed before that comes back (its old edges are not in
the new ones), or a grouped content that leaves the version (a group may split).

Layout, like the head's digest (build/digest.py) and beside it, in the same frame
(datasets/cachefile.py): a crc32 line; one JSON header line (``format``, ``version_id``,
``leaves`` (sha256 of the head's leaf list), ``threshold``, ``splits``, ``n``, ``entries``);
then the raw arrays ``key`` S32, ``group`` int32, ``split`` int8, each of ``n`` rows, ``key``
sorted. A cache: written after the version is published, missing or damaged costs only time.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.datasets import cachefile

log = logging.getLogger("laketrain.build")

SUFFIX = ".neargroups"
_FORMAT = 1
_DTYPES = ("S32", "<i4", "i1")  # key, group, split


@dataclass
class NearGroups:
    """The near-duplicate groups among one version's contents (image keys: md5s)."""

    threshold: int
    keys: np.ndarray  # S32, sorted: every content in a group
    group: np.ndarray  # int32: its group's index into ``entries``
    split: np.ndarray  # int8: its content's split, an index into ``splits``
    splits: list[str]
    entries: list[dict]  # the report's entry of each group, in order of its smallest key

    @classmethod
    def of(cls, threshold: int, groups: list[tuple[list[str], dict, list[str]]]) -> NearGroups:
        """From (sorted keys, entry, each key's split) per group, in any order."""
        groups = sorted(groups, key=lambda g: g[0][0])
        splits = sorted({s for _k, _e, per_key in groups for s in per_key})
        code = {s: i for i, s in enumerate(splits)}
        keys = [k for ks, _e, _s in groups for k in ks]
        order = np.argsort(np.asarray(keys, dtype="S32"), kind="stable")
        group = np.repeat(np.arange(len(groups), dtype=np.int32), [len(g[0]) for g in groups])
        split = np.asarray([code[s] for _k, _e, per in groups for s in per], dtype=np.int8)
        return cls(
            threshold,
            np.asarray(keys, dtype="S32")[order],
            group[order],
            split[order],
            splits,
            [e for _k, e, _s in groups],
        )

    def members(self) -> list[np.ndarray]:
        """Each group's keys (S32, sorted), by group index."""
        order = np.argsort(self.group, kind="stable")
        cuts = np.searchsorted(self.group[order], np.arange(1, len(self.entries)))
        return [self.keys[idx] for idx in np.split(order, cuts)]

    def split_counts(self) -> np.ndarray:
        """(groups, splits): how many of each group's contents are in each split."""
        out = np.zeros((len(self.entries), max(len(self.splits), 1)), dtype=np.int64)
        np.add.at(out, (self.group, self.split), 1)
        return out


@dataclass
class Component:
    """A group of the new version that new edges made: head groups joined, keys added."""

    old: list[int]  # head group indexes
    extra: list[str]  # keys in no head group: new contents, or head contents grouped now


@dataclass
class Growth:
    """The head's groups and how this commit's new edges change them."""

    head: NearGroups
    components: list[Component]
    touched: set[str]  # contents of the change set (their samples may differ from the head's)
    extra_splits: dict[str, str]  # split of each extra key the head holds

    def splits_for_new(self, new: list[str], first_path: dict, recipe) -> dict[str, str]:
        """md5 -> split of each new content in a group: the split most of the group's existing
        contents are in (ties: the name first), else the split of its smallest key's path."""
        new_set = set(new)
        counts = self.head.split_counts()
        out: dict[str, str] = {}
        for comp in self.components:
            members = [k for k in comp.extra if k in new_set]
            if not members:
                continue
            held: Counter = Counter()
            for gid in comp.old:
                for code, n in enumerate(counts[gid]):
                    if n:
                        held[self.head.splits[code]] += int(n)
            held.update(self.extra_splits[k] for k in comp.extra if k in self.extra_splits)
            if held:
                split = sorted(held.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
            else:
                anchor = min(comp.extra)
                split = recipe.split_for(first_path[anchor], anchor)
            for m in members:
                out[m] = split
        return out

    def apply(
        self, entries: dict[int, dict], extra_splits: dict[str, str], replaced: dict[int, dict]
    ) -> NearGroups:
        """The new version's groups: ``entries`` of the components (by index), the split of
        each extra key, and the entries ``replaced`` of head groups read again."""
        head = self.head
        n_old = len(head.entries)
        relabel = np.arange(n_old, dtype=np.int64)
        extra_keys: list[str] = []
        extra_labels: list[int] = []
        for ci, comp in enumerate(self.components):
            relabel[comp.old] = n_old + ci
            extra_keys += comp.extra
            extra_labels += [n_old + ci] * len(comp.extra)
        by_label = {gid: replaced.get(gid, e) for gid, e in enumerate(head.entries)}
        by_label.update({n_old + ci: e for ci, e in entries.items()})
        splits = sorted(set(head.splits) | set(extra_splits.values()))
        code = {s: i for i, s in enumerate(splits)}
        old_codes = np.asarray([code[s] for s in head.splits], dtype=np.int8)
        keys = np.concatenate([head.keys, np.asarray(extra_keys, dtype="S32")])
        labels = np.concatenate([relabel[head.group], np.asarray(extra_labels, dtype=np.int64)])
        split = np.concatenate(
            [
                old_codes[head.split] if len(head.keys) else np.zeros(0, np.int8),
                np.asarray([code[extra_splits[k]] for k in extra_keys], dtype=np.int8),
            ]
        )
        order = np.argsort(keys, kind="stable")
        keys, labels, split = keys[order], labels[order], split[order]
        # Groups numbered by their smallest key: the first time each label shows, in key order.
        used, first = np.unique(labels, return_index=True)
        ranked = used[np.argsort(first)]
        rank = np.empty(int(ranked.max()) + 1 if len(ranked) else 0, dtype=np.int32)
        rank[ranked] = np.arange(len(ranked), dtype=np.int32)
        return NearGroups(
            head.threshold,
            keys,
            rank[labels] if len(labels) else np.zeros(0, np.int32),
            split,
            splits,
            [by_label[int(label)] for label in ranked],
        )


def grow(
    head: NearGroups,
    new_edges: np.ndarray,
    first_path: dict[str, str],
    touched: set[str],
    known_splits: dict[str, str],
    head_splits: Callable[[set[str]], dict[str, str]],
) -> Growth | None:
    """The groups that ``new_edges`` (S32 key pairs, each with a key new to the index) make
    among the new version's contents, or None when the head's groups cannot tell: a grouped
    content of the change set is not in the new version (its group may split).

    ``first_path``: the change set's contents in the new version; ``known_splits``: the head's
    split of the change set's contents; ``head_splits``: the head's split of contents outside
    the change set (those it holds)."""
    grouped_touched = {k.decode() for k in head.keys[keys_in(head.keys, touched)]}
    if grouped_touched - first_path.keys():
        return None
    ends = np.unique(new_edges.ravel()) if len(new_edges) else np.zeros(0, "S32")
    loose = [k.decode() for k in ends[~keys_in(ends, head.keys)]]
    # A key of the change set is in the version if a file holds it now; another, if the head
    # holds it (it is unchanged).
    outside = head_splits({k for k in loose if k not in touched and k not in first_path})
    present = {k for k in loose if k in first_path or (k not in touched and k in outside)}
    extra_splits = {k: known_splits[k] for k in present if k in known_splits}
    extra_splits.update({k: outside[k] for k in present if k in outside})
    # Nodes: the head's groups 0..G-1, then the loose keys present, in key order.
    loose_keys = np.asarray(sorted(present), dtype="S32")
    flat = new_edges.ravel()
    nodes = np.full(len(flat), -1, dtype=np.int64)
    for table, ids in ((head.keys, head.group), (loose_keys, None)):
        if not len(table):
            continue
        at = np.minimum(np.searchsorted(table, flat), len(table) - 1)
        hit = table[at] == flat
        nodes[hit] = ids[at[hit]] if ids is not None else len(head.entries) + at[hit]
    pairs = nodes.reshape(-1, 2)
    pairs = np.unique(pairs[(pairs >= 0).all(axis=1)], axis=0)
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs.tolist():
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    by_root: dict[int, Component] = {}
    for x in sorted(parent):
        comp = by_root.setdefault(find(x), Component([], []))
        if x < len(head.entries):
            comp.old.append(x)
        else:
            comp.extra.append(loose_keys[x - len(head.entries)].decode())
    return Growth(head, list(by_root.values()), set(touched), extra_splits)


def keys_in(keys: np.ndarray, wanted: set[str] | np.ndarray) -> np.ndarray:
    """Which of ``keys`` (S32) are in ``wanted`` (strs, or S32 keys)."""
    if not isinstance(wanted, np.ndarray):
        wanted = np.asarray(sorted(wanted), dtype="S32")
    if not len(keys) or not len(wanted):
        return np.zeros(len(keys), dtype=bool)
    return np.isin(keys, wanted)


def merged_entry(parts: Sequence[dict], cap: int) -> dict:
    """One entry of groups whose samples are disjoint: sizes summed, splits and first paths
    united (the first ``cap`` paths of a union are among each part's first ``cap``)."""
    return {
        "paths": sorted({p for e in parts for p in e["paths"]})[:cap],
        "splits": sorted({s for e in parts for s in e["splits"]}),
        "size": sum(e["size"] for e in parts),
    }


# ---- the file ------------------------------------------------------------------------------


def leaves_sha(leaves) -> str:
    """sha256 of a leaf list ((hash, count) each): which tree the groups were written for."""
    text = "\n".join(f"{leaf.hash} {leaf.count}" for leaf in leaves)
    return hashlib.sha256(text.encode()).hexdigest()


def path_of(data_root: Path, dataset: str, version_id: str) -> Path:
    return cachefile.path_of(data_root, dataset, version_id, SUFFIX)


def encode(version_id: str, leaves, groups: NearGroups) -> list:
    header = {
        "format": _FORMAT,
        "version_id": version_id,
        "leaves": leaves_sha(leaves),
        "threshold": groups.threshold,
        "splits": groups.splits,
        "n": len(groups.keys),
        "entries": groups.entries,
    }
    arrays = (groups.keys, groups.group, groups.split)
    return cachefile.frame(header, list(zip(arrays, _DTYPES, strict=True)))


def decode(raw: bytes) -> tuple[dict, NearGroups]:
    """(header, groups) in ``raw``; ValueError when it is not a whole file of this format."""
    header, (keys, group, split) = cachefile.unframe(raw, _FORMAT, _DTYPES)
    entries = list(header["entries"])
    splits = [str(s) for s in header["splits"]]
    if not all(_is_entry(e) for e in entries):
        raise ValueError("an entry is not {paths, splits, size}")
    if len(keys) and (
        bool(np.any(keys[1:] <= keys[:-1]))
        or int(group.min()) < 0
        or int(group.max()) >= len(entries)
        or int(split.min()) < 0
        or int(split.max()) >= len(splits)
    ):
        raise ValueError("its arrays do not fit its header")
    return header, NearGroups(int(header["threshold"]), keys, group, split, splits, entries)


def _is_entry(e) -> bool:
    return (
        isinstance(e, dict)
        and isinstance(e.get("paths"), list)
        and isinstance(e.get("splits"), list)
        and isinstance(e.get("size"), int)
    )


def load(
    data_root: Path, dataset: str, version_id: str, leaves, threshold: int
) -> NearGroups | None:
    """The groups written for head ``version_id`` with these leaves and distance, or None (none
    there, damaged or another's: logged, and the commit takes the whole-graph path)."""
    path = path_of(data_root, dataset, version_id)
    raw = cachefile.read(path, "near-duplicate groups, using the whole graph")
    if raw is None:
        return None
    try:
        header, groups = decode(raw)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("%s: not a near-duplicate groups file, using the whole graph (%s)", path, exc)
        return None
    if (header["version_id"], header["leaves"], groups.threshold) != (
        version_id,
        leaves_sha(leaves),
        threshold,
    ):
        log.warning("%s: another version's near-duplicate groups, using the whole graph", path)
        return None
    return groups


def write(data_root: Path, dataset: str, version_id: str, leaves, groups: NearGroups) -> None:
    """Write the groups of the version just made the head. A cache: a failure is logged,
    never raised."""
    path = path_of(data_root, dataset, version_id)
    cachefile.write(path, encode(version_id, leaves, groups), "near-duplicate groups")

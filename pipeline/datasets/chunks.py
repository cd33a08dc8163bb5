"""Content-addressed sample chunks: how a version's sample list is cut and encoded.

A version's samples, in version order (lake path, then table line / augmented copy), are cut
into LEAVES at content-defined boundaries: sample i ends a leaf when the sha256 of its key
(``sample_key``) is 0 modulo ``LEAF_TARGET``, or when the next sample is in another top folder
(``top_folder``: a class folder). A cut depends on the keys alone, never on positions, so
inserting or deleting k samples changes at most the k leaves they fall in plus the k they
split: every other leaf keeps its bytes, its name, and is shared with the parent.

A leaf is two files under ``DATA_ROOT/chunks/<h[:2]>/``, named by ``h`` = sha256 of the first:
- ``<h>.jsonl``: the metadata part, one line per sample, the ``metadata.jsonl`` fields except
  ``index`` (position-dependent: the reader computes it, ``export`` writes it). ``cat`` of a
  version's parts in order (``parts.txt``) is its metadata.
- ``<h>.idx``: the same samples for the reader, derived from the jsonl: one JSON header line
  (``segments`` and ``labels`` tables, ``n``) then raw little-endian arrays ``seg`` int32 (into
  ``segments``), ``row`` int64, ``label`` int32 (into ``labels``, -1 = none), ``split`` int8
  (1 = val), ``md5`` S32. Not .npz: np.load of a 7-array zip measured 0.4 ms a leaf (3 s for the
  ~8,000 leaves of a million samples), this format 0.01 ms (one json.loads, five np.frombuffer).

Leaves are grouped into NODES the same way one level up (a leaf ends a node when its hash is 0
modulo ``NODE_TARGET``): ``<h>.node.json`` lists its children (hash, count, bytes, sha256 of
the .idx), named by the sha256 of its bytes; on S3 ``<h>.pack`` also holds it with its leaves'
indexes (chunkpack.py), one GET for a reader's cold open. The manifest lists the nodes. Two levels suffice:
10 M samples make ~78,000 leaves and ~1,200 nodes, a manifest of ~150 KB; a third level would
save less than it costs in reads.

Every file is written once (temp name, fsync, rename); a name that exists is reused, never
rewritten (the write is pipeline/datasets/chunkwrite.py's, the reads chunkread.py's; this
module owns the names, the cut rule and the encodings). The hard maxima bound a leaf or node
when no boundary comes (p ≈ 1e-7 per leaf at 16× the target), at the price of a run of forced
cuts that may shift after an insertion.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from pipeline.datasets.manifest import ManifestError

# Average samples per leaf: ~200 bytes of metadata a sample makes a ~25 KB leaf, so a new
# version of a million samples that adds 0.1 % rewrites ~1,000 leaves' worth at most (~25 MB)
# and usually far less, while a version lists ~8,000 leaves (one store row each).
LEAF_TARGET = 128
LEAF_MAX = 16 * LEAF_TARGET
# Average leaves per node: ~120 nodes in the manifest of a million samples.
NODE_TARGET = 64
NODE_MAX = 16 * NODE_TARGET
CHUNKS_DIR = "chunks"
META_SUFFIX = ".jsonl"
INDEX_SUFFIX = ".idx"
NODE_SUFFIX = ".node.json"
_INDEX_FIELDS = (("seg", "<i4"), ("row", "<i8"), ("label", "<i4"), ("split", "i1"), ("md5", "S32"))
_json_string = json.encoder.encode_basestring_ascii


class ChunkError(ManifestError):
    """A chunk file is missing, or its bytes do not match its name or its listed checksum."""


class SampleLike(Protocol):
    path: str
    md5: str
    label: str | None
    split: str
    segment_id: str
    row: int
    size: int | None
    mtime_ns: int | None
    duplicate: bool
    line: int | None
    copy: int


@dataclass(frozen=True, slots=True)
class LeafRef:
    hash: str
    count: int
    bytes: int  # size of the metadata part
    sha256_idx: str

    def to_dict(self) -> dict:
        return {
            "hash": self.hash,
            "count": self.count,
            "bytes": self.bytes,
            "sha256_npz": self.sha256_idx,
        }


@dataclass(frozen=True, slots=True)
class NodeRef:
    hash: str
    count: int  # samples under it
    bytes: int  # metadata bytes under it

    def to_dict(self) -> dict:
        return {"hash": self.hash, "count": self.count, "bytes": self.bytes}


@dataclass
class Tree:
    """A version's chunk tree, as written: leaves in order, the nodes above them, and what this
    write created (the rest already existed, shared with other versions)."""

    leaves: list[LeafRef]
    nodes: list[NodeRef]
    # The leaves the store lacked, with their samples (their chunk_entries rows, made as the
    # store records them).
    new_leaves: list[tuple[LeafRef, Sequence[SampleLike]]]
    new_nodes: list[NodeRef]
    bytes_written: int = 0
    # (start, stop) of each leaf over the samples written: the commit's diff reads the new
    # version's own leaves from memory through them.
    bounds: list[tuple[int, int]] = field(default_factory=list)
    # hash -> samples of each leaf the commit had in memory (all of them on a full commit; the
    # changed runs' on a delta commit): what its leaf summary is computed from.
    parts: dict[str, Sequence[SampleLike]] = field(default_factory=dict, repr=False)

    def manifest_section(self) -> dict:
        return {
            "leaf_target": LEAF_TARGET,
            "leaf_max": LEAF_MAX,
            "node_target": NODE_TARGET,
            "node_max": NODE_MAX,
            "leaves": len(self.leaves),
            "nodes": [n.to_dict() for n in self.nodes],
        }


# ---- names ------------------------------------------------------------------------------------


def chunk_relpath(h: str, suffix: str) -> str:
    return f"{CHUNKS_DIR}/{h[:2]}/{h}{suffix}"


def chunk_path(data_root: Path, h: str, suffix: str) -> Path:
    return Path(chunk_file(data_root, h, suffix))


def chunk_file(data_root: Path | str, h: str, suffix: str) -> str:
    """chunk_path as a string, for the loops over every leaf of a version: pathlib's parsing
    took ~25 us a path, most of a million-sample delta commit's per-leaf cost."""
    return f"{os.fspath(data_root)}/{CHUNKS_DIR}/{h[:2]}/{h}{suffix}"


class Present:
    """Which chunk files exist, for a check over many leaves (a delta commit takes thousands of
    the head's leaves whole, and each must still be on disk): past ``LIST_ABOVE`` leaves, one
    listing of each shard folder they fall in (256 at most) instead of a stat per file (~23,000
    at a million samples, ~0.15 s). The listing is a snapshot: call under the segments guard,
    where gc removes nothing; a file another build adds after it reads as missing, which costs
    a rewrite of the same bytes or a full commit, never a wrong version."""

    LIST_ABOVE = 2000

    def __init__(self, data_root: Path | str, hashes: Sequence[str]) -> None:
        self._root = os.fspath(data_root)
        self._names: dict[str, set[str]] | None = None
        if len(hashes) > self.LIST_ABOVE:
            self._names = {}
            for prefix in sorted({h[:2] for h in hashes}):
                try:
                    self._names[prefix] = set(os.listdir(f"{self._root}/{CHUNKS_DIR}/{prefix}"))
                except FileNotFoundError:
                    self._names[prefix] = set()

    def has(self, h: str, suffix: str) -> bool:
        names = self._names.get(h[:2]) if self._names is not None else None
        if names is None:
            return os.path.exists(chunk_file(self._root, h, suffix))
        return f"{h}{suffix}" in names


def sample_key(s: SampleLike) -> bytes:
    key = s.path
    if s.line is not None or s.copy:
        key += f"\0{'' if s.line is None else int(s.line)}\0{int(s.copy)}"
    return key.encode("utf-8", "surrogateescape")


def _ends(digest_hex: str, target: int) -> bool:
    return int(digest_hex[:8], 16) % target == 0


# ---- cutting ----------------------------------------------------------------------------------


def top_folder(path: str) -> str:
    """The first folder under the dataset (``pets/cat/1.jpg`` -> ``cat``; "" for files at the
    dataset's root): a leaf never spans two of them."""
    parts = path.split("/", 2)
    return parts[1] if len(parts) > 2 else ""


def leaf_bounds(samples: Sequence[SampleLike]) -> list[tuple[int, int]]:
    """(start, stop) of each leaf over ``samples``: content-defined cuts, a cut between two top
    folders (so files added to one class folder, or a new folder, rewrite no leaf of another:
    without it, the leaf spanning a folder's end is rewritten, and it is the longest on
    average), plus LEAF_MAX. A folder of a top folder's own is not cut on: a lake of one small
    folder per sample would otherwise make a leaf per sample."""
    bounds: list[tuple[int, int]] = []
    start = 0
    while start < len(samples):
        stop = next_cut(samples, start)
        bounds.append((start, stop))
        start = stop
    return bounds


def next_cut(samples: Sequence[SampleLike], start: int) -> int:
    """Where the leaf that starts at ``start`` ends (its stop), by leaf_bounds' rule."""
    sha = hashlib.sha256
    n = len(samples)
    folder = top_folder(samples[start].path)
    for i in range(start, n):
        nxt = top_folder(samples[i + 1].path) if i + 1 < n else folder
        if (
            nxt != folder
            or _ends(sha(sample_key(samples[i])).hexdigest(), LEAF_TARGET)
            or i + 1 - start >= LEAF_MAX
        ):
            return i + 1
        folder = nxt
    return n


def _cut_at(samples: Sequence[SampleLike], start: int, i: int) -> bool:
    """Whether sample ``i`` ends the leaf that starts at ``start`` (the rule of next_cut)."""
    return i + 1 >= len(samples) or cut_follows(samples[i], samples[i + 1].path, i + 1 - start)


def cut_follows(sample: SampleLike, next_path: str, length: int) -> bool:
    """Whether a leaf of ``length`` samples that ends with ``sample`` is cut there when the
    next sample is at ``next_path`` (the rule of next_cut, for the delta commit's windows)."""
    if length >= LEAF_MAX or top_folder(next_path) != top_folder(sample.path):
        return True
    return _ends(hashlib.sha256(sample_key(sample)).hexdigest(), LEAF_TARGET)


def node_groups(leaves: Sequence[LeafRef]) -> list[list[LeafRef]]:
    groups: list[list[LeafRef]] = []
    current: list[LeafRef] = []
    for leaf in leaves:
        current.append(leaf)
        if _ends(leaf.hash, NODE_TARGET) or len(current) >= NODE_MAX:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


# ---- encoding ---------------------------------------------------------------------------------


def entry_line(s: SampleLike) -> str:
    """One metadata line without ``index``: keys sorted, exactly what json.dumps(sort_keys=True)
    writes for the record; by hand because it runs once per sample on every commit."""
    label = "null" if s.label is None else _json_string(s.label)
    copy = f'"copy": {s.copy}, ' if s.copy else ""
    line = f'"line": {int(s.line)}, ' if s.line is not None else ""
    return (
        f'{{{copy}"duplicate": {"true" if s.duplicate else "false"}, "label": {label}, '
        f'{line}"md5": "{s.md5}", "mtime_ns": {"null" if s.mtime_ns is None else int(s.mtime_ns)}, '
        f'"path": {_json_string(s.path)}, "row": {int(s.row)}, "segment": "{s.segment_id}", '
        f'"size": {"null" if s.size is None else int(s.size)}, "split": "{s.split}"}}'
    )


def meta_bytes(samples: Sequence[SampleLike]) -> bytes:
    return "".join([entry_line(s) + "\n" for s in samples]).encode()


def codes_of(samples: Sequence[SampleLike]) -> dict:
    """The (md5, label, split) part of ``index_of``: ``labels`` (sorted), ``label`` into it
    (-1 = none), ``split`` (1 = val), ``md5`` (S32), ``n`` (manifest.merge_codes' shape)."""
    labels = sorted({s.label for s in samples if s.label is not None})
    lab_pos = {v: i for i, v in enumerate(labels)}
    return {
        "labels": labels,
        "n": len(samples),
        # fromiter: no list of a million ints at the end of a full commit (its memory peak).
        "label": np.fromiter(
            (-1 if s.label is None else lab_pos[s.label] for s in samples), "<i4", len(samples)
        ),
        "split": np.fromiter((s.split == "val" for s in samples), "i1", len(samples)),
        "md5": np.asarray([s.md5 for s in samples], dtype="S32"),
    }


def index_of(samples: Sequence[SampleLike]) -> dict:
    """The leaf index of ``samples`` as decode_index returns it: the arrays, and the
    ``segments`` and ``labels`` tables their codes point into."""
    segments = sorted({s.segment_id for s in samples})
    seg_pos = {v: i for i, v in enumerate(segments)}
    return {
        "segments": segments,
        "seg": np.asarray([seg_pos[s.segment_id] for s in samples], dtype="<i4"),
        "row": np.asarray([s.row for s in samples], dtype="<i8"),
        **codes_of(samples),
    }


def index_bytes(samples: Sequence[SampleLike]) -> bytes:
    index = index_of(samples)
    header = {k: index[k] for k in ("segments", "labels")}
    header.update(format=1, n=index["n"])
    body = b"".join(index[name].tobytes() for name, _ in _INDEX_FIELDS)
    return json.dumps(header, sort_keys=True).encode() + b"\n" + body


def decode_index(raw: bytes, source: object = "leaf index", *, segments: bool = True) -> dict:
    """The arrays and tables of a leaf's .idx bytes (``segments``, ``labels``: lists). With
    ``segments`` False, the segments table is not parsed (None): a leaf's samples lie in
    dozens of segments, whose names are most of its header and of its decode time, and
    ``version_id`` reads only md5s, labels and splits."""
    try:
        cut = raw.index(b"\n")
        head = raw[:cut]
        if not segments:
            # The keys are sorted, "segments" last; a name inside a label would have its
            # quotes escaped, and segment names are hex: this is the key.
            at = head.rfind(b', "segments": ')
            if at > 0:
                head = head[:at] + b"}"
        header = json.loads(head)
        n = int(header["n"])
        tables = header["segments"] if segments else None, header["labels"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ChunkError(f"{source}: not a leaf index ({exc})") from None
    out: dict = {"segments": tables[0], "labels": tables[1], "n": n}
    offset = cut + 1
    for name, dtype in _INDEX_FIELDS:
        size = np.dtype(dtype).itemsize * n
        if offset + size > len(raw):
            raise ChunkError(f"{source}: leaf index is truncated")
        out[name] = np.frombuffer(raw, dtype=dtype, count=n, offset=offset)
        offset += size
    return out


def node_bytes(children: Sequence[LeafRef]) -> bytes:
    return (
        json.dumps({"children": [c.to_dict() for c in children]}, sort_keys=True) + "\n"
    ).encode()


# The chunk_entries columns a leaf's rows fill, after its hash, in this order.
ENTRY_COLUMNS = (
    "pos",
    "path",
    "md5",
    "label",
    "split",
    "segment_id",
    "row",
    "line",
    "copy",
    "duplicate",
)


def entry_rows(samples: Sequence[SampleLike]) -> Iterator[tuple]:
    """The chunk_entries rows of one leaf (without its hash), in ENTRY_COLUMNS order. A
    generator: a full commit records a million of them, and the store takes them in batches
    (a dict or tuple per sample held at once was most of its peak memory)."""
    for k, s in enumerate(samples):
        yield (
            k,
            s.path,
            s.md5,
            s.label,
            s.split,
            s.segment_id,
            int(s.row),
            None if s.line is None else int(s.line),
            int(s.copy),
            bool(s.duplicate),
        )

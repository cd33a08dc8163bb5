"""Reading a version's chunk tree from DATA_ROOT (the names and encodings are chunks.py's).

The nodes (``<h>.node.json``, checked against their name), each leaf's index (``<h>.idx``,
checked against the sha256 its node lists, then decoded) and metadata part (``<h>.jsonl``,
checked against its name). On an ``s3://`` root a reader's cache holds each node's pack
(``<h>.pack``, chunkpack.py) instead: a node and its leaves' indexes are read from it, every
part checked the same way.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pipeline.datasets import chunkpack
from pipeline.datasets.chunkpack import PACK_SUFFIX
from pipeline.datasets.chunks import (
    INDEX_SUFFIX,
    META_SUFFIX,
    NODE_SUFFIX,
    ChunkError,
    LeafRef,
    chunk_file,
    chunk_path,
    decode_index,
)


def _pack_parts(path: Path) -> list[bytes] | None:
    """The parts of the node pack at ``path`` (chunkpack.py), or None when there is none (a
    local data root, or a version published before packs)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return chunkpack.decode(raw)
    except (ValueError, KeyError, TypeError) as exc:
        raise ChunkError(f"{path}: not a node pack ({exc})") from None


def parse_node(raw: bytes, source: object, h: str) -> list[LeafRef]:
    if hashlib.sha256(raw).hexdigest() != h:
        raise ChunkError(f"{source}: bytes do not match the node's name")
    return [
        LeafRef(c["hash"], int(c["count"]), int(c["bytes"]), c["sha256_npz"])
        for c in json.loads(raw)["children"]
    ]


def read_node(data_root: Path, h: str) -> list[LeafRef]:
    path = chunk_path(data_root, h, NODE_SUFFIX)
    try:
        return parse_node(path.read_bytes(), path, h)
    except FileNotFoundError:
        parts = _pack_parts(chunk_path(data_root, h, PACK_SUFFIX))
        if not parts:
            raise ChunkError(f"{path}: chunk node missing") from None
        return parse_node(parts[0], chunk_path(data_root, h, PACK_SUFFIX), h)


def walk_leaves(data_root: Path, section: dict) -> list[LeafRef]:
    """The leaves of a manifest's ``chunks`` section, in version order."""
    out: list[LeafRef] = []
    for node in section["nodes"]:
        out.extend(read_node(data_root, node["hash"]))
    if len(out) != section["leaves"]:
        raise ChunkError(f"the chunk tree has {len(out)} leaves, its manifest {section['leaves']}")
    return out


def check_index(raw: bytes, source: object, leaf: LeafRef, *, segments: bool = True) -> dict:
    if hashlib.sha256(raw).hexdigest() != leaf.sha256_idx:
        raise ChunkError(f"{source}: bytes do not match the checksum its node lists")
    out = decode_index(raw, source, segments=segments)
    if out["n"] != leaf.count:
        raise ChunkError(f"{source}: {out['n']} samples, its node lists {leaf.count}")
    return out


def index_raw(data_root: Path, leaf: LeafRef) -> tuple[bytes, str]:
    path = chunk_file(data_root, leaf.hash, INDEX_SUFFIX)
    try:
        with open(path, "rb") as fh:
            return fh.read(), path
    except FileNotFoundError:
        raise ChunkError(f"{path}: leaf index missing") from None


def read_index(data_root: Path, leaf: LeafRef, *, segments: bool = True) -> dict:
    raw, path = index_raw(data_root, leaf)
    return check_index(raw, path, leaf, segments=segments)


def pack_indexes(path: Path, h: str) -> list[tuple[LeafRef, dict]] | None:
    """(leaf, its decoded index) for each child of node ``h``, from the pack file at ``path``,
    every part checked; None when there is no such file."""
    parts = _pack_parts(path)
    if parts is None:
        return None
    leaves = parse_node(parts[0], path, h) if parts else []
    if len(parts) != len(leaves) + 1:
        raise ChunkError(f"{path}: {len(parts) - 1} indexes, its node lists {len(leaves)} leaves")
    return [
        (leaf, check_index(raw, path, leaf)) for leaf, raw in zip(leaves, parts[1:], strict=True)
    ]


def node_indexes(data_root: Path, h: str) -> list[tuple[LeafRef, dict]]:
    """(leaf, its decoded index) for each child of node ``h``, in order: from the node's pack
    when the data root holds one (a reader's cache of an s3:// root), else from its files."""
    packed = pack_indexes(chunk_path(data_root, h, PACK_SUFFIX), h)
    if packed is not None:
        return packed
    return [(leaf, read_index(data_root, leaf)) for leaf in read_node(data_root, h)]


def read_meta(data_root: Path, h: str) -> bytes:
    """A leaf's metadata part, checked against its name."""
    path = chunk_file(data_root, h, META_SUFFIX)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise ChunkError(f"{path}: leaf metadata part missing") from None
    if hashlib.sha256(raw).hexdigest() != h:
        raise ChunkError(f"{path}: bytes do not match the leaf's name")
    return raw


def read_entries(data_root: Path, h: str) -> list[dict]:
    """A leaf's samples as metadata records (without ``index``)."""
    raw = read_meta(data_root, h)
    # One parse of the part as a JSON array: a line is one object, and JSON escapes every
    # newline inside a string, so the line breaks are exactly the separators. One C-level call
    # instead of one json.loads per sample (the delta commit reads its windows' leaves).
    try:
        return json.loads(b"[" + raw.rstrip(b"\n").replace(b"\n", b",") + b"]")
    except ValueError as exc:
        raise ChunkError(
            f"{chunk_file(data_root, h, META_SUFFIX)}: not JSON Lines ({exc})"
        ) from None

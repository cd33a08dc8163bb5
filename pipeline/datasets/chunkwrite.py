"""Writing a version's chunk tree: cut its samples into leaves (taking the parent's leaves
where a run of samples is unchanged), group them into nodes, and write the chunk files that do
not exist yet, once each.

The format and the cut rule are pipeline/datasets/chunks.py's, the reading side
pipeline/datasets/chunkread.py's; this module owns only the write, whose result must be byte-identical to chunking from scratch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

# The cut rule is read through the module (chunks.next_cut, chunks._cut_at), not imported by
# name: tests/datasets/test_chunks_reuse.py spies on chunks.next_cut to check that an
# unchanged run takes the parent's leaves without running the rule.
from pipeline.datasets import chunks
from pipeline.datasets.chunks import (
    INDEX_SUFFIX,
    META_SUFFIX,
    NODE_SUFFIX,
    LeafRef,
    NodeRef,
    SampleLike,
    Tree,
    chunk_file,
    chunk_path,
    entry_line,
    index_bytes,
    meta_bytes,
    node_bytes,
    node_groups,
    sample_key,
)
from pipeline.datasets.once_writer import OnceWriter


class KeptParts(dict[str, bytes]):
    """Metadata parts by hash, kept while they fit in ``room`` bytes: a cut that keeps them
    for the write (write_pieces) never holds more, whatever it cuts."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def keep(self, h: str, meta: bytes) -> None:
        if h not in self and len(meta) <= self.room:
            self[h] = meta
            self.room -= len(meta)


def _cuts(
    samples: Sequence[SampleLike],
    parent: Sequence[tuple[LeafRef, bytes]] | None,
    settled: dict[str, bytes] | None = None,
    formatted: KeptParts | None = None,
) -> list[tuple[int, int, str, int, LeafRef | None]]:
    """(start, stop, hash, size, the parent's leaf when it is one) of each leaf, by
    leaf_bounds' rule. Walking from a cut, a sample that begins one of the parent's leaves
    offers that leaf: if the next ``count`` samples format to its very bytes and a cut follows
    them, it is that leaf (same bytes: same keys, so no cut inside it, as in the parent), and
    its samples' keys need no hash. A leaf in ``settled`` (hash -> key of its last sample: the
    commit knows no sample in its path range changed since the parent, build/changes.py) needs
    no formatting either: its first and last keys in place and the cut after it suffice.
    Anywhere else the rule runs sample by sample. Either way
    every cut is the one leaf_bounds makes: the result is byte-identical to chunking from
    scratch, which tests/datasets/test_chunks_reuse.py checks on random edits.

    A sample is formatted once however its leaf is found (an offered leaf that does not match
    shares its lines with the leaf cut instead). ``formatted``, when given, keeps each new
    leaf's metadata part by hash, for write_pieces, as far as its room allows: a delta commit's
    windows keep them (a few MB); a full commit's would be every sample's (~200 MB at a
    million), so it formats its new leaves again instead."""
    offered = {key: leaf for leaf, key in parent or ()}
    out: list[tuple[int, int, str, int, LeafRef | None]] = []
    n = len(samples)
    start = 0
    lines: list[str] = []  # the metadata lines of samples[start:], as far as formatted
    while start < n:
        leaf = offered.get(sample_key(samples[start])) if offered else None
        if leaf is not None and start + leaf.count <= n:
            stop = start + leaf.count
            last = settled.get(leaf.hash) if settled else None
            if (
                last is not None
                and sample_key(samples[stop - 1]) == last
                and chunks._cut_at(samples, start, stop - 1)
            ):
                out.append((start, stop, leaf.hash, leaf.bytes, leaf))
                del lines[: stop - start]
                start = stop
                continue
            meta = _part(samples, start, stop, lines)
            if (
                len(meta) == leaf.bytes
                and hashlib.sha256(meta).hexdigest() == leaf.hash
                and chunks._cut_at(samples, start, stop - 1)
            ):
                out.append((start, stop, leaf.hash, leaf.bytes, leaf))
                del lines[: stop - start]
                start = stop
                continue
        stop = chunks.next_cut(samples, start)
        meta = _part(samples, start, stop, lines)
        h = hashlib.sha256(meta).hexdigest()
        if formatted is not None:
            formatted.keep(h, meta)
        out.append((start, stop, h, len(meta), None))
        del lines[: stop - start]  # what is left was formatted ahead, for the next leaf
        start = stop
    return out


def _part(samples: Sequence[SampleLike], start: int, stop: int, lines: list[str]) -> bytes:
    """The metadata part of samples[start:stop] (chunks.meta_bytes), formatting only the lines
    ``lines`` (those of samples[start:], in order) does not hold yet, and keeping them there."""
    if len(lines) < stop - start:
        lines += [entry_line(s) + "\n" for s in samples[start + len(lines) : stop]]
    return "".join(lines[: stop - start]).encode()


def write_tree(
    data_root: Path,
    samples: Sequence[SampleLike],
    *,
    known: Callable[[list[str]], dict[str, str]] | None = None,
    parent: Sequence[tuple[LeafRef, bytes]] | None = None,
    settled: dict[str, bytes] | None = None,
) -> Tree:
    """Cut ``samples`` into leaves and nodes and write the chunk files that do not exist yet.
    ``known`` maps leaf hashes to the sha256 of their .idx for the leaves the store already
    holds (their entries are recorded, their .idx need not be rebuilt); the others come back in
    ``new_leaves`` with their samples. ``parent`` (the parent version's leaves, each with the
    key of its first sample) lets an unchanged run of samples take the parent's leaves without
    hashing its keys, and a ``settled`` one without formatting them (``_cuts``). Call under the segments guard (gc must not drop a reused
    chunk before the version that references it is recorded)."""
    # Pass 1: the leaves' names. Their bytes are not kept: a million samples make ~200 MB of
    # metadata, and only the new leaves' bytes are needed again (pass 2 formats them again).
    cuts = _cuts(samples, parent, settled)
    pieces = [(h, size, reused, samples[start:stop]) for start, stop, h, size, reused in cuts]
    tree = write_pieces(data_root, pieces, known=known)
    tree.bounds = [(c[0], c[1]) for c in cuts]
    return tree


# One leaf of a tree to write: (hash, metadata bytes, the parent's leaf when it is one, its
# samples). Samples None: a parent's leaf taken whole, whose files must exist (delta.py).
Piece = tuple[str, int, LeafRef | None, Sequence[SampleLike] | None]


def write_pieces(
    data_root: Path,
    pieces: Sequence[Piece],
    *,
    known: Callable[[list[str]], dict[str, str]] | None = None,
    present: chunks.Present | None = None,
    formatted: dict[str, bytes] | None = None,
) -> Tree:
    """Write the leaves that do not exist yet and the nodes above them (pass 2 of write_tree,
    also the delta commit's write, which cuts only the runs of samples that changed).
    ``present``: which chunk files exist, as the caller read them under the same segments
    guard (else read here); ``formatted``: metadata parts the cut already made, by hash."""
    fresh = [p[0] for p in pieces if p[2] is None]
    have = known(fresh) if known is not None and fresh else {}
    if present is None:
        present = chunks.Present(data_root, [p[0] for p in pieces])
    leaves: list[LeafRef] = []
    new_leaves: list[tuple[LeafRef, Sequence[SampleLike]]] = []
    parts: dict[str, Sequence[SampleLike]] = {}
    written = 0
    out = OnceWriter()
    for h, size, reused, part in pieces:
        meta_path = chunk_file(data_root, h, META_SUFFIX)
        idx_path = chunk_file(data_root, h, INDEX_SUFFIX)
        sha_idx = reused.sha256_idx if reused is not None else have.get(h)
        if part is not None:
            parts[h] = part
        if sha_idx is not None and present.has(h, META_SUFFIX) and present.has(h, INDEX_SUFFIX):
            leaves.append(LeafRef(h, reused.count if part is None else len(part), size, sha_idx))
            continue
        if part is None:
            raise chunks.ChunkError(
                f"{meta_path}: leaf files missing, and no samples to rewrite them"
            )
        idx = index_bytes(part)
        # The index first (renamed first): a metadata part on disk means its index is too.
        meta = formatted.get(h) if formatted else None
        if meta is None:
            meta = meta_bytes(part)
        written += out.add(Path(idx_path), idx) + out.add(Path(meta_path), meta)
        leaf = LeafRef(h, len(part), size, hashlib.sha256(idx).hexdigest())
        leaves.append(leaf)
        if sha_idx is None:
            new_leaves.append((leaf, part))  # its store rows are made as they are inserted
    nodes: list[NodeRef] = []
    new_nodes: list[NodeRef] = []
    for group in node_groups(leaves):
        raw = node_bytes(group)
        h = hashlib.sha256(raw).hexdigest()
        path = chunk_path(data_root, h, NODE_SUFFIX)
        n = out.add(path, raw)
        node = NodeRef(h, sum(c.count for c in group), sum(c.bytes for c in group))
        nodes.append(node)
        if n:
            new_nodes.append(node)
        written += n
    out.close()  # every chunk file durable before the caller writes a manifest naming it
    return Tree(leaves, nodes, new_leaves, new_nodes, written, parts=parts)

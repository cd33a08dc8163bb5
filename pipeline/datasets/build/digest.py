"""The head's digest: what a delta commit needs of the head's leaves, in one local file.

A delta commit (delta.py) keeps most of the head's leaves as they are, yet its version id is
a hash over every sample: the sorted (md5, label, split) list. Read leaf by leaf, that is one
``.idx`` file per leaf: ~8,000 at a million samples, 0.35-0.7 s of a +1,000-file commit,
whatever it changed. So a commit that makes a version the head also writes that version's
DIGEST: its leaves (hash, count) in order and their samples' (md5, label, split) codes in the
same order, as one file, ``DATA_ROOT/digests/<dataset>/<version_id>.digest`` (~37 bytes a
sample). The next delta commit slices the reused leaves' codes out of it.

The digest also holds each leaf's EDGES, the (path, line, copy) of its first and last sample:
the delta commit's windows are placed by them (windows.py), and read from the store they are
two index probes a leaf, ~0.2-0.3 s at a million samples. A digest without them (or with a
list that does not fit its leaves) leaves the commit to read them from the store.

(The leaves' summaries stay in the store, read per leaf: as JSON in the digest they cost more
to write and parse, ~0.65 s at a million samples, than the store's rows, ~0.3 s.)

A digest is a cache. It is derived from immutable leaves, so it never goes stale; it is written
after the version is published (a temp name, then a rename: never seen half-written), and
checked before use: a crc32 over its bytes, its version id, and the head's leaf list read from
the chunk tree. Missing or not matching, the commit reads the leaves as before, and nothing is
lost but time. Only the newest head's digest (and its other caches) is kept per dataset
(cachefile.py).

Layout (cachefile.py's frame): a crc32 line; one JSON header line (``format``,
``version_id``, ``leaves``: [[hash, count], ...], ``labels``, ``n``, and optionally ``edges``:
[[first path, line, copy, last path, line, copy], ...], one per leaf); then the raw arrays
``label`` int32 (into ``labels``, -1: none), ``split`` int8 (1 = val), ``md5`` S32, each of
``n`` rows.

The crc32 catches a torn or damaged file, not a deliberate edit: unlike a leaf index, checked
against the sha256 its node lists, a digest is trusted like the store's rows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.datasets import cachefile
from pipeline.datasets.chunks import LeafRef

log = logging.getLogger("laketrain.build")

SUFFIX = ".digest"
_FORMAT = 1
_FIELDS = (("label", "<i4"), ("split", "i1"), ("md5", "S32"))


# A leaf's edges: the (path, line, copy) of its first and of its last sample.
Key = tuple[str, int | None, int]
Edges = tuple[Key, Key]


@dataclass
class Digest:
    version_id: str
    leaves: list[tuple[str, int]]
    codes: dict  # merge_codes' shape: labels, n, label, split, md5, in leaf order
    edges: list[Edges] | None = None  # one per leaf, in order (None: not in this digest)

    def edges_by_hash(self) -> dict[str, Edges] | None:
        """hash -> edges of each leaf (chunkrows.leaf_edges' shape), or None without them."""
        if self.edges is None:
            return None
        return {h: e for (h, _count), e in zip(self.leaves, self.edges, strict=True)}

    def spans(self) -> dict[str, tuple[int, int]]:
        """hash -> (start, stop) of each leaf's rows in ``codes``."""
        out: dict[str, tuple[int, int]] = {}
        at = 0
        for h, count in self.leaves:
            out[h] = (at, at + count)
            at += count
        return out

    def slice(self, start: int, stop: int) -> dict:
        """Rows start:stop of the codes, as an index-like dict (manifest.merge_codes takes it)."""
        c = self.codes
        return {
            "labels": c["labels"],
            "n": stop - start,
            "label": c["label"][start:stop],
            "split": c["split"][start:stop],
            "md5": c["md5"][start:stop],
        }


def path_of(data_root: Path, dataset: str, version_id: str) -> Path:
    return cachefile.path_of(data_root, dataset, version_id, SUFFIX)


def _parts(
    version_id: str, leaves: Sequence[LeafRef], codes: dict, edges: Sequence[Edges] | None
) -> list:
    """The digest's bytes in parts, the arrays as views of ``codes``: as a copy of a million
    samples' codes, joined, at the end of a full commit (its memory's peak) they added ~80 MB
    to it."""
    header = {
        "format": _FORMAT,
        "version_id": version_id,
        "leaves": [[leaf.hash, leaf.count] for leaf in leaves],
        "labels": list(codes["labels"]),
        "n": int(codes["n"]),
    }
    if edges is not None:
        header["edges"] = [[*first, *last] for first, last in edges]
    return cachefile.frame(header, [(codes[name], dtype) for name, dtype in _FIELDS])


def _edges(raw: object, leaves: int) -> list[Edges] | None:
    """The header's edges, or None (absent, or not one well-formed entry per leaf: logged by
    the caller's fallback, the store's rows are read instead)."""
    if not isinstance(raw, list) or len(raw) != leaves:
        return None
    out: list[Edges] = []
    for e in raw:
        if not (
            isinstance(e, list)
            and len(e) == 6
            and isinstance(e[0], str)
            and isinstance(e[3], str)
            and all(v is None or type(v) is int for v in (e[1], e[4]))
            and type(e[2]) is int
            and type(e[5]) is int
        ):
            return None
        out.append(((e[0], e[1], e[2]), (e[3], e[4], e[5])))
    return out


def decode(raw: bytes) -> Digest:
    """The digest in ``raw``; ValueError when it is not a whole digest of this format."""
    header, arrays = cachefile.unframe(raw, _FORMAT, [dtype for _name, dtype in _FIELDS])
    n = int(header["n"])
    leaves = [(str(h), int(count)) for h, count in header["leaves"]]
    if any(count < 0 for _h, count in leaves) or sum(c for _h, c in leaves) != n:
        raise ValueError("its leaves do not add up to its rows")
    codes: dict = {"labels": list(header["labels"]), "n": n}
    codes.update({name: a for (name, _dtype), a in zip(_FIELDS, arrays, strict=True)})
    return Digest(
        str(header["version_id"]), leaves, codes, _edges(header.get("edges"), len(leaves))
    )


def load(
    data_root: Path, dataset: str, version_id: str, leaves: Sequence[LeafRef]
) -> Digest | None:
    """The digest of version ``version_id`` whose leaves are ``leaves`` (read from its chunk
    tree), or None: none there, damaged, or not this tree (each logged; the caller reads the
    leaves instead)."""
    path = path_of(data_root, dataset, version_id)
    raw = cachefile.read(path, "digest, reading the leaves")
    if raw is None:
        return None
    try:
        digest = decode(raw)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("%s: not a digest, reading the leaves (%s)", path, exc)
        return None
    if digest.version_id != version_id or digest.leaves != [(f.hash, f.count) for f in leaves]:
        log.warning("%s: another version's digest, reading the leaves", path)
        return None
    return digest


def write(
    data_root: Path,
    dataset: str,
    version_id: str,
    leaves: Sequence[LeafRef],
    codes: dict,
    edges: Sequence[Edges] | None = None,
) -> None:
    """Write the digest of the version just made the head and drop the dataset's others
    (``edges``: one per leaf, or None to leave them out). A cache: a failure is logged, never
    raised (the next commit reads the leaves instead)."""
    path = path_of(data_root, dataset, version_id)
    if sum(leaf.count for leaf in leaves) != codes["n"]:
        log.warning("%s: digest not written (the leaves do not add up to the codes)", path)
        return
    if edges is not None and len(edges) != len(leaves):
        edges = None
    cachefile.write(path, _parts(version_id, leaves, codes, edges), "digest")


def tree_edges(tree, known: dict[str, Edges] | None) -> list[Edges] | None:
    """The edges of every leaf of a tree just written: from the samples the commit held
    (``tree.parts``), else from ``known`` (the head's, for the leaves a delta took whole);
    None when a leaf has neither."""
    out: list[Edges] = []
    for leaf in tree.leaves:
        part = tree.parts.get(leaf.hash)
        if part:
            out.append((_key(part[0]), _key(part[-1])))
        elif known is not None and leaf.hash in known:
            out.append(known[leaf.hash])
        else:
            return None
    return out


def _key(sample) -> Key:
    """A sample's (path, line, copy), as chunkrows.leaf_edges reads it from the store."""
    return (sample.path, None if sample.line is None else int(sample.line), int(sample.copy))

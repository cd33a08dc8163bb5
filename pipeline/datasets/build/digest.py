"""The head's digest: what a delta commit needs of the head's leaves, in one local file.

A delta commit (delta.py) keeps most of the head's leaves as they are, yet its version id is
a hash over every sample: the sorted (md5, label, split) list. Read leaf by leaf, that is one
``.idx`` file per leaf: ~8,000 at a million samples, 0.35-0.7 s of a +1,000-file commit,
whatever it changed. So a commit that makes a version the head also writes that version's
DIGEST: its leaves (hash, count) in order and their samples' (md5, label, split) codes in the
same order, as one file, ``DATA_ROOT/digests/<dataset>/<version_id>.digest`` (~37 bytes a
sample). The next delta commit slices the reused leaves' codes out of it.

(The leaves' summaries stay in the store, read per leaf: as JSON in the digest they cost more
to write and parse, ~0.65 s at a million samples, than the store's rows, ~0.3 s.)

A digest is a cache. It is derived from immutable leaves, so it never goes stale; it is written
after the version is published (a temp name, then a rename: never seen half-written), and
checked before use: a crc32 over its bytes, its version id, and the head's leaf list read from
the chunk tree. Missing or not matching, the commit reads the leaves as before, and nothing is
lost but time. Only the newest head's digest (and its other caches) is kept per dataset
(cachefile.py).

Layout (cachefile.py's frame): a crc32 line; one JSON header line (``format``,
``version_id``, ``leaves``: [[hash, count], ...], ``labels``, ``n``); then the raw arrays
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


@dataclass
class Digest:
    version_id: str
    leaves: list[tuple[str, int]]
    codes: dict  # merge_codes' shape: labels, n, label, split, md5, in leaf order

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


def _parts(version_id: str, leaves: Sequence[LeafRef], codes: dict) -> list:
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
    return cachefile.frame(header, [(codes[name], dtype) for name, dtype in _FIELDS])


def decode(raw: bytes) -> Digest:
    """The digest in ``raw``; ValueError when it is not a whole digest of this format."""
    header, arrays = cachefile.unframe(raw, _FORMAT, [dtype for _name, dtype in _FIELDS])
    n = int(header["n"])
    leaves = [(str(h), int(count)) for h, count in header["leaves"]]
    if any(count < 0 for _h, count in leaves) or sum(c for _h, c in leaves) != n:
        raise ValueError("its leaves do not add up to its rows")
    codes: dict = {"labels": list(header["labels"]), "n": n}
    codes.update({name: a for (name, _dtype), a in zip(_FIELDS, arrays, strict=True)})
    return Digest(str(header["version_id"]), leaves, codes)


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
) -> None:
    """Write the digest of the version just made the head and drop the dataset's others. A
    cache: a failure is logged, never raised (the next commit reads the leaves instead)."""
    path = path_of(data_root, dataset, version_id)
    if sum(leaf.count for leaf in leaves) != codes["n"]:
        log.warning("%s: digest not written (the leaves do not add up to the codes)", path)
        return
    cachefile.write(path, _parts(version_id, leaves, codes), "digest")

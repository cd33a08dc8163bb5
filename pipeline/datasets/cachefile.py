"""The head's cache files (its digest: build/digest.py; its near-duplicate groups:
quality/neargroups.py): one owner for where they live, how they are laid out, checked, read
and written, and which are kept.

``DATA_ROOT/digests/<dataset>/<version_id>.<kind>``: a dataset's folder holds one head's
caches; writing one removes the files of any other version there (a head moved without a
commit, by rollback or approval, leaves its files to gc: ``gc.stale_head_caches``).

A first line of 8 hex digits, the crc32 of everything after it; one JSON header line (which
names the file's ``format`` and its row count ``n``); then raw arrays of ``n`` rows each, in
a fixed order of dtypes. Written to a temp name, then renamed (never seen half-written); no
fsync: a file a crash leaves empty or torn fails its crc32, and a cache costs only time.
The crc32 catches a torn or damaged file, not a deliberate edit.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

log = logging.getLogger("laketrain.build")

CACHE_DIR = "digests"


def path_of(data_root: Path, dataset: str, version_id: str, suffix: str) -> Path:
    return Path(data_root) / CACHE_DIR / dataset / f"{version_id}{suffix}"


def head_of(name: str) -> str:
    """The version a cache file's name belongs to ("" for a temp file)."""
    return "" if name.startswith(".") else name.split(".", 1)[0]


def frame(header: dict, arrays: Sequence[tuple[np.ndarray, str]]) -> list:
    """The file's bytes in parts (the arrays as views: a million samples' codes are not
    copied to be written), its crc32 line first."""
    body = [json.dumps(header, sort_keys=True).encode() + b"\n"] + [
        memoryview(np.ascontiguousarray(a, dtype)).cast("B") for a, dtype in arrays
    ]
    crc = 0
    for part in body:
        crc = zlib.crc32(part, crc)
    return [b"%08x\n" % crc, *body]


def unframe(raw: bytes, fmt: int, dtypes: Sequence[str]) -> tuple[dict, list[np.ndarray]]:
    """(header, arrays) of a whole file of format ``fmt``; ValueError otherwise."""
    if len(raw) < 9 or raw[8:9] != b"\n" or int(raw[:8], 16) != zlib.crc32(raw[9:]):
        raise ValueError("checksum does not match")
    cut = raw.index(b"\n", 9)
    header = json.loads(raw[9:cut])
    if not isinstance(header, dict) or header.get("format") != fmt:
        raise ValueError(f"not of format {fmt}")
    n = int(header["n"])
    if n < 0:
        raise ValueError("a negative row count")
    arrays = []
    offset = cut + 1
    for dtype in dtypes:
        size = np.dtype(dtype).itemsize * n
        if offset + size > len(raw):
            raise ValueError("truncated")
        arrays.append(np.frombuffer(raw, dtype=dtype, count=n, offset=offset))
        offset += size
    if offset != len(raw):
        raise ValueError("bytes after its arrays")
    return header, arrays


def read(path: Path, what: str) -> bytes | None:
    """The file's bytes, or None: not there (silently), or unreadable (logged)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("%s: unreadable %s (%s)", path, what, exc)
        return None


def write(path: Path, parts: list, what: str) -> None:
    """Write ``parts`` at ``path`` (a ``path_of``) by a rename, then drop the files of other
    versions beside it. A cache: a failure is logged, never raised."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(temp, "wb") as fh:
            for part in parts:
                fh.write(part)
        os.replace(temp, path)
    except OSError as exc:
        log.warning("%s: %s not written (%s)", path, what, exc)
        return
    head = head_of(path.name)
    try:
        for other in path.parent.iterdir():
            if head_of(other.name) != head:
                other.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("%s: other heads' caches not removed (%s)", path.parent, exc)

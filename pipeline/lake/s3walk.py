"""Walk a lake in S3 (``LAKE_DIR=s3://bucket/prefix``) with listings only: nothing is read.

The S3 counterpart of :mod:`pipeline.lake.walk`, yielding the same entries: a ``Candidate``
(its ``abspath`` is the object's URL, its ``key`` an :class:`S3Key`), a ``Refused`` key, and
nothing for an object whose key equals its ledger row (counted in ``FastPath.unchanged``).

- One delimited listing finds the datasets (first-level prefixes); each dataset prefix is then
  listed in full (paginated ListObjectsV2, or ListObjectVersions on a versioned bucket), several
  prefixes at once.
- The ignore rules are the folder walk's, on key segments: hidden names, ``*.tmp``/``*.part``,
  ``_``-folders. A PUT is atomic (an object is there whole or not at all), so there is no settle
  wait. A zero-byte key ending in ``/`` is a "folder" marker that consoles create: skipped.
- A key that could not be a file name is refused with the reason (:func:`key_problem`), so the
  build, the export and every other consumer of a ledger path can take it for a real name.
- A listing that fails after its retries fails the walk (StorageError naming the URL): a
  dataset that could not be listed must not be taken for emptied.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from pipeline.lake.walk import IGNORED_SUFFIXES, Candidate, FastPath, Refused
from pipeline.storage.listing import LIST_CONCURRENCY, LakeReader, ObjectInfo, prefix_of
from pipeline.storage.urls import join

MAX_NAME_BYTES = 255  # a file name longer than this exists on no common file system


class S3Key(NamedTuple):
    """What decides whether an object must be hashed again (see ObjectInfo)."""

    size: int
    mtime_ns: int
    etag: str
    version_id: str | None


def escape_key(path: str) -> str:
    """``path`` with control characters written as ``\\xNN``, as the folder walk writes bytes
    that are not UTF-8: a ledger path stays printable on one line."""
    if all(ch >= " " and ch != "\x7f" for ch in path):
        return path
    return "".join(f"\\x{ord(ch):02x}" if ch < " " or ch == "\x7f" else ch for ch in path)


def segment_problem(rel: str) -> str | None:
    """Why the lake-relative key ``rel`` cannot be a path at all, or None: checked before the
    ignore rules, which would otherwise take a ``..`` segment for a hidden folder."""
    parts = rel.split("/")
    if any(p == "" for p in parts):
        return "empty path segment in the key ('//', or a leading '/'); rename the object"
    if any(p in (".", "..") for p in parts):
        return "'.' or '..' segment in the key; rename the object"
    return None


def key_problem(rel: str) -> str | None:
    """Why the lake-relative key ``rel`` cannot be a file name, or None."""
    problem = segment_problem(rel)
    if problem is not None:
        return problem
    parts = rel.split("/")
    if any(ch < " " or ch == "\x7f" for ch in rel):
        return "control character in the key (shown as \\xNN); rename the object"
    if any(len(p.encode("utf-8")) > MAX_NAME_BYTES for p in parts):
        return f"a segment of the key is longer than {MAX_NAME_BYTES} bytes; rename the object"
    return None


def is_ignored_key(rel: str) -> bool:
    """The folder walk's ignore rules on a key: a hidden or ``_`` folder anywhere below the
    dataset, a hidden or partial file name."""
    *folders, name = rel.split("/")
    if any(f.startswith((".", "_")) for f in folders if f):
        return True
    return name.startswith(".") or name.endswith(IGNORED_SUFFIXES)


def walk_s3_lake(
    lake: str,
    *,
    dataset: str | None = None,
    fast: FastPath | None = None,
    reader: LakeReader | None = None,
    versioned: bool | None = None,
) -> Iterator[Candidate | Refused]:
    """Yield every entry of the lake at ``lake`` (or of ``lake/dataset``), listings only. With
    ``fast`` (rows ``(path, size, mtime_ns, etag, version_id, deleted)``), objects that match
    their row are counted there instead of yielded."""
    reader = reader or LakeReader()
    if versioned is None:
        versioned = reader.versioned(lake)
    if dataset is not None:
        datasets = [dataset]
    else:
        names, top = reader.top_level(lake)
        _, prefix = prefix_of(lake)
        for obj in top:
            rel = obj.key[len(prefix) :]
            if rel and not rel.startswith(".") and not rel.endswith(IGNORED_SUFFIXES):
                yield Refused(escape_key(rel), "not inside a dataset folder (lake/<dataset>/...)")
        # "_x" and hidden first-level prefixes are skipped, like such folders; an empty
        # name ("lake//a") is listed so that its keys are refused by name.
        datasets = [n for n in names if not n.startswith((".", "_"))]

    _, lake_prefix = prefix_of(lake)

    def listing(name: str) -> list[ObjectInfo]:
        # A whole prefix in memory (~100 bytes an object): the key-and-prefix check needs it.
        url = join(lake, name)
        return list(reader.objects(url, prefix=f"{lake_prefix}{name}/", versioned=versioned))

    if len(datasets) <= 1:
        listed = map(listing, datasets)
        yield from _entries(lake, datasets, listed, fast)
        return
    with ThreadPoolExecutor(min(LIST_CONCURRENCY, len(datasets))) as pool:
        # map keeps the datasets' order; each dataset is yielded as soon as its listing is in.
        yield from _entries(lake, datasets, pool.map(listing, datasets), fast)


def _entries(
    lake: str, datasets: list[str], listed: Iterator[list[ObjectInfo]], fast: FastPath | None
) -> Iterator[Candidate | Refused]:
    bucket, prefix = prefix_of(lake)
    known = fast.known if fast is not None else {}
    pop = known.pop
    stale = fast.stale if fast is not None else {}
    for objects in listed:
        rels = [(o.key[len(prefix) :], o) for o in objects]
        # A key that is also the folder of other keys ("a/b" beside "a/b/c.png") cannot be
        # both a file and a folder on disk.
        folders = {rel.rsplit("/", 1)[0] for rel, _ in rels if "/" in rel}
        unchanged = 0
        for rel, obj in rels:
            if rel.endswith("/") and obj.size == 0:
                continue  # a console's "folder" marker
            problem = segment_problem(rel)
            if problem is None:
                if is_ignored_key(rel):
                    continue
                problem = key_problem(rel)
            if problem is None and rel in folders:
                problem = (
                    "the key is also a folder of other keys (an object and a prefix share the name)"
                )
            if problem is not None:
                yield Refused(escape_key(rel), problem)
                continue
            row = pop(rel, None)
            if row is not None:
                if (
                    row[1] == obj.size
                    and row[2] == obj.mtime_ns
                    and row[3] == obj.etag
                    and row[4] == obj.version_id
                ):
                    unchanged += 1
                    if "\\" in rel:
                        fast.matched_escapable.add(rel)  # type: ignore[union-attr]
                    continue
                stale[rel] = row
            yield Candidate(
                rel,
                f"s3://{bucket}/{obj.key}",
                S3Key(obj.size, obj.mtime_ns, obj.etag, obj.version_id),  # type: ignore[arg-type]
            )
        if fast is not None:
            fast.unchanged += unchanged

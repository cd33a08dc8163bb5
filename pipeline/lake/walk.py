"""Walk a lake with ``os.scandir``, stat only: no file is opened and nothing is written (a
folder is opened read-only to be listed, so that its files are statted by name relative to it).

The walk sorts every entry into one of: a candidate file (with its stat key), a file still
settling, a refused entry (symlink escaping the lake, special file) or an unlistable folder.
Hidden files, ``*.tmp``/``*.part`` and ``_``-prefixed folders are skipped silently.

A name that is not valid UTF-8 (bytes that ``os.fsdecode`` turns into surrogates) is REFUSED,
that one file only: ledger paths are text on both backends, so such a path is recorded in the
escaped form :func:`escape_path` gives (``bad\\xff.png``: each undecodable byte as ``\\xNN``),
with ``status="refused"`` and the reason. It is refused rather than stored losslessly because
every consumer (the build, the reader, the UI, ``contains``) takes a ledger path for a real
file name; an escaped name would have to be unescaped everywhere, and a missed place would open
the wrong file. Renaming the file to valid UTF-8 makes the next scan take it.
"""

from __future__ import annotations

import os
import stat as stat_mod
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from pipeline.lake.walk_split import KeySource

IGNORED_SUFFIXES = (".tmp", ".part")
# How _walk_dir opens a folder to list it: read-only, and only if it is one.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


class StatKey(NamedTuple):
    """What decides whether a file must be re-hashed. ctime is in the key because a rewrite
    can restore size and mtime (``os.utime``) but never ctime. A tuple, because a no-change
    rescan builds one per file and compares it with the ledger's: it must be cheap."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int


class Candidate(NamedTuple):
    path: str  # posix, relative to the lake root
    abspath: str
    key: StatKey


@dataclass(frozen=True, slots=True)
class Settling:
    path: str


@dataclass(frozen=True, slots=True)
class Refused:
    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class Unlistable:
    """A folder that could not be listed: files under it must not be taken for deleted."""

    path: str
    reason: str


Entry = Candidate | Settling | Refused | Unlistable


NOT_UTF8_REASON = (
    "file name is not valid UTF-8 (undecodable bytes shown as \\xNN); rename it to be ingested"
)


def escape_path(path: str) -> str:
    """``path`` as valid UTF-8 text: unchanged when it is, else each byte that does not decode
    written as ``\\xNN``, so the name's bytes can be read off the ledger path."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")


def is_utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def is_ignored_name(name: str, *, is_dir: bool) -> bool:
    if name.startswith("."):
        return True
    if is_dir:
        return name.startswith("_")
    return name.endswith(IGNORED_SUFFIXES)


class FastPath:
    """The ledger's fast path, applied inside the walk (``walk_lake(fast=...)``).

    ``known`` maps a ledger path to its row ``(path, size, mtime_ns, ctime_ns, inode, ...)``
    for every present file whose stat key can be trusted. The walk pops each file it finds;
    a file whose stat key equals its row's is only counted (``unchanged``), never yielded, so a
    no-change rescan builds no object per file. A popped row whose key moved is kept in
    ``stale`` (the scan needs its id). What is left in ``known`` after the walk was not seen.
    """

    __slots__ = ("known", "stale", "unchanged", "matched_escapable")

    def __init__(self, known: dict[str, tuple]) -> None:
        self.known = known
        self.stale: dict[str, tuple] = {}
        self.unchanged = 0
        # Matched paths with a backslash: only those can equal the escaped form of a name
        # that is not UTF-8 (escape_path writes \xNN), so the scan can tell a collision.
        self.matched_escapable: set[str] = set()


def walk_lake(
    lake: Path,
    *,
    dataset: str | None = None,
    settle_seconds: float = 0.0,
    fast: FastPath | None = None,
    shares: int = 1,
    keys: KeySource | None = None,
) -> Iterator[Entry]:
    """Yield every entry under ``lake`` (or under ``lake/dataset``), stat only. With ``fast``,
    files that match their ledger row are counted there instead of yielded; with ``keys`` as
    well, ``fast`` is filled from them once the walk starts. With ``shares`` > 1 and a large
    ledger, the dataset folders' subfolders are walked in that many processes
    (``pipeline.lake.walk_split``), each reading the keys it needs; the entries are the same,
    in another order."""
    root = os.path.realpath(lake)
    settle_ns = int(settle_seconds * 1e9)
    now_ns = time.time_ns()
    tops = _list_tops(root, dataset)
    # Never more walking processes than cores: HASH_WORKERS may be set far higher, and each
    # share is a fork of the scanning process.
    shares = min(shares, os.cpu_count() or 1)
    if keys is not None:
        assert fast is not None, "keys fill a FastPath"
        if not (shares > 1 and keys.reopenable and keys.count() >= SPLIT_MIN_KNOWN):
            fast.known, keys = keys.load(), None
    if shares > 1 and fast is not None and (keys is not None or len(fast.known) >= SPLIT_MIN_KNOWN):
        from pipeline.lake.walk_split import walk_split

        # `type(...) is tuple`: a folder to walk is a plain tuple; Candidate, also a tuple,
        # never comes from _list_tops, but an isinstance test would take it for a folder.
        yield from (top for top in tops if type(top) is not tuple)
        folders = [top for top in tops if type(top) is tuple]
        yield from walk_split(root, folders, now_ns, settle_ns, fast, shares, keys)
        return
    for top in tops:
        if type(top) is tuple:
            yield from _walk_dir(root, top[0], top[1], now_ns, settle_ns, fast)
        else:
            yield top


# A ledger of fewer rows is walked in one process: below this, forking and sending the
# shares' results back cost more than the second core saves (a walk of 100,000 files takes
# ~0.3 s; a fork of a process holding their ledger keys ~10 ms).
SPLIT_MIN_KNOWN = 100_000


def _list_tops(root: str, dataset: str | None) -> list[Entry | tuple[str, str]]:
    """What the lake's root holds, in name order: a dataset folder to walk as ``(folder,
    rel)``, or the verdict on anything else (a file, a root that cannot be listed)."""
    if dataset is not None:
        top = os.path.join(root, dataset)
        return [(top, dataset)] if os.path.isdir(top) else []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        return [Unlistable("", f"cannot list the lake: {exc.strerror or exc}")]
    tops: list[Entry | tuple[str, str]] = []
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError as exc:
            tops.append(Refused(escape_path(entry.name), f"cannot stat: {exc.strerror or exc}"))
            continue
        if is_ignored_name(entry.name, is_dir=is_dir):
            continue
        if is_dir:
            # A folder with an undecodable name is still walked: each file under it is refused
            # on its own, named by its escaped path.
            tops.append((entry.path, entry.name))
        else:
            tops.append(
                Refused(escape_path(entry.name), "not inside a dataset folder (lake/<dataset>/...)")
            )
    return tops


def _walk_dir(
    root: str,
    folder: str,
    rel: str,
    now_ns: int,
    settle_ns: int,
    fast: FastPath | None,
    defer: list[tuple[str, str]] | None = None,
) -> Iterator[Entry]:
    """Walk ``folder`` and everything under it; with ``defer``, only ``folder``'s own files,
    its subfolders appended to ``defer`` as ``(folder, rel)`` instead."""
    # The hot loop of every scan: at a million files each attribute lookup or call per file
    # shows. An explicit stack, not recursion (nested generators would pass every entry up one
    # frame per folder level); the ignore rules of is_ignored_name inlined; UTF-8 checked once
    # per folder and only for non-ASCII names.
    is_reg = S_ISREG
    known = fast.known if fast is not None else {}
    pop = known.pop
    stale = fast.stale if fast is not None else {}
    unchanged = 0
    stack = [(folder, rel)]
    push = stack.append if defer is None else defer.append
    try:
        while stack:
            folder, rel = stack.pop()
            try:
                # Listed through a descriptor: each entry's stat is then an fstatat of its bare
                # name, not a lookup of every component of its absolute path (bench/scan.py).
                # The descriptor stays open until the folder's last stat.
                fd = os.open(folder, _DIR_FLAGS)
            except OSError as exc:
                yield Unlistable(escape_path(rel), f"cannot list folder: {exc.strerror or exc}")
                continue
            try:
                with os.scandir(fd) as it:
                    entries = list(it)
            except OSError as exc:
                os.close(fd)
                yield Unlistable(escape_path(rel), f"cannot list folder: {exc.strerror or exc}")
                continue
            rel_utf8 = is_utf8(rel)
            try:
                for entry in entries:
                    name = entry.name
                    relpath = f"{rel}/{name}"
                    try:
                        # One d_type check for a regular file, the common case; a folder or a
                        # link or a special file takes the second.
                        if entry.is_file(follow_symlinks=False):
                            link = False
                        elif entry.is_dir(follow_symlinks=False):
                            if name[0] not in "._":
                                push((f"{folder}/{name}", relpath))
                            continue
                        else:
                            link = entry.is_symlink()
                        if name[0] == "." or name.endswith(IGNORED_SUFFIXES):
                            continue
                        if not (rel_utf8 and (name.isascii() or is_utf8(name))):
                            # Before the settle check: the verdict does not depend on the bytes.
                            yield Refused(escape_path(relpath), NOT_UTF8_REASON)
                            continue
                        if link:
                            verdict = _check_symlink(root, f"{folder}/{name}", relpath)
                            if verdict is not None:
                                yield verdict
                                continue
                            st = os.stat(name, dir_fd=fd)
                        else:
                            st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # vanished between listing and stat: not there this round
                    except OSError as exc:
                        yield Refused(escape_path(relpath), f"cannot stat: {exc.strerror or exc}")
                        continue
                    if not is_reg(st.st_mode):
                        yield Refused(
                            relpath, f"special file ({_kind(st.st_mode)}), not a regular file"
                        )
                        continue
                    mtime = st.st_mtime_ns
                    row = pop(relpath, None)
                    if now_ns - mtime < settle_ns:
                        yield Settling(relpath)  # popped: it exists, it is just not ready
                        continue
                    if row is not None:
                        if (
                            row[1] == st.st_size
                            and row[2] == mtime
                            and row[3] == st.st_ctime_ns
                            and row[4] == st.st_ino
                        ):
                            unchanged += 1
                            if "\\" in relpath:
                                fast.matched_escapable.add(relpath)  # type: ignore[union-attr]
                            continue
                        stale[relpath] = row
                    yield Candidate(
                        relpath,
                        f"{folder}/{name}",
                        StatKey(st.st_size, mtime, st.st_ctime_ns, st.st_ino),
                    )
            finally:
                os.close(fd)
    finally:
        if fast is not None:
            fast.unchanged += unchanged


def _check_symlink(root: str, path: str, relpath: str) -> Refused | None:
    target = os.path.realpath(path)
    if os.path.commonpath([root, target]) != root:
        return Refused(relpath, "symlink target lies outside the lake")
    if not os.path.exists(target):
        return Refused(relpath, "dangling symlink")
    if os.path.isdir(target):
        return Refused(relpath, "symlink to a folder is not followed")
    return None


def _kind(mode: int) -> str:
    for test, name in (
        (stat_mod.S_ISFIFO, "fifo"),
        (stat_mod.S_ISSOCK, "socket"),
        (stat_mod.S_ISCHR, "character device"),
        (stat_mod.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "unknown type"

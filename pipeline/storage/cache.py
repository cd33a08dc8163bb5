"""A local cache of immutable objects from object storage, shared safely by the processes of
one machine (DataLoader workers, DDP ranks, two trainers).

Layout under the cache folder (``LAKETRAIN_CACHE_DIR``):

- ``objects/<bucket>/<key>``: the objects, at their keys, so that a tree of them reads like
  the remote prefix (a reader memory-maps them there). Only immutable, content-addressed
  objects are cached: their keys are their identity, so a key never changes bytes.
- ``locks/<h>.lock``: one per ITEM (a file, or a folder fetched as a unit, e.g. a segment).
  Its flock: a reader holds it SHARED for as long as it may read the item (a *pin*), a
  fetcher EXCLUSIVE while it writes, an evictor EXCLUSIVE, without waiting, before it
  deletes: so an item in use is never evicted, and an item is never read half-written. Its
  bytes: the item's *state*, written once the item's bytes were checked (its size and each
  file's (size, mtime_ns, ctime_ns, inode)), emptied before it is deleted. Its mtime is the
  item's last use, the LRU order. State and lock share one file because creating a file is
  the dearest step of a cold open on some disks (0.02 to 1 ms each on the CI machine's, by
  what else writes to it, one creation after another; a cold open of a 3,000-sample version
  creates ~130 files and folders): a state file beside the lock, written by temp + rename,
  cost two more creations per item.
- ``fetch.lock``: held exclusively while a process fetches what it lacks (and evicts for it),
  so two processes opening the same version at once download it once, and the size bound is
  checked against what is really there.

An item whose files still have the (size, mtime_ns, ctime_ns, inode) recorded when its bytes
were checked is used as is (a warm open hashes nothing: reads are exactly local reads); any
other is checked again, and an item whose bytes do not match (a corrupted or truncated cached
object) is deleted and fetched again. Downloads go to a temp name, are checked, then renamed
into place (``cache_fetch.py``: one fetch is one pass, which may grow as items arrive). What
does not fit in ``max_bytes`` evicts the least recently used unpinned items; a request larger
than the bound, or one that the pinned items leave no room for, is an error that says so (the
bound is never silently exceeded).

Ideas from mosaicml/streaming (``download.py``, ``eviction.py``); the code is laketrain's.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import resource
import secrets
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.storage.errors import StorageError
from pipeline.storage.open_files import FD_HEADROOM, raise_open_file_limit
from pipeline.storage.urls import split_s3_url

log = logging.getLogger("pipeline.storage.cache")

FETCH_THREADS = 8
# Items up to this size stream through one GET per file (``get_stream``), hashed on the way;
# boto3's download_file sends a HEAD first and sets up a transfer (for the many small chunk
# files of a version that doubled the requests and cost 3x the time, bench/s3_read.py). Above
# it, download_file's parallel ranged GETs pay, and the item is hashed once it is written.
STREAM_ITEM_BYTES = 64 * 2**20
# 2: the state in the lock file. A cache of format 1 (``state/<h>.json``) is emptied once
# (``_retire_format_1``): its objects would otherwise sit outside the bound.
_STATE_FORMAT = 2


class CacheError(StorageError):
    """The cache cannot hold what is asked, or an object's bytes never matched its checksum."""


@dataclass(frozen=True)
class CacheItem:
    """One unit of the cache: ``path`` (a file, or a folder for several ``files``) filled from
    ``files`` = ((url, path relative to ``path``, "" for the file itself), ...), ``size`` bytes
    in all, whose bytes are right when ``check(local_path)`` says so (a checksum).

    ``sha256``, when given, is what ``check`` computes, so a download is checked as it streams
    in: the sha256 over ``files`` in their order, each file's relative name and a NUL (none for
    the file itself) then its bytes. ``check`` still judges a copy found on disk."""

    path: Path
    files: tuple[tuple[str, str], ...]
    size: int
    check: Callable[[Path], bool]
    sha256: str | None = None


class Pins:
    """The shared locks that keep a reader's items from eviction; released by ``close`` (or
    when garbage collected). Not carried through pickling: a spawned DataLoader worker reads
    what its parent pinned."""

    def __init__(self) -> None:
        self._fds: list[int] = []

    def add(self, fd: int) -> None:
        self._fds.append(fd)

    def __len__(self) -> int:
        return len(self._fds)

    def close(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            try:
                os.close(fd)  # closing the last descriptor releases the flock
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._fds = []


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _stat_key(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def write_unsynced(path: Path, data: bytes) -> None:
    """Temp file + rename, no fsync, for what lives in the cache: an entry lost or torn by a
    power cut is only checked again (its stat, or the bytes it is compared with, no longer
    match), so durability would buy nothing here, and a pair of fsyncs per object made a cold
    open of many small chunk files twice as slow (on a busy disk one fsync can take 100 ms)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class ObjectCache:
    """The cache under ``root``, at most ``max_bytes``, filled through ``store`` (an object
    with ``get_file(url, local)``: the storage layer's S3Store)."""

    def __init__(
        self, root: Path | str, max_bytes: int, store: Any, *, threads: int = FETCH_THREADS
    ) -> None:
        if max_bytes < 1:
            raise ValueError(f"the cache bound must be at least 1 byte, got {max_bytes}")
        self.root = Path(root)
        self.max_bytes = int(max_bytes)
        self.store = store
        self.threads = max(1, threads)
        self.objects = self.root / "objects"
        self._locks = self.root / "locks"
        for folder in (self.objects, self._locks):
            folder.mkdir(parents=True, exist_ok=True)
        if (self.root / "state").is_dir():
            self._retire_format_1()
        self.downloaded = 0  # objects this instance downloaded (tests, benchmarks)
        self._count_lock = threading.Lock()

    def _retire_format_1(self) -> None:
        """Empty a cache written by a laketrain that kept states in ``state/`` (under
        fetch.lock, so no fetch of this format runs meanwhile; ``state/`` goes last, so an
        interrupted retirement is done again)."""
        with self._fetch_lock():
            if not (self.root / "state").is_dir():
                return
            log.info("cache at %s: an older cache format, emptied", self.root)
            for child in list(self.objects.iterdir()):
                _remove(child)
            _remove(self.root / "state")

    # ---- names ------------------------------------------------------------------------------

    def path_of(self, url: str) -> Path:
        """Where the object ``url`` (``s3://bucket/key``) lives in the cache."""
        bucket, key = split_s3_url(url)
        if not key or any(part in ("", ".", "..") for part in key.split("/")):
            raise ValueError(f"not a cacheable object key: {url!r}")
        return self.objects / bucket / key

    def _name(self, item: CacheItem) -> str:
        rel = item.path.relative_to(self.objects).as_posix()
        return hashlib.sha1(rel.encode()).hexdigest()  # noqa: S324 - a file name, not security

    def _lock_path(self, item: CacheItem) -> Path:
        return self._locks / f"{self._name(item)}.lock"

    def _open_lock(self, item: CacheItem) -> int:
        """Open ``item``'s lock file. A reader keeps it open (the pin), so past the soft
        open-file limit less a headroom (sockets, temp files, the reader's own files), the
        limit is raised first; at the hard limit, a clear error before any EMFILE elsewhere."""
        path = self._lock_path(item)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno != errno.EMFILE:
                raise
            fd = -1
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if fd >= 0 and (soft == resource.RLIM_INFINITY or fd < soft - FD_HEADROOM):
            return fd
        if raise_open_file_limit():
            return fd if fd >= 0 else os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if 0 <= fd < soft - FD_HEADROOM // 4:
            return fd  # at the hard limit, but room is left yet
        if fd >= 0:
            os.close(fd)
        raise CacheError(
            f"cannot pin {item.path.name} in the cache {self.root}: a reader holds one open "
            f"lock file per cached object, and this process's open-file limit ({soft}, also "
            "its hard limit) is nearly reached; raise it (ulimit -n)"
        )

    # ---- state ------------------------------------------------------------------------------

    def _local_files(self, item: CacheItem) -> list[tuple[str, Path]]:
        return [(rel, item.path / rel if rel else item.path) for _url, rel in item.files]

    def _write_state(self, item: CacheItem, fd: int) -> None:
        """Record ``item``'s state in its lock file ``fd`` (held, shared or exclusive). Not
        atomic, and needs not be: a torn state does not parse, so the item is only checked
        again; two holders of a shared lock write the same bytes."""
        files = {rel: _stat_key(path) for rel, path in self._local_files(item)}
        state = {
            "format": _STATE_FORMAT,
            "path": item.path.relative_to(self.objects).as_posix(),
            "size": sum(v[0] for v in files.values()),
            "files": files,
        }
        data = json.dumps(state, sort_keys=True).encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))

    def _valid(self, item: CacheItem, fd: int) -> bool:
        """Whether the cached copy is there and right (``fd``: its lock file, held): unchanged
        since it was checked (stat), or checked again now."""
        state = _read_state(fd)
        try:
            if state is not None and all(
                state["files"].get(rel) == _stat_key(path) for rel, path in self._local_files(item)
            ):
                return True
            if not all(path.is_file() for _rel, path in self._local_files(item)):
                return False
            if item.check(item.path):
                self._write_state(item, fd)  # e.g. copied in, or touched: right all the same
                return True
        except OSError:
            return False
        log.warning("cached %s does not match its checksum: fetching it again", item.path)
        return False

    # ---- fetching ---------------------------------------------------------------------------

    @contextmanager
    def _fetch_lock(self) -> Iterator[None]:
        with open(self.root / "fetch.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def fetch(
        self,
        items: Iterable[CacheItem],
        *,
        then: Callable[[CacheItem], Iterable[CacheItem]] | None = None,
    ) -> Pins:
        """Make every item present and checked, pinned until the returned Pins are closed.

        ``then(item)``, called once an item is present and checked, may name more items for
        the same pass: they are fetched beside what is still downloading, not after it."""
        from pipeline.storage.cache_fetch import FetchPass  # it builds on this module's names

        return FetchPass(self, then).run(list(items))

    def _count(self) -> None:
        with self._count_lock:  # downloads run in threads; tests count them exactly
            self.downloaded += 1

    @staticmethod
    def _touch(fd: int) -> None:
        os.utime(fd)  # the lock file's mtime: the item's last use

    # ---- the bound --------------------------------------------------------------------------

    def _states(self) -> list[tuple[float, Path, dict]]:
        """(last use, lock file, state) of every checked item, least recently used first."""
        out = []
        for path in self._locks.glob("*.lock"):
            try:
                with open(path, "rb") as fh:
                    state = _parse_state(fh.read())
                    mtime = os.fstat(fh.fileno()).st_mtime
            except OSError:
                continue
            if state is not None:
                out.append((mtime, path, state))
        return sorted(out, key=lambda t: t[0])

    def used_bytes(self) -> int:
        """Bytes of every checked item in the cache (what the bound counts)."""
        return sum(int(s.get("size", 0)) for _t, _p, s in self._states())

    def _make_room(self, incoming: int, keep: set[Path]) -> int:
        """Evict least recently used, unpinned items until ``incoming`` more bytes fit; the
        bytes the checked items hold then (without ``incoming``)."""
        states = self._states()
        used = sum(int(s.get("size", 0)) for _t, _p, s in states)
        pinned = 0
        for _mtime, lock, state in states:
            if used + incoming <= self.max_bytes:
                return used
            path = self.objects / str(state.get("path", ""))
            if path in keep or path == self.objects:
                continue
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pinned += int(state.get("size", 0))
                    continue  # pinned by an open reader
                os.ftruncate(fd, 0)  # the state first: a half-removed item is not valid
                _remove(path)
                used -= int(state.get("size", 0))
                log.info("cache: evicted %s (%d bytes)", path, int(state.get("size", 0)))
            finally:
                os.close(fd)
        if used + incoming > self.max_bytes:
            raise CacheError(
                f"the cache at {self.root} cannot take {_mb(incoming)} MB more: it holds "
                f"{_mb(used)} MB, {_mb(pinned)} MB of it in use by open readers "
                f"(LAKETRAIN_CACHE_MB={_mb(self.max_bytes)}); raise it or close other readers"
            )
        return used


def _parse_state(raw: bytes) -> dict | None:
    try:
        state = json.loads(raw) if raw else None
    except ValueError:  # torn by a crash mid-write: the item is checked again
        return None
    return state if isinstance(state, dict) and state.get("format") == _STATE_FORMAT else None


def _read_state(fd: int) -> dict | None:
    chunks = []
    offset = 0
    while chunk := os.pread(fd, 1 << 16, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return _parse_state(b"".join(chunks))


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f}".rstrip("0").rstrip(".")


def cache_from_settings(store: Any) -> ObjectCache:
    """The cache the settings name (``LAKETRAIN_CACHE_DIR``, ``LAKETRAIN_CACHE_MB``)."""
    from pipeline.settings import get_settings

    s = get_settings()
    return ObjectCache(Path(s.laketrain_cache_dir), s.laketrain_cache_mb * 2**20, store)

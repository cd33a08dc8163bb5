"""A local cache of immutable objects from object storage, shared safely by the processes of
one machine (DataLoader workers, DDP ranks, two trainers).

Layout under the cache folder (``LAKETRAIN_CACHE_DIR``):

- ``objects/<bucket>/<key>``: the objects, at their keys, so that a tree of them reads like
  the remote prefix (a reader memory-maps them there). Only immutable, content-addressed
  objects are cached: their keys are their identity, so a key never changes bytes.
- ``state/<h>.json``: one per ITEM (a file, or a folder fetched as a unit, e.g. a segment),
  written once its bytes were checked: its size and each file's (size, mtime_ns, ctime_ns,
  inode). Its mtime is the item's last use, the LRU order.
- ``locks/<h>.lock``: one per item. A reader holds it SHARED for as long as it may read the
  item (a *pin*), a fetcher EXCLUSIVE while it writes, an evictor EXCLUSIVE, without waiting,
  before it deletes: so an item in use is never evicted, and an item is never read half-written.
- ``fetch.lock``: held exclusively while a process fetches what it lacks (and evicts for it),
  so two processes opening the same version at once download it once, and the size bound is
  checked against what is really there.

An item whose files still have the (size, mtime_ns, ctime_ns, inode) recorded when its bytes
were checked is used as is (a warm open hashes nothing: reads are exactly local reads); any
other is checked again, and an item whose bytes do not match (a corrupted or truncated cached
object) is deleted and fetched again. Downloads go to a temp name, are checked, then renamed
into place. What does not fit in ``max_bytes`` evicts the least recently used unpinned items;
a request larger than the bound, or one that the pinned items leave no room for, is an error
that says so (the bound is never silently exceeded).

Ideas from mosaicml/streaming (``download.py``, ``eviction.py``); the code is laketrain's.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.storage.errors import StorageError
from pipeline.storage.urls import split_s3_url

log = logging.getLogger("pipeline.storage.cache")

FETCH_THREADS = 8
# Items below this size are fetched with one GET each (``read_bytes``), not with boto3's
# download_file, which sends a HEAD first and sets up a transfer: for the many small chunk
# files of a version that doubled the requests and cost 3x the time (bench/s3_read.py).
SMALL_ITEM_BYTES = 8 * 2**20
_STATE_FORMAT = 1


class CacheError(StorageError):
    """The cache cannot hold what is asked, or an object's bytes never matched its checksum."""


@dataclass(frozen=True)
class CacheItem:
    """One unit of the cache: ``path`` (a file, or a folder for several ``files``) filled from
    ``files`` = ((url, path relative to ``path``, "" for the file itself), ...), ``size`` bytes
    in all, whose bytes are right when ``check(local_path)`` says so (a checksum)."""

    path: Path
    files: tuple[tuple[str, str], ...]
    size: int
    check: Callable[[Path], bool]


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


def _replace_unsynced(path: Path, data: bytes) -> None:
    """Temp file + rename, no fsync: a cache entry lost or torn by a power cut is only
    checked again (its stat no longer matches), so durability would buy nothing here, and a
    pair of fsyncs per object made a cold open of many small chunk files twice as slow."""
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
        self._state = self.root / "state"
        self._locks = self.root / "locks"
        for folder in (self.objects, self._state, self._locks):
            folder.mkdir(parents=True, exist_ok=True)
        self.downloaded = 0  # objects this instance downloaded (tests, benchmarks)

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

    def _state_path(self, item: CacheItem) -> Path:
        return self._state / f"{self._name(item)}.json"

    def _lock_path(self, item: CacheItem) -> Path:
        return self._locks / f"{self._name(item)}.lock"

    def _open_lock(self, item: CacheItem) -> int:
        return os.open(self._lock_path(item), os.O_RDWR | os.O_CREAT, 0o644)

    # ---- state ------------------------------------------------------------------------------

    def _local_files(self, item: CacheItem) -> list[tuple[str, Path]]:
        return [(rel, item.path / rel if rel else item.path) for _url, rel in item.files]

    def _read_state(self, item: CacheItem) -> dict | None:
        try:
            state = json.loads(self._state_path(item).read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        return state if isinstance(state, dict) and state.get("format") == _STATE_FORMAT else None

    def _write_state(self, item: CacheItem) -> None:
        files = {rel: _stat_key(path) for rel, path in self._local_files(item)}
        state = {
            "format": _STATE_FORMAT,
            "path": item.path.relative_to(self.objects).as_posix(),
            "size": sum(v[0] for v in files.values()),
            "files": files,
        }
        _replace_unsynced(self._state_path(item), json.dumps(state, sort_keys=True).encode())

    def _valid(self, item: CacheItem) -> bool:
        """Whether the cached copy is there and right: unchanged since it was checked (stat),
        or checked again now."""
        state = self._read_state(item)
        try:
            if state is not None and all(
                state["files"].get(rel) == _stat_key(path) for rel, path in self._local_files(item)
            ):
                return True
            if not all(path.is_file() for _rel, path in self._local_files(item)):
                return False
            if item.check(item.path):
                self._write_state(item)  # e.g. copied in, or touched: right bytes all the same
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

    def fetch(self, items: Iterable[CacheItem]) -> Pins:
        """Make every item present and checked, pinned until the returned Pins are closed."""
        items = list(items)
        total = sum(i.size for i in items)
        if total > self.max_bytes:
            raise CacheError(
                f"the objects asked for need {_mb(total)} MB, more than the cache holds "
                f"(LAKETRAIN_CACHE_MB={_mb(self.max_bytes)} at {self.root}); raise it"
            )
        pins = Pins()
        missing: list[CacheItem] = []
        try:
            for item in items:
                fd = self._open_lock(item)
                fcntl.flock(fd, fcntl.LOCK_SH)  # waits for a writer of this item to finish
                if self._valid(item):
                    pins.add(fd)
                    self._touch(item)
                else:
                    os.close(fd)
                    missing.append(item)
            if missing:
                with self._fetch_lock():
                    self._fetch_missing(missing, pins, keep={i.path for i in items})
        except BaseException:
            pins.close()
            raise
        return pins

    def _fetch_missing(self, missing: list[CacheItem], pins: Pins, keep: set[Path]) -> None:
        # Under fetch.lock: another process may have fetched some while this one waited.
        todo = []
        for item in missing:
            fd = self._open_lock(item)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if self._valid(item):
                fcntl.flock(fd, fcntl.LOCK_SH)
                pins.add(fd)
                self._touch(item)
            else:
                # Not there, or damaged: out of the count before the room is made for it.
                self._state_path(item).unlink(missing_ok=True)
                _remove(item.path)
                todo.append((item, fd))
        if not todo:
            return
        try:
            self._make_room(sum(i.size for i, _ in todo), keep)
            with ThreadPoolExecutor(min(self.threads, len(todo))) as pool:
                list(pool.map(lambda pair: self._download(pair[0]), todo))
        except BaseException:
            for _item, fd in todo:
                os.close(fd)
            raise
        for _item, fd in todo:
            fcntl.flock(fd, fcntl.LOCK_SH)  # written: from now on a pin like any other
            pins.add(fd)

    def _download(self, item: CacheItem) -> None:
        """Download ``item`` beside its place under a temp name, check it, rename it into
        place; a copy that fails its check is downloaded once more, then it is an error."""
        final = item.path
        final.parent.mkdir(parents=True, exist_ok=True)
        for stale in final.parent.glob(f".dl-{final.name}-*"):
            _remove(stale)  # a download killed midway (we hold the item's lock)
        for attempt in (1, 2):
            tmp = final.parent / f".dl-{final.name}-{secrets.token_hex(4)}"
            try:
                small = item.size < SMALL_ITEM_BYTES and hasattr(self.store, "read_bytes")
                for url, rel in item.files:
                    local = tmp / rel if rel else tmp
                    if small:
                        local.parent.mkdir(parents=True, exist_ok=True)
                        local.write_bytes(self.store.read_bytes(url))
                    else:
                        self.store.get_file(url, local)
                    self.downloaded += 1
                if item.check(tmp):
                    _remove(final)  # an old copy that failed its check
                    os.rename(tmp, final)
                    self._write_state(item)
                    self._touch(item)
                    return
            finally:
                if tmp.exists():
                    _remove(tmp)
            log.warning(
                "downloaded %s does not match its checksum (attempt %d/2)",
                item.files[0][0],
                attempt,
            )
        raise CacheError(
            f"{item.files[0][0]}: the downloaded bytes do not match the checksum the version "
            "lists, twice; the object on the server is damaged"
        )

    def _touch(self, item: CacheItem) -> None:
        try:
            os.utime(self._state_path(item))
        except FileNotFoundError:
            pass

    # ---- the bound --------------------------------------------------------------------------

    def _states(self) -> list[tuple[float, Path, dict]]:
        out = []
        for path in self._state.glob("*.json"):
            try:
                state = json.loads(path.read_bytes())
                out.append((path.stat().st_mtime, path, state))
            except (OSError, ValueError):
                continue
        return sorted(out, key=lambda t: t[0])

    def used_bytes(self) -> int:
        """Bytes of every checked item in the cache (what the bound counts)."""
        return sum(int(s.get("size", 0)) for _t, _p, s in self._states())

    def _make_room(self, incoming: int, keep: set[Path]) -> None:
        """Evict least recently used, unpinned items until ``incoming`` more bytes fit."""
        states = self._states()
        used = sum(int(s.get("size", 0)) for _t, _p, s in states)
        pinned = 0
        for _mtime, state_path, state in states:
            if used + incoming <= self.max_bytes:
                return
            path = self.objects / str(state.get("path", ""))
            if path in keep or path == self.objects:
                continue
            lock = self._locks / f"{state_path.stem}.lock"
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pinned += int(state.get("size", 0))
                    continue  # pinned by an open reader
                state_path.unlink(missing_ok=True)  # first: a half-removed item is not valid
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


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f}".rstrip("0").rstrip(".")


def cache_from_settings(store: Any) -> ObjectCache:
    """The cache the settings name (``LAKETRAIN_CACHE_DIR``, ``LAKETRAIN_CACHE_MB``)."""
    from pipeline.settings import get_settings

    s = get_settings()
    return ObjectCache(Path(s.laketrain_cache_dir), s.laketrain_cache_mb * 2**20, store)

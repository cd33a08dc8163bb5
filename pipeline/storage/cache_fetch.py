"""How ``ObjectCache.fetch`` fills the cache (``pipeline/storage/cache.py`` holds the layout,
the state files, the locks and the bound this follows).

One fetch is one *pass*: every item already present and right is pinned at once, without
``fetch.lock``; the others are downloaded in a thread pool under it, each pinned once it is
written. What ``then`` names as an item arrives (a version's chunk node names its leaves'
indexes) joins the same pass, so a version's small files download beside its segments
instead of after them: a cold open costs its longest chain of round trips, not their sum.

An item is downloaded under a temp name beside its place, checked, then renamed into place.
An item up to ``STREAM_ITEM_BYTES`` streams through one GET per file: no HEAD before each GET
(``download_file``). One that names its ``sha256`` is hashed as its bytes are written, with no
second read to hash the file; the others (a node pack, checked by its parts) once written.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pipeline.storage.cache import (
    STREAM_ITEM_BYTES,
    CacheError,
    CacheItem,
    ObjectCache,
    Pins,
    _mb,
    _remove,
)

log = logging.getLogger("pipeline.storage.cache")


class FetchPass:
    """One ``ObjectCache.fetch`` (the module docstring); ``run`` returns the pins."""

    def __init__(
        self, cache: ObjectCache, then: Callable[[CacheItem], Iterable[CacheItem]] | None
    ) -> None:
        self.cache = cache
        self.then = then
        self.pins = Pins()
        self.seen: set[Path] = set()  # this pass's items: kept from eviction, never twice
        self.total = 0
        self.in_flight = 0  # bytes downloading: not in the state files yet, so not in `used`
        # Bytes that fit without evicting, as of the last _make_room: what joins the pass
        # later takes from it, so the state files are read once a pass, not once a batch.
        # (fetch.lock is held: no other process adds to the cache or evicts meanwhile.)
        self.headroom = -1
        self.running: dict[Future, tuple[CacheItem, int]] = {}
        self.pool: ThreadPoolExecutor | None = None
        self.stack = ExitStack()

    def run(self, queue: list[CacheItem]) -> Pins:
        try:
            with self.stack:  # on the way out: the pool drained first, then fetch.lock
                try:
                    self._drain(queue)
                except BaseException:
                    if self.pool is not None:  # a failure: what has not started never starts
                        self.pool.shutdown(wait=True, cancel_futures=True)
                    raise
        except BaseException:
            for _item, fd in self.running.values():
                os.close(fd)
            self.pins.close()
            raise
        return self.pins

    def _drain(self, queue: list[CacheItem]) -> None:
        while queue or self.running:
            if queue:
                queue = self._admit(queue)
                continue
            done, _ = wait(self.running, return_when=FIRST_COMPLETED)
            for fut in done:
                item, fd = self.running[fut]
                fut.result()  # a failed download: its fd is closed with the others'
                del self.running[fut]
                self.in_flight -= item.size
                fcntl.flock(fd, fcntl.LOCK_SH)  # written: a pin like any other now
                self.pins.add(fd)
                queue += self._next(item)

    def _next(self, item: CacheItem) -> list[CacheItem]:
        return list(self.then(item)) if self.then is not None else []

    def _admit(self, batch: list[CacheItem]) -> list[CacheItem]:
        """Pin the items of ``batch`` that are right, start downloading the others; what
        the pinned ones name (``then``)."""
        cache = self.cache
        # Two locks on one item from one process would wait for each other: each path once.
        batch = [i for i in {i.path: i for i in batch}.values() if i.path not in self.seen]
        self.seen.update(i.path for i in batch)
        self.total += sum(i.size for i in batch)
        if self.total > cache.max_bytes:
            raise CacheError(
                f"the objects asked for need {_mb(self.total)} MB, more than the cache holds "
                f"(LAKETRAIN_CACHE_MB={_mb(cache.max_bytes)} at {cache.root}); raise it"
            )
        ready, missing = [], []
        for item in batch:
            fd = cache._open_lock(item)
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits for another process's writer to finish
            if cache._valid(item, fd):
                self.pins.add(fd)
                cache._touch(fd)
                ready.append(item)
            else:
                os.close(fd)
                missing.append(item)
        if missing:
            if self.pool is None:
                self.stack.enter_context(cache._fetch_lock())
                self.pool = self.stack.enter_context(ThreadPoolExecutor(cache.threads))
            ready += self._start(missing)
        return [n for item in ready for n in self._next(item)]

    def _start(self, missing: list[CacheItem]) -> list[CacheItem]:
        """Under fetch.lock: what another process fetched while this one waited is pinned;
        the rest is made room for and handed to the pool. The items pinned."""
        cache, todo, ready = self.cache, [], []
        for item in missing:
            fd = cache._open_lock(item)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if cache._valid(item, fd):
                fcntl.flock(fd, fcntl.LOCK_SH)
                self.pins.add(fd)
                cache._touch(fd)
                ready.append(item)
            else:
                # Not there, or damaged: out of the count before the room is made for it.
                os.ftruncate(fd, 0)
                _remove(item.path)
                todo.append((item, fd))
        if todo:
            incoming = sum(i.size for i, _ in todo)
            if incoming <= self.headroom:
                self.headroom -= incoming
            else:
                try:
                    used = cache._make_room(incoming + self.in_flight, self.seen)
                except BaseException:
                    for _item, fd in todo:
                        os.close(fd)
                    raise
                self.headroom = cache.max_bytes - used - self.in_flight - incoming
            assert self.pool is not None
            for item, fd in todo:
                self.running[self.pool.submit(download, cache, item, fd)] = (item, fd)
            self.in_flight += incoming
        return ready


def download(cache: ObjectCache, item: CacheItem, fd: int) -> None:
    """Download ``item`` beside its place under a temp name, check it, rename it into place,
    record its state in its lock file ``fd`` (held exclusively); a copy that fails its check
    is downloaded once more, then it is an error."""
    final = item.path
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".dl-{final.name}-*"):
        _remove(stale)  # a download killed midway
    streamed = item.size <= STREAM_ITEM_BYTES and hasattr(cache.store, "get_stream")
    for attempt in (1, 2):
        tmp = final.parent / f".dl-{final.name}-{secrets.token_hex(4)}"
        try:
            if streamed:
                digest = _stream(cache, item, tmp)
                right = digest == item.sha256 if item.sha256 else item.check(tmp)
            else:
                for url, rel in item.files:
                    cache.store.get_file(url, tmp / rel if rel else tmp)
                    cache._count()
                right = item.check(tmp)
            if right:
                _remove(final)  # an old copy that failed its check
                os.rename(tmp, final)
                cache._write_state(item, fd)
                cache._touch(fd)
                return
        finally:
            if tmp.exists():
                _remove(tmp)
        log.warning(
            "downloaded %s does not match its checksum (attempt %d/2)", item.files[0][0], attempt
        )
    raise CacheError(
        f"{item.files[0][0]}: the downloaded bytes do not match the checksum the version "
        "lists, twice; the object on the server is damaged"
    )


def _stream(cache: ObjectCache, item: CacheItem, tmp: Path) -> str:
    """Write ``item``'s files under ``tmp`` with one GET each, hashing the bytes as they are
    written (``CacheItem.sha256``'s rule); the hex digest."""
    digest = hashlib.sha256()
    for url, rel in item.files:
        local = tmp / rel if rel else tmp
        local.parent.mkdir(parents=True, exist_ok=True)
        if rel:
            digest.update(rel.encode() + b"\0")

        def consume(chunks: Iterator[bytes], local: Path = local, base: Any = digest) -> Any:
            running = base.copy()  # a retried GET starts again from this file's first byte
            with open(local, "wb") as fh:
                for chunk in chunks:
                    fh.write(chunk)
                    running.update(chunk)
            return running

        digest = cache.store.get_stream(url, consume)
        cache._count()
    return digest.hexdigest()

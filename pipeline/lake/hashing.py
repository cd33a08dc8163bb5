"""MD5 of lake files with ``filehash`` in 1 MiB chunks, spread over a process pool.

Processes, not threads: measured on 2 cores, a thread pool is slower than a plain loop while a
2-process pool is ~1.7x faster (MEASURED.md). Small batches stay in-process, where a pool's
start-up would cost more than it saves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

CHUNK_SIZE = 1 << 20
# Below this many files a pool's start-up (fork + pickling) is not worth it.
POOL_THRESHOLD = 64


@lru_cache(maxsize=1)
def _hasher() -> Any:
    # Imported on first use, like the pool below: a no-change scan hashes nothing and must
    # not pay for these imports at start-up.
    from filehash import FileHash

    return FileHash("md5", chunk_size=CHUNK_SIZE)


def _fork_pool(workers: int) -> Any:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))


@dataclass(frozen=True, slots=True)
class HashResult:
    path: str
    md5: str | None
    error: str | None


def md5_file(abspath: str) -> str:
    return _hasher().hash_file(abspath)


def _hash_one(item: tuple[str, str]) -> HashResult:
    relpath, abspath = item
    try:
        return HashResult(relpath, md5_file(abspath), None)
    except FileNotFoundError:
        return HashResult(relpath, None, "vanished during the scan")
    except OSError as exc:
        return HashResult(relpath, None, f"{type(exc).__name__}: {exc.strerror or exc}")
    except Exception as exc:  # noqa: BLE001 - one odd file (e.g. a bad name) never stops a scan
        return HashResult(relpath, None, f"{type(exc).__name__}: {exc}")


class HashPool:
    """Hash files while the caller is still walking the lake.

    ``add()`` buffers (relpath, abspath) pairs and hands full batches to a process pool that
    starts only once there are enough files to be worth it; ``results()`` returns one
    HashResult per added file, in order. Overlapping the walk with hashing keeps a cold scan
    close to the speed of a bare hashing pool.
    """

    BATCH = 256

    def __init__(self, workers: int, *, on_progress: Callable[[int], None] | None = None) -> None:
        self.workers = workers
        self.on_progress = on_progress
        self._pending: list[tuple[str, str]] = []
        self._futures: list[object] = []
        self._pool: Any = None

    def __enter__(self) -> HashPool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def add(self, relpath: str, abspath: str) -> None:
        self._pending.append((relpath, abspath))
        if self.workers > 1 and len(self._pending) >= self.BATCH:
            self._submit()

    def _submit(self) -> None:
        if self._pool is None:
            self._pool = _fork_pool(self.workers)
        batch, self._pending = self._pending, []
        future = self._pool.submit(_hash_batch, batch)
        if self.on_progress:
            progress = self.on_progress
            future.add_done_callback(lambda f, n=len(batch): progress(n))
        self._futures.append(future)

    def results(self) -> list[HashResult]:
        return list(self.iter_results())

    def iter_results(self) -> Iterator[HashResult]:
        """Yield one HashResult per added file, in order, as soon as its batch is done: the
        caller records finished batches while the pool still hashes the rest."""
        if self.workers > 1 and (self._pool is not None or len(self._pending) >= POOL_THRESHOLD):
            rest, self._pending = self._pending, []
            step = max(1, -(-len(rest) // self.workers))  # spread the tail over every worker
            for i in range(0, len(rest), step):
                self._pending = rest[i : i + step]
                self._submit()
        futures, pending = self._futures, self._pending
        self._pending, self._futures = [], []
        for future in futures:
            yield from future.result()  # type: ignore[attr-defined]
        for item in pending:  # a small job never started the pool: hash in-process
            yield _hash_one(item)
            if self.on_progress:
                self.on_progress(1)


def _hash_batch(items: list[tuple[str, str]]) -> list[HashResult]:
    return [_hash_one(item) for item in items]

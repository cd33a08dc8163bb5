"""MD5 of new or changed lake objects in S3: streamed GETs on a bounded thread pool.

The same interface as :class:`pipeline.lake.hashing.HashPool` (``add`` while the listing goes
on, ``iter_results`` in order), so the scan treats both lakes alike. Threads, not processes:
the time goes to waiting on the network, and hashlib releases the GIL on large updates.

A GET that fails is a verdict on that object only when retrying cannot help: a vanished key
("vanished during the scan", as for a file) or an answer such as AccessDenied (unreadable,
with the reason). An endpoint that stays down through the retries fails the whole scan
(StorageError naming the URL): nothing of it is recorded, and the next scan starts over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from pipeline.lake.hashing import HashResult
from pipeline.storage.listing import GET_CONCURRENCY, LakeReader, is_transient


class S3HashPool:
    def __init__(
        self,
        reader: LakeReader,
        workers: int = GET_CONCURRENCY,
        *,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self.reader = reader
        self.on_progress = on_progress
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="lake-md5")
        self._futures: list[Future[HashResult]] = []

    def __enter__(self) -> S3HashPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def add(self, relpath: str, url: str, version_id: str | None = None) -> None:
        future = self._pool.submit(self._hash_one, relpath, url, version_id)
        if self.on_progress:
            progress = self.on_progress
            future.add_done_callback(lambda f: progress(1))
        self._futures.append(future)

    def _hash_one(self, relpath: str, url: str, version_id: str | None) -> HashResult:
        try:
            return HashResult(relpath, self.reader.md5(url, version_id=version_id), None)
        except FileNotFoundError:
            return HashResult(relpath, None, "vanished during the scan")
        except Exception as exc:
            if is_transient(exc):
                raise
            return HashResult(relpath, None, str(exc))

    def iter_results(self) -> Iterator[HashResult]:
        futures, self._futures = self._futures, []
        for future in futures:
            yield future.result()  # a transient failure is raised here and ends the scan

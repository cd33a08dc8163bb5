"""One background job at a time, its error kept and raised once: the checkpoint manager's
upload thread. Waiting for the previous job before the next bounds local disk use to two
snapshots and keeps the commit markers in step order."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class UploadThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` in the thread; the caller waits for the previous job first."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
        self._pending = self._executor.submit(fn, *args)

    def wait(self) -> None:
        """Block until the job in flight (if any) has finished; never raises."""
        pending = self._pending
        if pending is None:
            return
        try:
            pending.result()
        except BaseException as exc:  # noqa: BLE001 - kept and handed out by take_error()
            with self._lock:
                if self._error is None:
                    self._error = exc
        finally:
            if self._pending is pending:
                self._pending = None

    def take_error(self) -> BaseException | None:
        """The first error of a finished job, once (the next call returns None)."""
        with self._lock:
            exc, self._error = self._error, None
        return exc

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

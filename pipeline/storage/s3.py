"""Objects in S3 (or MinIO / moto) through boto3, imported lazily.

The endpoint, region and credentials come ONLY from boto3's own configuration chain
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``,
...). Nothing here reads, stores or logs them. An S3 PUT is atomic by itself.

A hung or dead S3 endpoint must not stall a GPU run without a word: every S3 call has a
connect and a read timeout, and a failed call is retried a bounded number of times with a
WARNING line per retry (``retrying <url> (attempt n/N): <error>``; botocore's own retries are
silent, so they are off). Then it raises :class:`StorageError` naming the URL. The bounds are
laketrain's, not boto3's: ``LAKETRAIN_S3_CONNECT_TIMEOUT`` (seconds, default 10),
``LAKETRAIN_S3_READ_TIMEOUT`` (seconds, default 60) and ``LAKETRAIN_S3_ATTEMPTS`` (default
boto3's ``AWS_MAX_ATTEMPTS``, else 3).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pipeline.redact import redact_text
from pipeline.storage.errors import StorageError
from pipeline.storage.urls import split_s3_url

log = logging.getLogger("pipeline.storage")
T = TypeVar("T")

# 64 MiB parts: MEASURED.md has boto3 download_file at 53 MB/s with the default 8 MiB parts and
# 329 MB/s with 64 MiB parts (fewer ranged GETs; the per-request overhead dominates).
S3_PART_BYTES = 64 * 1024 * 1024
S3_CONCURRENCY = 8
S3_POOL_CONNECTIONS = 32
# The chunk a streamed GET hands on: large enough that hashing and writing it costs little
# per call, small enough that a stream holds little memory.
STREAM_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class S3Limits:
    """How long one S3 call may take and how often it is tried (see the module docstring)."""

    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    attempts: int = 3
    backoff_s: float = 0.5  # before retry n: backoff_s * 2**(n-1), at most 8 s

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> S3Limits:
        """From ``LAKETRAIN_S3_*``; a bad value raises ValueError naming the variable."""
        env = os.environ if environ is None else environ
        d = cls()

        def number(var: str, default: float, kind: type, lo: float) -> Any:
            raw = env.get(var, "").strip()
            if not raw:
                return default
            try:
                value = kind(raw)
            except ValueError:
                value = None
            if value is None or value != value or value < lo or value == float("inf"):
                raise ValueError(f"{var}={raw!r}: must be a number >= {lo}") from None
            return value

        return cls(
            connect_timeout=number("LAKETRAIN_S3_CONNECT_TIMEOUT", d.connect_timeout, float, 0.01),
            read_timeout=number("LAKETRAIN_S3_READ_TIMEOUT", d.read_timeout, float, 0.01),
            # boto3's own knob counts too, so a deployment that set it keeps its meaning.
            attempts=number(
                "LAKETRAIN_S3_ATTEMPTS", number("AWS_MAX_ATTEMPTS", d.attempts, int, 1), int, 1
            ),
        )


def _retryable(exc: BaseException | None) -> bool:
    """A timeout, a dropped connection or a 5xx/throttling answer, anywhere in the chain
    (s3transfer wraps the botocore error it got)."""
    from botocore.exceptions import (
        ConnectionError as BotoConnectionError,
    )
    from botocore.exceptions import (
        HTTPClientError,
        IncompleteReadError,
        ResponseStreamingError,
    )

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(
            exc,
            BotoConnectionError
            | HTTPClientError
            | IncompleteReadError
            | ResponseStreamingError
            | TimeoutError
            | ConnectionError,
        ):
            return True
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
            code = str(response.get("Error", {}).get("Code", ""))
            return int(status) >= 500 or code in _THROTTLING
        exc = getattr(exc, "last_exception", None) or exc.__cause__ or exc.__context__
    return False


_THROTTLING = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "503"}


class S3Store:
    """Objects in S3 (or MinIO / moto) through one boto3 client, created on first use.

    boto3 clients are thread-safe (sessions are not), so one client serves the trainer thread
    and the background upload thread.
    """

    def __init__(self, limits: S3Limits | None = None) -> None:
        # Read now, so that a bad LAKETRAIN_S3_* value fails at store_for (a config error).
        self.limits = limits or S3Limits.from_env()
        self._client: Any = None
        self._transfer: Any = None
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3
                from boto3.s3.transfer import TransferConfig
                from botocore.config import Config

                # Endpoint and credentials: boto3 reads AWS_* itself. Timeouts and retries are
                # ours: botocore would retry silently, for minutes, on a hung endpoint.
                self._client = boto3.session.Session().client(
                    "s3",
                    config=Config(
                        connect_timeout=self.limits.connect_timeout,
                        read_timeout=self.limits.read_timeout,
                        retries={"total_max_attempts": 1, "mode": "standard"},
                        # One connection per thread of the widest pool that shares a client
                        # (the lake scan's GETs and listings); botocore's default is 10.
                        max_pool_connections=S3_POOL_CONNECTIONS,
                    ),
                )
                self._transfer = TransferConfig(
                    multipart_threshold=S3_PART_BYTES,
                    multipart_chunksize=S3_PART_BYTES,
                    max_concurrency=S3_CONCURRENCY,
                    num_download_attempts=1,
                )
            return self._client

    def _error(self, action: str, url: str, exc: BaseException) -> Exception:
        code = _error_code(exc)
        if code in ("404", "NoSuchKey", "NotFound"):
            return FileNotFoundError(f"no object at {url}")
        detail = f"{code}" if code else type(exc).__name__
        return StorageError(redact_text(f"S3 {action} {url} failed: {detail}: {exc}"))

    def _call(self, action: str, url: str, fn: Callable[[], T]) -> T:
        """``fn()``, retried on timeouts, dropped connections and 5xx answers (a WARNING per
        retry); a missing object is FileNotFoundError, any other failure StorageError."""
        attempts = self.limits.attempts
        for attempt in range(1, attempts + 1):
            try:
                return fn()
            except Exception as exc:
                err = self._error(action, url, exc)
                if isinstance(err, FileNotFoundError) or attempt == attempts or not _retryable(exc):
                    if attempts > 1 and attempt == attempts and _retryable(exc):
                        err = StorageError(f"{err} (after {attempts} attempts)")
                    raise err from exc
                log.warning(
                    "retrying %s (attempt %d/%d): %s",
                    url,
                    attempt + 1,
                    attempts,
                    redact_text(f"{type(exc).__name__}: {exc}"),
                )
                time.sleep(min(self.limits.backoff_s * 2 ** (attempt - 1), 8.0))
        raise AssertionError("unreachable")

    def put_file(self, local: Path, key_url: str) -> None:
        bucket, key = split_s3_url(key_url)
        client = self.client
        self._call(
            "upload to",
            key_url,
            lambda: client.upload_file(str(local), bucket, key, Config=self._transfer),
        )

    def get_file(self, url: str, local: Path) -> None:
        bucket, key = split_s3_url(url)
        client = self.client
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            self._call(
                "download of",
                url,
                lambda: client.download_file(bucket, key, str(tmp), Config=self._transfer),
            )
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)

    def get_stream(self, url: str, consume: Callable[[Iterator[bytes]], T]) -> T:
        """GET ``url`` and hand its body, in chunks, to ``consume``; its answer is the answer.
        One request (``download_file`` sends a HEAD first), and the caller sees every byte as
        it arrives (the cache hashes while it writes, instead of reading the file again). A
        retry calls ``consume`` again from the first byte, so it must start afresh each call."""
        bucket, key = split_s3_url(url)

        def once() -> T:
            body = self.client.get_object(Bucket=bucket, Key=key)["Body"]
            try:
                return consume(body.iter_chunks(STREAM_CHUNK_BYTES))
            finally:
                body.close()

        return self._call("read of", url, once)

    def list(self, prefix_url: str) -> list[str]:
        bucket, key = split_s3_url(prefix_url)
        prefix = key.rstrip("/") + "/" if key.strip("/") else ""

        def pages() -> list[str]:
            out = []
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
                out.extend(f"s3://{bucket}/{obj['Key']}" for obj in page.get("Contents", []))
            return out

        return sorted(self._call("list of", prefix_url, pages))

    def list_sizes(self, prefix_url: str) -> dict[str, int]:
        """URL → size of every object below the "directory" ``prefix_url`` (one paginated
        LIST): what a publisher needs to skip objects that are already there, whole."""
        return {url: size for url, (size, _mtime) in self.list_stat(prefix_url).items()}

    def list_stat(self, prefix_url: str) -> dict[str, tuple[int, float]]:
        """URL → (size, LastModified as epoch seconds) of every object below ``prefix_url``."""
        bucket, key = split_s3_url(prefix_url)
        prefix = key.rstrip("/") + "/" if key.strip("/") else ""

        def pages() -> dict[str, tuple[int, float]]:
            out: dict[str, tuple[int, float]] = {}
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    out[f"s3://{bucket}/{obj['Key']}"] = (
                        int(obj["Size"]),
                        obj["LastModified"].timestamp(),
                    )
            return out

        return self._call("list of", prefix_url, pages)

    def exists(self, url: str) -> bool:
        bucket, key = split_s3_url(url)
        try:
            self._call("head of", url, lambda: self.client.head_object(Bucket=bucket, Key=key))
            return True
        except FileNotFoundError:
            return False

    def read_bytes(self, url: str) -> bytes:
        bucket, key = split_s3_url(url)
        return self._call(
            "read of", url, lambda: self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        )

    def write_bytes(self, url: str, data: bytes) -> None:
        bucket, key = split_s3_url(url)
        self._call(
            "write of", url, lambda: self.client.put_object(Bucket=bucket, Key=key, Body=data)
        )

    def delete(self, url: str) -> None:
        bucket, key = split_s3_url(url)
        try:
            self._call("delete of", url, lambda: self.client.delete_object(Bucket=bucket, Key=key))
        except FileNotFoundError:
            pass

    def delete_prefix(self, prefix_url: str) -> int:
        urls = self.list(prefix_url)
        bucket, _ = split_s3_url(prefix_url)
        for start in range(0, len(urls), 1000):  # DeleteObjects takes at most 1000 keys
            keys = [{"Key": split_s3_url(u)[1]} for u in urls[start : start + 1000]]
            resp = self._call(
                "delete of",
                prefix_url,
                lambda keys=keys: self.client.delete_objects(
                    Bucket=bucket, Delete={"Objects": keys, "Quiet": True}
                ),
            )
            if resp.get("Errors"):
                first = resp["Errors"][0]
                raise StorageError(
                    f"S3 delete below {prefix_url} failed for {first.get('Key')}: {first.get('Code')}"
                )
        return len(urls)


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""

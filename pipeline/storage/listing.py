"""Reading a lake in S3: paginated listings, and objects streamed through MD5.

The lake is read-only: everything here is a LIST (ListObjectsV2, ListObjectVersions), a GET
(GetObject, GetBucketVersioning) or a HEAD. Nothing writes, so a lake bucket may be served
with credentials that can only read.

Every call goes through :meth:`S3Store._call` (bounded timeouts, a bounded number of retries
with a WARNING each, then :class:`StorageError` naming the URL; a missing object is
FileNotFoundError). A listing is retried page by page from its continuation token, so a blip on
page 300 of a large prefix does not restart the prefix.

The ETag is never taken for an MD5: a multipart upload's ETag is an MD5 of part MD5s (and SSE-KMS
objects have an opaque one). It is only part of the change key (:class:`ObjectInfo`).
"""

from __future__ import annotations

import calendar
import hashlib
import os
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from pipeline.storage.errors import StorageError
from pipeline.storage.s3 import S3Store, _retryable
from pipeline.storage.urls import split_s3_url

# Streamed in 1 MiB chunks, like local files (pipeline.lake.hashing.CHUNK_SIZE).
CHUNK_SIZE = 1 << 20
# GETs in flight at once while a scan hashes new objects, and prefixes listed at once. Threads:
# the work is waiting on the network, and hashlib releases the GIL on 1 MiB updates.
GET_CONCURRENCY = 16
LIST_CONCURRENCY = 8


class ObjectInfo(NamedTuple):
    """One listed object. ``(size, etag, mtime_ns, version_id)`` is its change key: any
    rewrite of the object gives it a new LastModified and (on a versioned bucket) a new
    VersionId, whatever its bytes."""

    key: str  # the full key in the bucket
    size: int
    etag: str
    mtime_ns: int  # LastModified, in ns since the epoch (S3 keeps whole seconds or ms)
    version_id: str | None  # None unless the bucket is versioned


def mtime_ns(value: datetime) -> int:
    """LastModified (an aware datetime) as integer ns, without float rounding."""
    return calendar.timegm(value.utctimetuple()) * 1_000_000_000 + value.microsecond * 1000


def prefix_of(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` → ``("bucket", "a/b/")``; the bucket root → ``("bucket", "")``."""
    bucket, key = split_s3_url(url)
    key = key.strip("/")
    return bucket, f"{key}/" if key else ""


class LakeReader:
    """LIST and GET against one bucket's lake prefix, on an :class:`S3Store`'s client."""

    def __init__(self, store: S3Store | None = None) -> None:
        self.store = store or S3Store()

    # ------------------------------------------------------------------ listing

    def versioned(self, url: str) -> bool:
        """Whether the bucket keeps versions (Enabled, or Suspended with old versions). A
        GetBucketVersioning that is denied (credentials that may only list and read objects)
        counts as not versioned: the key then lacks VersionId, which LastModified covers."""
        bucket, _ = split_s3_url(url)
        client = self.store.client
        try:
            resp = self.store._call(
                "versioning check of the bucket of",
                url,
                lambda: client.get_bucket_versioning(Bucket=bucket),
            )
        except StorageError as exc:
            if _retryable(exc.__cause__):
                raise
            return False
        return resp.get("Status") in ("Enabled", "Suspended")

    def top_level(self, url: str) -> tuple[list[str], list[ObjectInfo]]:
        """The first-level "folders" (names, without the slash) and the objects directly
        under ``url``: one delimited listing."""
        bucket, prefix = prefix_of(url)
        names: list[str] = []
        objects: list[ObjectInfo] = []
        for page in self._pages(url, bucket, prefix, delimiter="/", versions=False):
            names += [p["Prefix"][len(prefix) : -1] for p in page.get("CommonPrefixes", [])]
            objects += [_info(o) for o in page.get("Contents", [])]
        return sorted(names), objects

    def objects(
        self, url: str, *, prefix: str | None = None, versioned: bool = False
    ) -> Iterator[ObjectInfo]:
        """Every object below ``url`` (recursive; or below the raw key ``prefix`` of its
        bucket), in key order, page by page. On a versioned bucket the latest version of each
        key that is not deleted, with its VersionId."""
        bucket, below = prefix_of(url)
        if prefix is None:
            prefix = below
        for page in self._pages(url, bucket, prefix, delimiter=None, versions=versioned):
            if not versioned:
                for o in page.get("Contents", []):
                    yield _info(o)
                continue
            # A key whose latest entry is a delete marker is gone: it is not listed at all.
            for o in page.get("Versions", []):
                if o.get("IsLatest"):
                    yield _info(o, o.get("VersionId"))

    def _pages(
        self, url: str, bucket: str, prefix: str, *, delimiter: str | None, versions: bool
    ) -> Iterator[dict[str, Any]]:
        client = self.store.client
        args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        if delimiter:
            args["Delimiter"] = delimiter
        while True:
            page = self.store._call(
                "list of",
                url,
                lambda args=dict(args): (
                    client.list_object_versions(**args)
                    if versions
                    else client.list_objects_v2(**args)
                ),
            )
            yield page
            if not page.get("IsTruncated"):
                return
            if versions:
                args["KeyMarker"] = page.get("NextKeyMarker")
                args["VersionIdMarker"] = page.get("NextVersionIdMarker")
            else:
                args["ContinuationToken"] = page["NextContinuationToken"]

    # ------------------------------------------------------------------ reading

    def md5(self, url: str, *, version_id: str | None = None) -> str:
        """The MD5 of the object's bytes, streamed (never held whole). A failed read restarts
        the object from its first byte."""
        return self._stream(url, version_id, None)

    def download(self, url: str, local: Path, *, version_id: str | None = None) -> str:
        """Stream the object into the new local file ``local``; return its MD5."""
        local = Path(local)

        def sink() -> Any:
            return open(local, "wb")

        return self._stream(url, version_id, sink)

    def _stream(self, url: str, version_id: str | None, sink: Callable[[], Any] | None) -> str:
        bucket, key = split_s3_url(url)
        client = self.store.client
        args: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if version_id:
            args["VersionId"] = version_id

        def read() -> str:
            digest = hashlib.md5(usedforsecurity=False)
            body = client.get_object(**args)["Body"]
            out = sink() if sink is not None else None
            try:
                for chunk in body.iter_chunks(CHUNK_SIZE):
                    digest.update(chunk)
                    if out is not None:
                        out.write(chunk)
            finally:
                body.close()
                if out is not None:
                    out.close()
            return digest.hexdigest()

        return self.store._call("read of", url, read)


def _info(o: dict[str, Any], version_id: str | None = None) -> ObjectInfo:
    return ObjectInfo(
        o["Key"], int(o["Size"]), str(o.get("ETag", "")), mtime_ns(o["LastModified"]), version_id
    )


def is_transient(exc: BaseException) -> bool:
    """A StorageError that retries could not get past (the endpoint is down or hung), as
    opposed to a verdict on one object (access denied to it, ...)."""
    return isinstance(exc, StorageError) and _retryable(exc.__cause__)


def temp_name(folder: Path, key: str) -> Path:
    """A fresh local file name for a downloaded object, keeping its suffix (decoders tell
    Parquet from CSV by it)."""
    suffix = "".join(Path(key).suffixes[-1:])
    return folder / f"obj-{os.getpid()}-{os.urandom(6).hex()}{suffix}"

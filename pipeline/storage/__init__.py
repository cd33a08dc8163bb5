"""The storage layer: every URL laketrain reads or writes, one module per backend.

- ``file:///abs/dir`` → :class:`LocalStore` (``local.py``; temp file + rename per write);
- ``s3://bucket/prefix`` → :class:`S3Store` (``s3.py``; boto3, imported lazily, bounded
  timeouts and retries, errors that name the URL).

Objects are addressed by full URLs; "directories" are URL prefixes ending before a ``/``. A
missing object raises FileNotFoundError on both backends. Durable local writes (temp + fsync +
rename) have one owner, ``durable.py``, which the dataset writers use too.

The trainer and the Airflow side both import this package; it needs neither torch nor Airflow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

from pipeline.storage.errors import StorageError
from pipeline.storage.local import LocalStore
from pipeline.storage.s3 import S3Limits, S3Store
from pipeline.storage.urls import file_url_to_path, is_s3, join, split_s3_url


@runtime_checkable
class ObjectStore(Protocol):
    """What laketrain needs from a place that holds objects (checkpoints, run outputs, ...)."""

    def put_file(self, local: Path, key_url: str) -> None:
        """Upload the local file ``local`` to ``key_url`` (the object appears whole or not at all)."""

    def get_file(self, url: str, local: Path) -> None:
        """Download ``url`` to the local file ``local`` (written via temp + rename)."""

    def list(self, prefix_url: str) -> list[str]:
        """URLs of every object below the "directory" ``prefix_url`` (recursive, sorted)."""

    def exists(self, url: str) -> bool: ...

    def read_bytes(self, url: str) -> bytes: ...

    def write_bytes(self, url: str, data: bytes) -> None:
        """Write a small object atomically."""

    def delete(self, url: str) -> None:
        """Delete one object; deleting a missing object is not an error."""

    def delete_prefix(self, prefix_url: str) -> int:
        """Delete every object below ``prefix_url``; return how many were deleted."""


def store_for(url: str) -> ObjectStore:
    """The backend for ``url``'s scheme: ``file://`` or ``s3://``."""
    scheme = urlsplit(url).scheme
    if scheme == "file":
        file_url_to_path(url)  # validate now, not at the first upload
        return LocalStore()
    if scheme == "s3":
        split_s3_url(url)
        return S3Store()
    raise ValueError(f"unsupported storage URL {url!r}: expected file:///... or s3://bucket/prefix")


__all__ = [
    "LocalStore",
    "ObjectStore",
    "S3Limits",
    "S3Store",
    "StorageError",
    "file_url_to_path",
    "is_s3",
    "join",
    "split_s3_url",
    "store_for",
]

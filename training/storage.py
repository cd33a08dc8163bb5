"""Remote vs local object storage in one tiny module (torchtitan ``tools/filesystem.py`` style).

Locations stay URL *strings* end to end — a ``pathlib.Path`` would collapse ``s3://b/k`` into
``s3:/b/k`` — and the scheme picks the backend:

- ``file:///abs/dir`` → :class:`LocalStore` (plain files; every write is temp file + rename, so a
  reader never sees half an object);
- ``s3://bucket/prefix`` → :class:`S3Store` (boto3, imported lazily; an S3 PUT is atomic by
  itself). The endpoint, region and credentials come ONLY from boto3's own configuration chain
  (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``,
  ``AWS_MAX_ATTEMPTS``, ...). Nothing here reads, stores or logs them.

Objects are addressed by full URLs; "directories" are just URL prefixes ending before a ``/``.
A missing object raises :class:`FileNotFoundError` on both backends.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

# 64 MiB parts: MEASURED.md has boto3 download_file at 53 MB/s with the default 8 MiB parts and
# 329 MB/s with 64 MiB parts (fewer ranged GETs; the per-request overhead dominates).
S3_PART_BYTES = 64 * 1024 * 1024
S3_CONCURRENCY = 8


class StorageError(RuntimeError):
    """An object-store operation failed; the message names the URL (never credentials)."""


@runtime_checkable
class ObjectStore(Protocol):
    """What the trainer needs from a place that holds checkpoints and run outputs."""

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


def join(url: str, *parts: str) -> str:
    """``join("s3://b/runs", "r1", "step-5")`` → ``"s3://b/runs/r1/step-5"`` (no Path involved)."""
    out = url.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            out = f"{out}/{part}"
    return out


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


# --------------------------------------------------------------------------------------- local


def file_url_to_path(url: str) -> Path:
    """``file:///a/b%20c`` → ``Path("/a/b c")``. Only absolute local file URLs are accepted."""
    parts = urlsplit(url)
    if parts.scheme != "file":
        raise ValueError(f"not a file:// URL: {url!r}")
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"file:// URL {url!r} names a host; use file:///absolute/path")
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise ValueError(f"file:// URL {url!r} is not absolute")
    return Path(path)


def _atomic_write(dest: Path, write: Any) -> None:
    """Run ``write(tmp_path)`` then rename into place, so ``dest`` is never seen half-written."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
        _fsync_dir(dest.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fsync_dir(directory: Path) -> None:
    # Make the rename itself durable: a commit marker must survive a power cut once written.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class LocalStore:
    """Objects as files under a local directory tree."""

    def put_file(self, local: Path, key_url: str) -> None:
        _atomic_write(file_url_to_path(key_url), lambda tmp: shutil.copyfile(local, tmp))

    def get_file(self, url: str, local: Path) -> None:
        src = file_url_to_path(url)
        if not src.is_file():
            raise FileNotFoundError(f"no object at {url}")
        _atomic_write(Path(local), lambda tmp: shutil.copyfile(src, tmp))

    def list(self, prefix_url: str) -> list[str]:
        root = file_url_to_path(prefix_url)
        if not root.is_dir():
            return []
        base = prefix_url.rstrip("/")
        out = []
        for dirpath, _dirs, files in os.walk(root):
            rel_dir = Path(dirpath).relative_to(root).as_posix()
            for name in files:
                # Temp files of in-flight writes are not objects yet.
                if name.startswith(".") and name.endswith(".tmp"):
                    continue
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                out.append(f"{base}/{rel}")
        return sorted(out)

    def exists(self, url: str) -> bool:
        return file_url_to_path(url).is_file()

    def read_bytes(self, url: str) -> bytes:
        path = file_url_to_path(url)
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise FileNotFoundError(f"no object at {url}") from None

    def write_bytes(self, url: str, data: bytes) -> None:
        _atomic_write(file_url_to_path(url), lambda tmp: tmp.write_bytes(data))

    def delete(self, url: str) -> None:
        path = file_url_to_path(url)
        path.unlink(missing_ok=True)
        self._prune_empty(path.parent)

    def delete_prefix(self, prefix_url: str) -> int:
        root = file_url_to_path(prefix_url)
        if not root.is_dir():
            return 0
        count = sum(len(files) for _d, _s, files in os.walk(root))
        shutil.rmtree(root, ignore_errors=False)
        return count

    @staticmethod
    def _prune_empty(directory: Path) -> None:
        # Object stores have no empty directories; keep the local tree looking the same.
        try:
            directory.rmdir()
        except OSError:
            pass


# ------------------------------------------------------------------------------------------ S3


def split_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` → ``("bucket", "a/b")``."""
    parts = urlsplit(url)
    if parts.scheme == "s3" and "@" in parts.netloc:
        # Never echo this URL: the part before "@" is a credential.
        raise ValueError(
            "an s3:// URL must not embed credentials (user:secret@bucket); "
            "set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY instead"
        )
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"not an s3://bucket/key URL: {url!r}")
    return parts.netloc, parts.path.lstrip("/")


class S3Store:
    """Objects in S3 (or MinIO / moto) through one boto3 client, created on first use.

    boto3 clients are thread-safe (sessions are not), so one client serves the trainer thread
    and the background upload thread.
    """

    def __init__(self) -> None:
        self._client: Any = None
        self._transfer: Any = None
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3
                from boto3.s3.transfer import TransferConfig

                # No endpoint/credential/retry arguments on purpose: boto3 reads AWS_* itself.
                self._client = boto3.session.Session().client("s3")
                self._transfer = TransferConfig(
                    multipart_threshold=S3_PART_BYTES,
                    multipart_chunksize=S3_PART_BYTES,
                    max_concurrency=S3_CONCURRENCY,
                )
            return self._client

    def _error(self, action: str, url: str, exc: Exception) -> Exception:
        code = _error_code(exc)
        if code in ("404", "NoSuchKey", "NotFound"):
            return FileNotFoundError(f"no object at {url}")
        detail = f"{code}" if code else type(exc).__name__
        return StorageError(f"S3 {action} {url} failed: {detail}: {exc}")

    def put_file(self, local: Path, key_url: str) -> None:
        bucket, key = split_s3_url(key_url)
        client = self.client
        try:
            client.upload_file(str(local), bucket, key, Config=self._transfer)
        except Exception as exc:
            raise self._error("upload to", key_url, exc) from exc

    def get_file(self, url: str, local: Path) -> None:
        bucket, key = split_s3_url(url)
        client = self.client
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            client.download_file(bucket, key, str(tmp), Config=self._transfer)
            os.replace(tmp, local)
        except Exception as exc:
            tmp.unlink(missing_ok=True)
            raise self._error("download of", url, exc) from exc

    def list(self, prefix_url: str) -> list[str]:
        bucket, key = split_s3_url(prefix_url)
        prefix = key.rstrip("/") + "/" if key.strip("/") else ""
        out = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix
            )
            for page in pages:
                out.extend(f"s3://{bucket}/{obj['Key']}" for obj in page.get("Contents", []))
        except Exception as exc:
            raise self._error("list of", prefix_url, exc) from exc
        return sorted(out)

    def exists(self, url: str) -> bool:
        bucket, key = split_s3_url(url)
        try:
            self.client.head_object(Bucket=bucket, Key=key)
            return True
        except Exception as exc:
            err = self._error("head of", url, exc)
            if isinstance(err, FileNotFoundError):
                return False
            raise err from exc

    def read_bytes(self, url: str) -> bytes:
        bucket, key = split_s3_url(url)
        try:
            return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as exc:
            raise self._error("read of", url, exc) from exc

    def write_bytes(self, url: str, data: bytes) -> None:
        bucket, key = split_s3_url(url)
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=data)
        except Exception as exc:
            raise self._error("write of", url, exc) from exc

    def delete(self, url: str) -> None:
        bucket, key = split_s3_url(url)
        try:
            self.client.delete_object(Bucket=bucket, Key=key)
        except Exception as exc:
            err = self._error("delete of", url, exc)
            if not isinstance(err, FileNotFoundError):
                raise err from exc

    def delete_prefix(self, prefix_url: str) -> int:
        urls = self.list(prefix_url)
        bucket, _ = split_s3_url(prefix_url)
        for start in range(0, len(urls), 1000):  # DeleteObjects takes at most 1000 keys
            keys = [{"Key": split_s3_url(u)[1]} for u in urls[start : start + 1000]]
            try:
                resp = self.client.delete_objects(
                    Bucket=bucket, Delete={"Objects": keys, "Quiet": True}
                )
            except Exception as exc:
                raise self._error("delete of", prefix_url, exc) from exc
            if resp.get("Errors"):
                first = resp["Errors"][0]
                raise StorageError(
                    f"S3 delete below {prefix_url} failed for {first.get('Key')}: {first.get('Code')}"
                )
        return len(urls)


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""

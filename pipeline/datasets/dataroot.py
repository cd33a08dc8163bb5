"""Where a build writes when DATA_ROOT is on object storage: a local WORK ROOT that mirrors it.

Builds write exactly as they do into a local DATA_ROOT (segments, chunks and version folders
under temp names, renamed into place, flock'ed guards and leases), into a local folder, and
then PUBLISH what they wrote to the ``s3://`` data root (``pipeline/datasets/publish.py``):
every immutable object first, the manifest last. Keeping the writers local keeps one code
path for both kinds of data root, with every crash-safety property the local one has
(atomic renames, fsyncs, content-addressed reuse); S3 only ever receives complete objects.

The work root is ``LAKETRAIN_CACHE_DIR/build/<bucket>/<prefix>``: beside the reader's cache
(``LAKETRAIN_CACHE_DIR/objects``) but not counted in its bound nor evicted, because a build
reuses what it wrote there. It may be deleted at any time between builds: a commit pulls back
from S3 whatever it reads (``pull.py``).

Code that receives a local root asks :func:`remote_for` whether it is the work root of the
configured ``s3://`` data root; that is how the commit, the head sync and the process step
know they must publish, without a second argument threaded through every call.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.storage.urls import is_s3, join, split_s3_url


def _settings():
    from pipeline.settings import get_settings

    return get_settings()


def configured() -> Path | str:
    """The settings' DATA_ROOT: a folder, or an ``s3://bucket/prefix`` string."""
    return _settings().data_root


def work_root_of(remote: str) -> Path:
    """The local work root of the ``s3://`` data root ``remote``."""
    bucket, prefix = split_s3_url(remote)
    root = Path(_settings().laketrain_cache_dir) / "build" / bucket
    return root / prefix.strip("/") if prefix.strip("/") else root


def work_root(data_root: Path | str | None = None) -> Path:
    """The local folder a build writes into: DATA_ROOT itself when it is a folder, else the
    work root of the ``s3://`` one. ``data_root`` None means the settings' DATA_ROOT."""
    location = configured() if data_root is None else data_root
    if is_s3(location):
        return work_root_of(str(location))
    return Path(location)


def remote_for(local: Path | str | None) -> str | None:
    """The ``s3://`` data root whose work root is ``local``; None for a plain local DATA_ROOT
    (nothing to publish)."""
    if local is None:
        return None
    if is_s3(local):
        return str(local).rstrip("/")
    location = configured()
    if not is_s3(location):
        return None
    remote = str(location).rstrip("/")
    return remote if Path(local).resolve() == work_root_of(remote).resolve() else None


def resolve(data_root: Path | str | None = None) -> tuple[Path, str | None]:
    """(the local folder to write into, the ``s3://`` data root to publish to or None)."""
    location = configured() if data_root is None else data_root
    if is_s3(location):
        return work_root_of(str(location)), str(location).rstrip("/")
    return Path(location), remote_for(location)


def object_url(remote: str, relpath: str) -> str:
    """``object_url("s3://b/p", "segments/r/s/x.npy")`` → ``"s3://b/p/segments/r/s/x.npy"``."""
    return join(remote, relpath)

"""Immutable segments: the preprocessed arrays of one shard, content-addressed.

A segment lives in ``DATA_ROOT/segments/<recipe_hash>/<segment_id>/`` and holds ``x`` (N, ...)
and ``y`` (N,) int32 — the index of a content label (tables) in ``segment.json``'s ``labels``,
or -1 when the label comes from the file's path — either as two ``.npy`` files (memory-mapped
by the reader) or as one zarr group ``data.zarr`` (read chunk by chunk). ``segment.json`` is
written last and says which md5 owns which rows.

The id is a hash of the recipe, the format and the shard's sorted md5 list, so processing the
same shard twice lands on the same name: the second writer finds the folder and reuses it.
Everything is written under a ``.tmp-*`` name and published with one ``os.rename``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.datasets.crash_points import pause_hook
from pipeline.datasets.errors import BuildError
from pipeline.storage.durable import fsync_dir, sync_all

SEGMENT_FORMAT_VERSION = 1
FORMATS = ("npy", "zarr")
INFO_NAME = "segment.json"
ZARR_NAME = "data.zarr"
# Rows per zarr chunk: whole-chunk reads of 64 samples are ~60x faster than single-sample
# reads of a 64-row chunk (MEASURED.md), and the reader always reads whole chunks.
ZARR_CHUNK_ROWS = 64
# A temp folder whose writer we cannot see (another host) is left alone this long.
STALE_TEMP_SECONDS = 6 * 3600


def segment_id_for(recipe_hash: str, fmt: str, md5s: list[str]) -> str:
    digest = hashlib.sha256(f"segment-v{SEGMENT_FORMAT_VERSION}\n{recipe_hash}\n{fmt}\n".encode())
    for md5 in sorted(md5s):
        digest.update(md5.encode() + b"\n")
    return digest.hexdigest()


def segments_root(data_root: Path, recipe_hash: str) -> Path:
    return Path(data_root) / "segments" / recipe_hash


@contextmanager
def segments_guard(data_root: Path, *, exclusive: bool = False) -> Iterator[None]:
    """A lock on DATA_ROOT's segments between builds (shared) and ``gc --apply`` (exclusive).
    A build holds it from the moment it finds or publishes a segment folder until the store
    records it; gc holds it from its plan until the folders it dropped from the store are gone.
    So a segment is never recorded by a build while gc deletes its folder: the store's rows and
    the folders on disk agree. (flock: one host, or a shared filesystem that supports it.)"""
    root = Path(data_root) / "segments"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".gc.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def segment_relpath(recipe_hash: str, segment_id: str) -> str:
    return f"segments/{recipe_hash}/{segment_id}"


@dataclass(frozen=True, slots=True)
class WrittenSegment:
    path: Path
    n_rows: int
    size_bytes: int
    sha256: str
    reused: bool
    info: dict


def write_segment(
    data_root: Path,
    *,
    recipe_hash: str,
    segment_id: str,
    fmt: str,
    x: np.ndarray,
    y: np.ndarray,
    info: dict,
) -> WrittenSegment:
    """Write x/y + segment.json under a temp name, then publish by rename (or reuse)."""
    if fmt not in FORMATS:
        raise ValueError(f"segment format must be one of {FORMATS}, got {fmt!r}")
    root = segments_root(data_root, recipe_hash)
    root.mkdir(parents=True, exist_ok=True)
    final = root / segment_id
    if (final / INFO_NAME).is_file():
        return load_written(final)
    tmp = (
        root / f".tmp-{segment_id[:16]}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    )
    tmp.mkdir()
    try:
        if fmt == "npy":
            _save_npy(tmp / "x.npy", x)
            _save_npy(tmp / "y.npy", y.astype(np.int32, copy=False))
        else:
            _save_zarr(tmp / ZARR_NAME, x, y.astype(np.int32, copy=False))
        size, sha = tree_digest(tmp)
        full_info = {
            "format_version": SEGMENT_FORMAT_VERSION,
            "segment_id": segment_id,
            "recipe_hash": recipe_hash,
            "format": fmt,
            "n_rows": int(x.shape[0]),
            "x_shape": list(x.shape[1:]),
            "x_dtype": str(x.dtype),
            "size_bytes": size,
            "sha256": sha,
            **info,
        }
        (tmp / INFO_NAME).write_bytes(json.dumps(full_info, sort_keys=True).encode())
        # Every file of the folder (npy or zarr) synced in one batch (one journal commit on
        # ext4, durable.sync_all), all before the rename that publishes the folder.
        _sync_files([f for f in tmp.rglob("*") if f.is_file()])
        fsync_dir(tmp)
        pause_hook("segment_before_rename")
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process published the same content-addressed segment first: use theirs.
            if (final / INFO_NAME).is_file():
                shutil.rmtree(tmp, ignore_errors=True)
                return load_written(final)
            if final.exists():
                # A leftover without segment.json cannot be a published segment (the info
                # file is inside the renamed folder), so it is garbage from an older layout.
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
            else:
                raise
        fsync_dir(root)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        # A full disk says "No space left on device" without a name: say which segment.
        raise BuildError(
            f"{final}: cannot write the segment ({exc.strerror or exc}); nothing was recorded"
        ) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return WrittenSegment(final, full_info["n_rows"], size, sha, False, full_info)


def load_written(path: Path) -> WrittenSegment:
    info = read_info(path)
    return WrittenSegment(path, info["n_rows"], info["size_bytes"], info["sha256"], True, info)


def read_info(path: Path) -> dict:
    try:
        info = json.loads((Path(path) / INFO_NAME).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"segment {path}: unreadable {INFO_NAME}: {exc}") from exc
    if info.get("format_version") != SEGMENT_FORMAT_VERSION:
        raise ValueError(
            f"segment {path} has format_version {info.get('format_version')!r}; "
            f"this laketrain reads only {SEGMENT_FORMAT_VERSION}"
        )
    return info


def tree_digest(folder: Path) -> tuple[int, str]:
    """Total size and one sha256 over every file (relative name + bytes), in sorted order."""
    digest = hashlib.sha256()
    total = 0
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name != INFO_NAME)
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
                total += len(chunk)
    return total, digest.hexdigest()


def clean_stale_temps(data_root: Path, recipe_hash: str | None = None) -> list[Path]:
    """Remove temp folders left by killed writers: on this host, those whose process is gone;
    from other hosts, those older than STALE_TEMP_SECONDS."""
    base = Path(data_root) / "segments"
    roots = (
        [base / recipe_hash]
        if recipe_hash
        else ([p for p in base.iterdir() if p.is_dir()] if base.is_dir() else [])
    )
    removed = []
    host = socket.gethostname()
    for root in roots:
        if not root.is_dir():
            continue
        for tmp in root.glob(".tmp-*"):
            if _temp_is_stale(tmp, host):
                shutil.rmtree(tmp, ignore_errors=True)
                removed.append(tmp)
    return removed


def _temp_is_stale(tmp: Path, host: str) -> bool:
    parts = tmp.name.split("-")
    # .tmp-<id16>-<host...>-<pid>-<rand>: the host may itself contain dashes.
    if len(parts) >= 5:
        pid_text, owner = parts[-2], "-".join(parts[2:-2])
        if owner == host and pid_text.isdigit():
            return not _pid_alive(int(pid_text))
    try:
        return time.time() - tmp.stat().st_mtime > STALE_TEMP_SECONDS
    except FileNotFoundError:
        return False


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (killed child not yet reaped) still answers kill(0): check its state.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, np.ascontiguousarray(array), allow_pickle=False)


def _sync_files(paths: list[Path]) -> None:
    """Sync the files together (durable.sync_all), all before the folder's rename."""
    fds: list[int] = []
    try:
        for path in paths:
            fds.append(os.open(path, os.O_RDONLY))
        sync_all(fds)
    finally:
        for fd in fds:
            os.close(fd)


def _save_zarr(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    import zarr

    group = zarr.open_group(str(path), mode="w")
    rows = max(1, min(ZARR_CHUNK_ROWS, x.shape[0]))
    xa = group.create_array(
        "x", shape=x.shape, chunks=(rows, *x.shape[1:]), dtype=x.dtype, compressors=None
    )
    if x.shape[0]:
        xa[:] = x
    ya = group.create_array(
        "y", shape=y.shape, chunks=(max(1, y.shape[0]),), dtype=y.dtype, compressors=None
    )
    if y.shape[0]:
        ya[:] = y

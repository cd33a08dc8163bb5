"""What a committed checkpoint is, and how one is checked: the layout, the commit marker, and
verified reading.

Layout under ``run_url = <CHECKPOINT_URL>/<RUN_ID>``::

    step-<N>/state.pt      torch.save of the whole state dict the trainer handed to save()
    step-<N>/COMMIT.json   the commit marker: sha256 and size of every file, written LAST
    latest                 {"step", "url"} of the newest committed checkpoint (after its marker)
    best                   {"step", "url", "metric"} of the best committed checkpoint
    result.json            the run's result (write_result), and any file from upload_file

A checkpoint counts only when its marker exists and every file it lists has that size and
sha256: a kill or a failed upload at any moment leaves either no marker (ignored) or a whole
checkpoint. The functions here take the store and a step URL; the manager
(training/checkpoint.py) decides which steps to write, read, keep and delete.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from pipeline.storage import ObjectStore, join

# The manager's logger: its warnings about a checkpoint read the same wherever they come from.
log = logging.getLogger("training.checkpoint")

MARKER = "COMMIT.json"
STATE_FILE = "state.pt"
MARKER_FORMAT = 1
POINTERS = ("latest", "best")
RESULT_FILE = "result.json"
STEP_DIR = re.compile(r"^step-(\d+)$")
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+=@-]{0,254}$")
_HASH_CHUNK = 1 << 20


def step_dir_name(step: int) -> str:
    return f"step-{step}"


def check_manager_args(base_url: Any, run_id: Any, keep_last: Any, rank: Any) -> None:
    """ValueError naming the argument when a run's checkpoint location cannot be laid out."""
    if not isinstance(base_url, str) or not base_url.startswith(("file://", "s3://")):
        shown = "<a URL with credentials>" if "@" in str(base_url) else repr(base_url)
        raise ValueError(f"checkpoint base_url must start with file:// or s3://, got {shown}")
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        raise ValueError(
            f"run_id {run_id!r} is not valid: use 1-255 letters, digits and ._:+=@- "
            "(it becomes one path component of the checkpoint URL)"
        )
    if not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"keep_last must be an integer >= 1, got {keep_last!r}")
    if not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be an integer >= 0, got {rank!r}")


def step_folders(store: ObjectStore, run_url: str) -> dict[int, set[str]]:
    """step → names of the objects in its folder (only step-<N> folders) under ``run_url``."""
    prefix = run_url + "/"
    out: dict[int, set[str]] = {}
    for url in store.list(run_url):
        rel = url[len(prefix) :] if url.startswith(prefix) else ""
        head, _, rest = rel.partition("/")
        m = STEP_DIR.match(head)
        if m and rest:
            out.setdefault(int(m.group(1)), set()).add(rest)
    return out


def read_json(store: ObjectStore, url: str) -> dict | None:
    """A pointer or result file: None when missing, or (with a WARNING) when not JSON."""
    try:
        return json.loads(store.read_bytes(url))
    except FileNotFoundError:
        return None
    except ValueError:
        log.warning("%s is not valid JSON; ignoring it", url)
        return None


def json_bytes(obj: dict) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def file_digest(path: Path) -> tuple[int, str]:
    """(size, sha256 hex) of a local file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


# ------------------------------------------------------------------------------ writing


def check_weights_only(path: Path) -> None:
    """Refuse, at save time, a state that resume could not load with ``weights_only=True``
    (a custom class, a numpy RNG tuple...): otherwise every checkpoint of the run would be
    skipped at resume and training would silently restart from scratch. ``mmap=True`` makes
    this cheap: only the pickle structure is read, not the tensor bytes."""
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:
        raise TypeError(
            "checkpoint state cannot be loaded with torch.load(weights_only=True); keep it to "
            "tensors, dicts, lists, tuples, str, int, float, bool and None (store numpy RNG "
            f"state as a tensor or list): {exc}"
        ) from None


def write_snapshot(state: dict, snap_dir: Path) -> Path:
    """``torch.save`` of ``state`` into a fresh local ``snap_dir``: whole or not there."""
    if snap_dir.exists():
        shutil.rmtree(snap_dir)
    snap_dir.mkdir(parents=True)
    tmp = snap_dir / f".{STATE_FILE}.tmp"
    # torch.save runs synchronously: once it returns, the trainer may go on mutating the
    # tensors it handed in without touching the snapshot.
    try:
        torch.save(state, tmp)
        check_weights_only(tmp)
        tmp.replace(snap_dir / STATE_FILE)
    except BaseException:
        shutil.rmtree(snap_dir, ignore_errors=True)
        raise
    return snap_dir


def snapshot_files(snap_dir: Path) -> dict[str, dict[str, Any]]:
    """name → {size, sha256} of every file of a local snapshot (dot-files are temporaries)."""
    files = {}
    for path in sorted(p for p in snap_dir.iterdir() if p.is_file() and not p.name.startswith(".")):
        size, sha = file_digest(path)
        files[path.name] = {"size": size, "sha256": sha}
    return files


def marker_bytes(run_id: str, step: int, metric: float | None, files: dict) -> bytes:
    return json_bytes(
        {
            "format": MARKER_FORMAT,
            "run_id": run_id,
            "step": step,
            "metric": metric,
            "files": files,
            "created_at": datetime.now(UTC).isoformat(),
        }
    )


def check_upload_name(name: str) -> None:
    """A file uploaded beside the checkpoints must not pass for one, nor for a pointer."""
    if (
        not name
        or name.startswith((".", "/"))
        or ".." in name.split("/")
        or STEP_DIR.match(name.split("/")[0])
    ):
        raise ValueError(
            f"upload name {name!r} is not allowed (relative, no '..', not a step-<N> folder)"
        )
    if name in (*POINTERS, RESULT_FILE):
        raise ValueError(f"upload name {name!r} is reserved")


# ------------------------------------------------------------------------------ reading


def read_marker(store: ObjectStore, url: str) -> tuple[dict | None, str | None]:
    """(the marker, None) or (None, why the checkpoint at ``url`` does not count)."""
    try:
        raw = store.read_bytes(join(url, MARKER))
    except FileNotFoundError:
        return None, "has no commit marker (incomplete upload or deleted)"
    try:
        marker = json.loads(raw)
        files = marker["files"]
        if (
            marker.get("format") != MARKER_FORMAT
            or not isinstance(files, dict)
            or STATE_FILE not in files
        ):
            raise ValueError(f"unknown marker format or no {STATE_FILE}")
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"has an unreadable commit marker ({exc})"
    for name in files:
        if "/" in name or name.startswith("."):
            return None, f"lists a bad file name {name!r}"
    return marker, None


def fetch_checked(store: ObjectStore, url: str, files: dict, tmp_dir: Path) -> str | None:
    """Download every file the marker lists into ``tmp_dir`` and check its size and sha256;
    None when all match, else why not."""
    for name, expect in files.items():
        local = tmp_dir / name
        try:
            store.get_file(join(url, name), local)
        except FileNotFoundError:
            return f"is missing {name}"
        size, sha = file_digest(local)
        if size != expect.get("size") or sha != expect.get("sha256"):
            return (
                f"is corrupt: {name} has size {size} sha256 {sha[:12]}, the marker says "
                f"size {expect.get('size')} sha256 {str(expect.get('sha256'))[:12]}"
            )
    return None


@contextmanager
def fetched(
    store: ObjectStore, url: str, marker: dict, parent: Path, prefix: str
) -> Iterator[tuple[Path, str | None]]:
    """The checkpoint's files downloaded and checked into a temporary folder under
    ``parent`` (removed afterwards): (that folder, None), or (it, why they do not match)."""
    parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield tmp_dir, fetch_checked(store, url, marker["files"], tmp_dir)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def load_verified(
    store: ObjectStore, url: str, map_location: Any, parent: Path
) -> tuple[dict | None, str | None]:
    """(the state dict, None) of the committed, intact checkpoint at ``url``, or (None, why
    not)."""
    marker, reason = read_marker(store, url)
    if marker is None:
        return None, reason
    with fetched(store, url, marker, parent, "restore-") as (tmp_dir, reason):
        if reason:
            return None, reason
        try:
            state = torch.load(tmp_dir / STATE_FILE, map_location=map_location, weights_only=True)
        except Exception as exc:
            return None, f"could not be loaded ({exc})"
        if not isinstance(state, dict):
            return None, "does not hold a dict"
        return state, None


def verify(store: ObjectStore, url: str, parent: Path) -> str | None:
    """None when the checkpoint at ``url`` is committed and every file matches its marker
    (downloaded and hashed); else why not."""
    marker, reason = read_marker(store, url)
    if marker is None:
        return reason
    with fetched(store, url, marker, parent, "verify-") as (_tmp_dir, reason):
        return reason

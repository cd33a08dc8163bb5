"""Build leases: the segments an in-flight build counts on, so gc leaves them alone.

A build is plan → process → commit, and in the ingest DAG those are separate tasks, minutes
apart, possibly on different workers that share DATA_ROOT. ``plan`` leaves out every file whose
content already has processed samples; ``commit`` assembles the version from those rows. A gc
in between that dropped such a segment (say, of files that were removed and have come back, so
no kept version references it) would make the commit leave those files out without a word.

So ``plan`` writes a lease naming the segments whose processed rows it counts on, and
``process`` one for each segment it records; gc skips every segment of a live lease. Leases
are files, ``DATA_ROOT/segments/.leases/<dataset>/<name>.json``, written atomically (temp +
rename) under the segments lock that gc takes exclusively: a gc either ran before the plan
read the store, or sees its lease. ``commit`` releases the leases it found once it has
committed (the head version then references every segment of a current file). A lease expires
after LEASE_SECONDS, so a build that died never blocks gc for long; an expired lease still
serves commit's check (:func:`check_counted_on`), which fails loudly, rather than leave files
out, when a file lost its processed rows and a segment the build counted on is gone.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline.datasets.errors import BuildError
from pipeline.metadata.datasets import Segment
from pipeline.metadata.driver import driver_rows
from pipeline.metadata.ledger import STATUS_INVALID, STATUS_OK

LEASE_FORMAT = 1
# Longer than any plan → commit of a real build (a DAG run's tasks, retries included); short
# enough that a build that died does not keep its garbage from gc for more than a day.
LEASE_SECONDS = 24 * 3600
LEASES_DIR = ".leases"
# Paths named in a BuildError: enough to find the files, not the whole lake.
_NAMED = 10


@dataclass(frozen=True)
class Lease:
    path: Path
    dataset: str
    recipe_hash: str
    segments: frozenset[str]
    expires_at: float

    def live(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) < self.expires_at


def leases_root(data_root: Path) -> Path:
    return Path(data_root) / "segments" / LEASES_DIR


def take_lease(
    data_root: Path,
    dataset: str,
    recipe_hash: str,
    segment_ids: Iterable[str],
    *,
    kind: str,
    seconds: float = LEASE_SECONDS,
) -> Path | None:
    """Write a lease on ``segment_ids`` (none: no file); the caller holds segments_guard."""
    ids = sorted(set(segment_ids))
    if not ids:
        return None
    folder = leases_root(data_root) / dataset
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    host, pid = socket.gethostname(), os.getpid()
    name = f"{time.time_ns()}-{kind}-{pid}-{secrets.token_hex(4)}.json"
    body = {
        "format": LEASE_FORMAT,
        "dataset": dataset,
        "recipe_hash": recipe_hash,
        "kind": kind,
        "holder": f"{host}:{pid}",
        "created_at": now,
        "expires_at": now + seconds,
        "segments": ids,
    }
    tmp = folder / f".{name}.tmp"
    # Renamed whole (gc never reads half a lease), but not synced: a lease only matters while
    # its build lives, and a power cut that could lose it stops that build too (its rerun
    # plans again and writes a new one). Two syncs were ~5 % of a small increment's time.
    with open(tmp, "w") as fh:
        json.dump(body, fh)
    os.replace(tmp, folder / name)
    return folder / name


def read_leases(data_root: Path, dataset: str | None = None) -> list[Lease]:
    """The leases of one dataset (or of all), live and expired; unreadable files are skipped
    (a lease being written has a temp name, so only damage makes one unreadable)."""
    root = leases_root(data_root)
    folders = [root / dataset] if dataset else sorted(p for p in root.glob("*") if p.is_dir())
    out: list[Lease] = []
    for folder in folders:
        for path in sorted(folder.glob("[!.]*.json")):
            try:
                body = json.loads(path.read_text())
                out.append(
                    Lease(
                        path,
                        str(body["dataset"]),
                        str(body["recipe_hash"]),
                        frozenset(body["segments"]),
                        float(body["expires_at"]),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return out


def leased_segments(data_root: Path) -> set[str]:
    """Segments that a live lease of any dataset protects from gc."""
    now = time.time()
    out: set[str] = set()
    for lease in read_leases(data_root):
        if lease.live(now):
            out |= lease.segments
    return out


def release(paths: Iterable[Path]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def prune_expired(data_root: Path, *, grace: float = LEASE_SECONDS) -> list[Path]:
    """Remove leases expired more than ``grace`` ago (their builds died, or their dataset
    never committed again): gc calls this, so they do not pile up for ever. Within the grace
    an expired lease still serves commit's check."""
    now = time.time()
    old = [lease.path for lease in read_leases(data_root) if lease.expires_at + grace < now]
    release(old)
    return old


F = TypeVar("F", bound=Callable[..., Any])


def released_after(commit: F) -> F:
    """Wrap ``commit(dataset, ..., data_root=None)``: once it returns (a version or None), drop
    the dataset's leases that existed when it started. A commit that raised keeps them, so its
    rerun still checks what the failed one counted on. Leases written meanwhile (a newer plan)
    stay for their own commit."""

    @functools.wraps(commit)
    def wrapper(dataset: str, *args: Any, **kwargs: Any) -> Any:
        from pipeline.datasets.dataroot import work_root

        # Leases live where the build writes: DATA_ROOT, or an s3:// one's work root.
        held = [lease.path for lease in read_leases(work_root(kwargs.get("data_root")), dataset)]
        result = commit(dataset, *args, **kwargs)
        release(held)
        return result

    return wrapper  # type: ignore[return-value]


def relied_on_segments(session: Session, dataset: str, recipe_hash: str) -> list[str]:
    """Segments holding processed rows of the dataset's current files under ``recipe_hash``:
    what a plan counts on (the files it does not put in a shard)."""
    rows = driver_rows(
        session,
        "SELECT DISTINCT p.segment_id FROM ledger_files l JOIN processed_samples p "
        "ON p.md5 = l.md5 AND p.recipe_hash = ? "
        "WHERE l.dataset = ? AND l.deleted_at IS NULL AND p.segment_id IS NOT NULL",
        (recipe_hash, dataset),
    )
    return [r[0] for r in rows]


def check_counted_on(
    session: Session,
    data_root: Path,
    dataset: str,
    recipe: Any,
    files: list[tuple],
    processed: dict[str, Any],
    segment_ids: Iterable[str],
) -> None:
    """Raise BuildError when a current file has no processed rows while a segment this build
    counted on (its leases', and ``segment_ids``, the segments its shards made) is gone from
    the store: those rows were deleted under the build (a gc that did not see a live lease),
    and publishing without them would silently drop the files. A file merely scanned after the
    plan also has no rows; it is left for the next build, as before, when nothing is gone."""
    missing = [
        path
        for path, md5, _size, _mtime, status, _error in files
        if md5 is not None
        and status in (STATUS_OK, STATUS_INVALID)
        and md5 not in processed
        and not recipe.is_sidecar(path)
    ]
    if not missing:
        return
    counted = set(segment_ids)
    for lease in read_leases(data_root, dataset):
        if lease.recipe_hash == recipe.recipe_hash:
            counted |= lease.segments
    if not counted:
        return
    ids = sorted(counted)
    present: set[str] = set()
    for i in range(0, len(ids), 500):
        present.update(
            session.scalars(
                select(Segment.segment_id).where(Segment.segment_id.in_(ids[i : i + 500]))
            )
        )
    gone = counted - present
    if not gone:
        return
    named = ", ".join(missing[:_NAMED]) + (
        f" and {len(missing) - _NAMED} more" if len(missing) > _NAMED else ""
    )
    raise BuildError(
        f"{dataset}: {len(missing)} file(s) have no processed samples any more: {named}. "
        f"{len(gone)} segment(s) this build counted on were deleted while it ran (by gc?). "
        "Nothing was published; rerun the build (plan again) to decode them."
    )

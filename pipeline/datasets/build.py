"""Build a dataset version in three steps: plan → process (per shard) → commit.

- ``plan`` reads the LEDGER (every current file of the dataset), not a scan's change set, so a
  missed or collapsed trigger event can never lose a file; it returns shards of the md5s that
  have no processed sample under the current recipe yet.
- ``process`` decodes one shard into one content-addressed segment and records the processed
  samples; rerunning the same shard reuses the segment it finds.
- ``commit`` assembles the version from the store alone (no decoding, no segment reads), and
  publishes it atomically, under the dataset's lock, unless the lake content is unchanged.

The three steps are plain functions over JSON-safe values so the ingest DAG can map ``process``
over shards on any worker; ``build`` runs them locally with a process pool.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np
from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.datasets import head
from pipeline.datasets import manifest as mf
from pipeline.datasets.buildlock import build_lock
from pipeline.datasets.errors import BuildError
from pipeline.datasets.hooks import pause_hook
from pipeline.datasets.leases import (
    check_counted_on,
    released_after,
    relied_on_segments,
    take_lease,
)
from pipeline.datasets.pool import worker_pool
from pipeline.datasets.queries import latest_committed
from pipeline.datasets.segments import (
    clean_stale_temps,
    load_written,
    read_info,
    segment_id_for,
    segment_relpath,
    segments_guard,
    segments_root,
    write_segment,
)
from pipeline.datasets.shards import decoded_bytes, pack
from pipeline.gcpause import gc_paused
from pipeline.metadata.base import utcnow
from pipeline.metadata.datasets import (
    SAMPLE_INVALID,
    SAMPLE_OK,
    VERSION_COMMITTED,
    DatasetLock,
    DatasetVersion,
    ProcessedSample,
    Segment,
    VersionInvalid,
    VersionSegment,
)
from pipeline.metadata.driver import driver_executemany, driver_rows
from pipeline.metadata.ledger import STATUS_INVALID, STATUS_OK, LedgerFile
from pipeline.metadata.locks import ensure_lock_row, take_lock_row
from pipeline.metadata.store import MetadataStore, open_store

_INSERT_BATCH = 5000
# What json.dumps does to one string (ensure_ascii), without its per-call checks: this runs
# once per sample on every commit.
_json_string = json.encoder.encode_basestring_ascii


# ---- values that travel between the steps (XCom-safe) -----------------------------------------


@dataclass(frozen=True, slots=True)
class ShardFile:
    md5: str
    path: str  # lake-relative; any current path with this content
    size: int


@dataclass(frozen=True)
class Shard:
    dataset: str
    recipe_hash: str
    format: str
    files: list[ShardFile]

    @property
    def segment_id(self) -> str:
        return segment_id_for(self.recipe_hash, self.format, [f.md5 for f in self.files])

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "recipe_hash": self.recipe_hash,
            "format": self.format,
            "files": [[f.md5, f.path, f.size] for f in self.files],
        }

    @classmethod
    def from_dict(cls, data: dict) -> Shard:
        return cls(
            data["dataset"],
            data["recipe_hash"],
            data["format"],
            [ShardFile(*f) for f in data["files"]],
        )


@dataclass(frozen=True)
class SegmentRef:
    dataset: str
    recipe_hash: str
    segment_id: str
    format: str
    path: str  # relative to DATA_ROOT
    n_rows: int
    n_files: int
    decoded: int  # files decoded by this call (0 when the segment was reused)
    invalid: int
    reused: bool

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> SegmentRef:
        return cls(**data)


@dataclass(frozen=True)
class Version:
    dataset: str
    version_id: str
    tag: str
    parent_id: str | None
    samples: int
    train: int
    val: int
    added: int
    removed: int
    changed: int
    created_at: str
    path: str
    invalid: int = 0
    # What the commit that returned this did with the dataset's head: "published" (a new
    # version, now the head) or "returned" (the lake went back to this older version's
    # content; the head moved back to it). None on a Version not returned by commit.
    head_move: str | None = None

    @property
    def short_id(self) -> str:
        return self.version_id[:8]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BuildReport:
    dataset: str
    version: Version | None
    shards: int = 0
    decoded: int = 0
    invalid: int = 0
    reused_segments: int = 0
    scan: dict | None = None
    segments: list[SegmentRef] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per phase

    def to_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "version": self.version.to_dict() if self.version else None,
            "shards": self.shards,
            "decoded": self.decoded,
            "invalid": self.invalid,
            "reused_segments": self.reused_segments,
            "scan": self.scan,
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
        }


# ---- plan -------------------------------------------------------------------------------------


def _settings():
    from pipeline.settings import get_settings

    return get_settings()


def _recipe(dataset: str):
    from pipeline.datasets.recipes import load_recipe

    return load_recipe(dataset)


@gc_paused()
def plan(
    dataset: str,
    *,
    store: MetadataStore | None = None,
    max_files: int | None = None,
    max_bytes: int | None = None,
    max_decoded_bytes: int | None = None,
) -> list[Shard]:
    """Shards (≤ max_files files, ≤ max_bytes source bytes, ≤ max_decoded_bytes of decoded
    samples as the recipe sizes them; default the SHARD_FILES, SHARD_MB and SHARD_DECODED_MB
    settings) of the dataset's current contents that have no processed sample under the
    current recipe. Identical content at several paths is planned once."""
    settings = _settings()
    max_files = settings.shard_files if max_files is None else max_files
    max_bytes = settings.shard_mb << 20 if max_bytes is None else max_bytes
    if max_decoded_bytes is None:
        max_decoded_bytes = settings.shard_decoded_mb << 20
    if max_files < 1 or max_bytes < 1 or max_decoded_bytes < 1:
        raise ValueError("max_files, max_bytes and max_decoded_bytes must be at least 1")
    recipe = _recipe(dataset)
    rh = recipe.recipe_hash
    store = store or open_store()
    # Under the segments lock (gc holds it exclusively), read what is processed and lease the
    # segments holding it: no gc can drop them between this plan and its commit (leases.py).
    with segments_guard(settings.data_root), store.session() as session:
        files = _files_to_process(session, dataset, rh)
        take_lease(
            settings.data_root, dataset, rh, relied_on_segments(session, dataset, rh), kind="plan"
        )
    todo: dict[str, ShardFile] = {}
    for path, md5, size in files:
        if recipe.is_sidecar(path):
            continue
        if md5 not in todo:  # files are sorted by path: the first path of a content wins
            todo[md5] = ShardFile(md5, path, int(size or 0))
    groups = pack(
        [todo[md5] for md5 in sorted(todo)],
        max_files=max_files,
        max_bytes=max_bytes,
        max_decoded=max_decoded_bytes,
        size_of=lambda f: f.size,
        decoded_of=lambda f: decoded_bytes(recipe, f.path, f.size),
    )
    return [Shard(dataset, rh, recipe.format, batch) for batch in groups]


def _files_to_process(session: Session, dataset: str, rh: str) -> list[tuple]:
    """(path, md5, size) of the dataset's current files whose content has no processed sample
    under recipe ``rh``, by path: one anti-join on the (md5, recipe_hash) key, so a build that
    adds 1 % of files reads 1 % of rows, not a set of every md5 ever processed."""
    rows = driver_rows(
        session,
        "SELECT l.path, l.md5, l.size FROM ledger_files l "
        "WHERE l.dataset = ? AND l.deleted_at IS NULL AND l.md5 IS NOT NULL AND l.status IN (?, ?) "
        "AND NOT EXISTS (SELECT 1 FROM processed_samples p WHERE p.md5 = l.md5 AND p.recipe_hash = ?)",
        (dataset, STATUS_OK, STATUS_INVALID, rh),
    )
    rows.sort()  # by path, in code point order like commit (a SQL ORDER BY follows the collation)
    return rows


def _current_files(
    session: Session, dataset: str, rh: str
) -> tuple[list[tuple], dict[str, _Processed]]:
    """(path, md5, size, mtime_ns, status, error) of every file of the dataset now, by path, and
    what recipe ``rh`` made of each of their contents. Two plain reads, joined here: a SQL join
    probes the (md5, recipe_hash) index once per file, measured 2-3x slower on SQLite than
    reading both row sets in order; and sorting in Python beats SQLite's temp B-tree."""
    files = driver_rows(
        session,
        "SELECT path, md5, size, mtime_ns, status, error FROM ledger_files WHERE dataset = ? AND deleted_at IS NULL",
        (dataset,),
    )
    files.sort()  # by path: paths are unique in the ledger
    wanted = {f[1] for f in files if f[1]}
    cols = 'md5, segment_id, "row", n_rows, status, reason, labels, lines, invalid_rows, stats'
    processed: dict[str, _Processed] = {}
    if len(wanted) > 2000:
        # Cheaper to read the recipe's whole table than to send thousands of bound values.
        rows = driver_rows(
            session, f"SELECT {cols} FROM processed_samples WHERE recipe_hash = ?", (rh,)
        )
    else:
        md5s = sorted(wanted)
        rows = []
        for i in range(0, len(md5s), 1000):
            chunk = md5s[i : i + 1000]
            rows += driver_rows(
                session,
                f"SELECT {cols} FROM processed_samples WHERE recipe_hash = ? AND md5 IN ({', '.join('?' * len(chunk))})",
                (rh, *chunk),
            )
    make = _Processed._make
    for r in rows:
        if r[0] in wanted:
            processed[r[0]] = make(r)
    return files, processed


# ---- process ----------------------------------------------------------------------------------


def process(
    shard: Shard | dict,
    *,
    store: MetadataStore | None = None,
    data_root: Path | None = None,
    lake: Path | None = None,
    threads: int = 1,
) -> SegmentRef:
    """Decode one shard into one segment and record its processed samples. Idempotent: a rerun
    (or a concurrent run) of the same shard reuses the published segment. ``threads`` > 1
    checks and decodes files in that many threads (hashlib and Pillow's codecs and resize run
    without the GIL): the local build uses it for a plan of one shard, where starting worker
    processes costs more than the decode of a small increment."""
    from pipeline.datasets.preprocess import (
        InvalidInput,
        preprocessor_for,
        sample_dtype,
        sample_shape,
    )
    from pipeline.datasets.preprocess.augment import augment
    from pipeline.datasets.recipes import split_of

    if isinstance(shard, dict):
        shard = Shard.from_dict(shard)
    settings = _settings()
    data_root = Path(data_root or settings.data_root)
    lake = Path(lake or settings.lake_dir)
    store = store or open_store()
    recipe = _recipe(shard.dataset)
    if recipe.recipe_hash != shard.recipe_hash:
        raise BuildError(
            f"the recipe of {shard.dataset!r} changed since this shard was planned "
            f"({shard.recipe_hash[:12]} → {recipe.recipe_hash[:12]}); plan again"
        )
    seg_id = shard.segment_id
    clean_stale_temps(data_root, shard.recipe_hash)
    final = segments_root(data_root, shard.recipe_hash) / seg_id
    with segments_guard(data_root):
        if (final / "segment.json").is_file():
            written = load_written(final)
            pause_hook("segment_reused")
            os.utime(final)  # tells gc this segment is in use again
            _record_segment(store, shard.dataset, written.info)
            take_lease(data_root, shard.dataset, shard.recipe_hash, [seg_id], kind="process")
            return _ref(shard, written.info, decoded=0, reused=True)

    pre = preprocessor_for(recipe)
    copies = recipe.augment.copies
    shape = tuple(sample_shape(recipe))
    expected: tuple[int, ...] | None = None if -1 in shape else shape
    xs: list[np.ndarray] = []
    label_names: list[str] = []
    label_index: dict[str, int] = {}
    ys: list[int] = []
    entries: list[dict] = []
    invalid: list[dict] = []
    decoded = 0

    def read(f: ShardFile) -> object:
        """The file's decoded samples, its InvalidInput, or None when it changed or went away
        since the scan (left for the next scan, nothing recorded)."""
        abspath = str(lake / f.path)
        if _md5_of(abspath) != f.md5:
            return None
        try:
            return pre.decode(abspath, recipe)
        except InvalidInput as exc:
            return exc
        except Exception as exc:
            # Not a verdict on the file (a transient I/O error, a decoder bug, no memory): fail
            # the shard, naming the file, rather than mark it invalid for good.
            raise BuildError(
                f"{f.path}: cannot decode ({type(exc).__name__}: {exc}); nothing of its shard "
                "was recorded, rerun the build"
            ) from exc

    files = sorted(shard.files, key=lambda f: f.md5)
    with ExitStack() as stack:
        if threads > 1 and len(files) > 1:
            pool = stack.enter_context(ThreadPoolExecutor(min(threads, len(files))))
            results = pool.map(read, files)  # in order, whatever order they finish in
        else:
            results = map(read, files)
        read_files = list(zip(files, results, strict=True))
    for f, result in read_files:
        if result is None:
            continue
        decoded += 1
        if isinstance(result, InvalidInput):
            invalid.append({"md5": f.md5, "path": f.path, "reason": result.reason})
            continue
        shapes = {tuple(sample.x.shape) for sample in result.samples}
        if expected is None and len(shapes) == 1:
            expected = next(iter(shapes))  # tables without feature_columns: the first file decides
        if shapes and shapes != {expected}:
            # One segment holds one sample shape; a file that disagrees is left out, not fatal.
            got = ", ".join(str(list(sh)) for sh in sorted(shapes))
            invalid.append(
                {
                    "md5": f.md5,
                    "path": f.path,
                    "reason": f"sample shape {got} != {list(expected or ())} of the other files",
                }
            )
            continue
        start = len(xs)
        labels: list[str | None] = []
        lines: list[int | None] = []
        splits: list[str] = []  # tables: each row's split ("t"/"v"), by its key
        for sample in result.samples:
            if sample.key is not None:
                splits.append(split_of(sample.key, recipe.split.val_fraction)[0])
            rows = [sample.x]
            if copies:
                try:
                    rows += [
                        augment(sample.x, md5=f.md5, copy_index=k, ops=recipe.augment.ops)
                        for k in range(1, copies + 1)
                    ]
                except Exception as exc:
                    raise BuildError(f"{f.path}: cannot augment ({exc})") from exc
            for x in rows:
                xs.append(x)
                labels.append(sample.label)
                lines.append(sample.row)
                if sample.label is None:
                    ys.append(-1)
                else:
                    if sample.label not in label_index:
                        label_index[sample.label] = len(label_names)
                        label_names.append(sample.label)
                    ys.append(label_index[sample.label])
        n = len(xs) - start
        has_content_labels = any(lab is not None for lab in labels)
        entries.append(
            {
                "md5": f.md5,
                "row": start,
                "n_rows": n,
                "per_sample": copies + 1,
                "labels": labels if has_content_labels else None,
                "lines": lines if any(v is not None for v in lines) else None,
                "invalid_rows": [[int(line), reason] for line, reason in result.invalid_rows],
                "stats": _stats(xs[start:]) if n else None,
                "splits": "".join(splits) if splits and len(splits) == n else None,
            }
        )
    dtype = sample_dtype(recipe)
    if xs:
        x = np.stack(xs).astype(dtype, copy=False)
    else:
        x = np.zeros((0, *[max(d, 0) for d in shape]), dtype=dtype)
    y = np.asarray(ys, dtype=np.int32)
    pause_hook("process_decoded")
    done = [e["md5"] for e in entries] + [e["md5"] for e in invalid]
    if len(done) != len(shard.files):
        # Some files changed since the scan: name the segment after what it really holds, so
        # the planned name never stands for a segment that lacks some of its md5s.
        seg_id = segment_id_for(shard.recipe_hash, shard.format, done)
    with segments_guard(data_root):
        written = write_segment(
            data_root,
            recipe_hash=shard.recipe_hash,
            segment_id=seg_id,
            fmt=shard.format,
            x=x,
            y=y,
            info={
                "dataset": shard.dataset,
                "labels": label_names,
                "entries": entries,
                "invalid": invalid,
            },
        )
        pause_hook("segment_renamed")
        _record_segment(store, shard.dataset, written.info)
        # Until the commit: gc must not take what this build is about to publish.
        seg_id = written.info["segment_id"]
        take_lease(data_root, shard.dataset, shard.recipe_hash, [seg_id], kind="process")
    return _ref(
        shard, written.info, decoded=0 if written.reused else decoded, reused=written.reused
    )


def _ref(shard: Shard, info: dict, *, decoded: int, reused: bool) -> SegmentRef:
    return SegmentRef(
        dataset=shard.dataset,
        recipe_hash=shard.recipe_hash,
        segment_id=info["segment_id"],
        format=info["format"],
        path=segment_relpath(shard.recipe_hash, info["segment_id"]),
        n_rows=info["n_rows"],
        n_files=len(info["entries"]) + len(info["invalid"]),
        decoded=decoded,
        invalid=len(info["invalid"]),
        reused=reused,
    )


def _md5_of(abspath: str) -> str | None:
    from pipeline.lake.hashing import md5_file

    try:
        return md5_file(abspath)
    except OSError:
        return None


def _stats(rows: list[np.ndarray]) -> dict:
    """Per-channel count/sum/sumsq (channel = axis 0 of a sample; a feature for tables), so
    commit can compute the train split's mean/std without reading any segment."""
    a = np.stack(rows).astype(np.float64)
    axes = (0, *range(2, a.ndim))
    count = a.size // a.shape[1] if a.ndim > 1 else a.size
    return {
        "count": int(count),
        "sum": a.sum(axis=axes).tolist() if a.ndim > 1 else [float(a.sum())],
        "sumsq": (a * a).sum(axis=axes).tolist() if a.ndim > 1 else [float((a * a).sum())],
    }


def _record_segment(store: MetadataStore, dataset: str, info: dict) -> None:
    """Record a published segment and its processed samples (idempotent), and mark the
    ledger rows of invalid files. Safe to call again after a crash, or concurrently."""
    rh = info["recipe_hash"]
    seg_id = info["segment_id"]
    for attempt in range(3):
        try:
            with store.session() as session:
                if session.get(Segment, seg_id) is None:
                    session.add(
                        Segment(
                            segment_id=seg_id,
                            recipe_hash=rh,
                            format=info["format"],
                            path=segment_relpath(rh, seg_id),
                            n_rows=info["n_rows"],
                            size_bytes=info["size_bytes"],
                            sha256=info["sha256"],
                        )
                    )
                    session.flush()
                md5s = [e["md5"] for e in info["entries"]] + [e["md5"] for e in info["invalid"]]
                have = _existing_md5s(session, rh, md5s)
                rows = []
                for e in info["entries"]:
                    if e["md5"] not in have:
                        rows.append(
                            {
                                "md5": e["md5"],
                                "recipe_hash": rh,
                                "segment_id": seg_id,
                                "row": e["row"],
                                "n_rows": e["n_rows"],
                                "status": SAMPLE_OK,
                                "reason": None,
                                "labels": json.dumps(e["labels"])
                                if e["labels"] is not None
                                else None,
                                "lines": json.dumps(e["lines"]) if e["lines"] is not None else None,
                                "invalid_rows": json.dumps(e["invalid_rows"])
                                if e["invalid_rows"]
                                else None,
                                "stats": json.dumps(
                                    {
                                        **(e["stats"] or {}),
                                        "per_sample": e.get("per_sample", 1),
                                        # per-row splits (tables), read by commit's _assemble
                                        **({"splits": e["splits"]} if e.get("splits") else {}),
                                    }
                                ),
                                "created_at": utcnow(),
                            }
                        )
                for e in info["invalid"]:
                    if e["md5"] not in have:
                        rows.append(
                            {
                                "md5": e["md5"],
                                "recipe_hash": rh,
                                "segment_id": seg_id,
                                "row": 0,
                                "n_rows": 0,
                                "status": SAMPLE_INVALID,
                                "reason": e["reason"],
                                "labels": None,
                                "lines": None,
                                "invalid_rows": None,
                                "stats": None,
                                "created_at": utcnow(),
                            }
                        )
                if rows:
                    session.execute(insert(ProcessedSample), rows)
                ok_md5s = [e["md5"] for e in info["entries"]]
                for i in range(0, len(ok_md5s), 500):
                    # An older recipe's verdict no longer holds: this one decoded the file.
                    session.execute(
                        update(LedgerFile)
                        .where(
                            LedgerFile.md5.in_(ok_md5s[i : i + 500]),
                            LedgerFile.dataset == dataset,
                            LedgerFile.status == STATUS_INVALID,
                            LedgerFile.deleted_at.is_(None),
                        )
                        .values(status=STATUS_OK, error=None)
                    )
                for e in info["invalid"]:
                    # The scanner keeps this verdict until the file's md5 changes.
                    session.execute(
                        update(LedgerFile)
                        .where(
                            LedgerFile.md5 == e["md5"],
                            LedgerFile.dataset == dataset,
                            LedgerFile.deleted_at.is_(None),
                        )
                        .values(status=STATUS_INVALID, error=e["reason"])
                    )
            return
        except IntegrityError:
            if attempt == 2:
                raise  # a concurrent writer recorded the same keys; the retry sees them


def _existing_md5s(session: Session, recipe_hash: str, md5s: list[str]) -> set[str]:
    have: set[str] = set()
    for i in range(0, len(md5s), 1000):
        chunk = md5s[i : i + 1000]
        have.update(
            session.scalars(
                select(ProcessedSample.md5).where(
                    ProcessedSample.recipe_hash == recipe_hash, ProcessedSample.md5.in_(chunk)
                )
            )
        )
    return have


# ---- commit -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Sample:
    path: str
    md5: str
    label: str | None
    split: str
    segment_id: str
    row: int
    size: int | None
    mtime_ns: int | None
    duplicate: bool
    line: int | None
    copy: int


@gc_paused()
@released_after  # the leases of this dataset's plans and shards, once committed
def commit(
    dataset: str,
    segments: list[SegmentRef | dict] | None = None,
    *,
    store: MetadataStore | None = None,
    data_root: Path | None = None,
    lake: Path | None = None,
) -> Version | None:
    """Publish the version of the dataset's current contents and make it the head, or move
    the head back to an older version with the same contents (``head_move`` says which), or
    return None when the head already is that version. ``segments`` (the outputs of
    ``process``) are recorded again if a crash lost their records; the version itself is
    assembled from the store."""
    from pipeline.datasets.recipes import load_sidecar

    settings = _settings()
    data_root = Path(data_root or settings.data_root)
    lake = Path(lake or settings.lake_dir)
    store = store or open_store()
    recipe = _recipe(dataset)
    rh = recipe.recipe_hash
    refs = [SegmentRef.from_dict(r) if isinstance(r, dict) else r for r in segments or []]
    if refs:
        with store.session() as session:
            recorded = set(
                session.scalars(
                    select(Segment.segment_id).where(
                        Segment.segment_id.in_([r.segment_id for r in refs])
                    )
                )
            )
        with segments_guard(data_root):  # gc must not remove a folder recorded here
            for ref in refs:
                # A segment row is written in the same transaction as its processed samples,
                # so only a segment without one (a crash between rename and record) needs
                # reading.
                folder = data_root / ref.path
                if ref.segment_id not in recorded and (folder / "segment.json").is_file():
                    _record_segment(store, dataset, read_info(folder))
    pause_hook("before_commit")
    sidecar = load_sidecar(lake / dataset, recipe)
    ensure_lock_row(store, DatasetLock, dataset)
    # synced_after is entered first so it runs after the session has committed: the HEAD file
    # mirrors the store's head, never runs ahead of it (pipeline/datasets/head.py).
    with head.synced_after(store, data_root, dataset), store.session() as session:
        take_lock_row(session, DatasetLock, dataset)
        files, processed = _current_files(session, dataset, rh)
        latest = latest_committed(session, dataset)  # the head, not the newest created
        parent_rows, known_splits = (
            _version_paths(session, latest.version_id) if latest else ({}, {})
        )
        if latest is None or latest.recipe_hash != rh or recipe.split.group_regex:
            known_splits = {}  # a split depends on the md5 alone only under the same recipe, without group_regex
        samples, invalid = _assemble(recipe, files, processed, sidecar, known_splits)
        # Fail, never publish without them, when files lost rows the build counted on.
        check_counted_on(
            session, data_root, dataset, recipe, files, processed, [r.segment_id for r in refs]
        )
        version_id = mf.version_id_for(dataset, rh, [(s.md5, s.label, s.split) for s in samples])
        if latest is not None and latest.version_id == version_id:
            return None
        existing = session.get(DatasetVersion, version_id)
        if existing is not None and existing.status == VERSION_COMMITTED:
            # The lake went back to the content of an older version: that version is it, and
            # the head moves back to it (latest must name what the lake holds).
            head.move_head(session, dataset, version_id, head.HEAD_RETURNED)
            return replace(_version_of(existing), head_move=head.HEAD_RETURNED)
        parent = latest
        diff = _diff(parent_rows, samples)
        folder = mf.version_dir(data_root, dataset, version_id)
        _clean_staging(folder.parent)
        clean_stale_temps(data_root, rh)
        if (folder / mf.MANIFEST).is_file():
            # Published before a crash, never recorded: keep what is on disk (same content).
            manifest, manifest_sha = mf.read_manifest(folder)
        else:
            if folder.exists():
                shutil.rmtree(folder)  # cannot be a version: the manifest is in the renamed folder
            manifest = _manifest(
                dataset, recipe, version_id, parent, samples, invalid, processed, diff, session
            )
            manifest_sha = _publish(folder, manifest, samples, invalid)
        pause_hook("commit_renamed")
        row = DatasetVersion(
            version_id=version_id,
            dataset=dataset,
            tag=manifest["tag"],
            parent_id=manifest["parent"],
            recipe_hash=rh,
            format=recipe.format,
            status=VERSION_COMMITTED,
            samples=manifest["counts"]["samples"],
            train=manifest["counts"]["train"],
            val=manifest["counts"]["val"],
            files=manifest["counts"]["files"],
            invalid=manifest["counts"]["invalid"],
            added=manifest["diff"]["added"],
            removed=manifest["diff"]["removed"],
            changed=manifest["diff"]["changed"],
            path=mf.version_relpath(dataset, version_id),
            manifest_sha256=manifest_sha,
            manifest=json.dumps(manifest, sort_keys=True),
            created_at=datetime.fromisoformat(manifest["created_at"]),
        )
        if existing is not None:  # a deleted (gc'd) version published again
            session.delete(existing)
            session.flush()
        session.add(row)
        session.flush()
        _insert_version_rows(
            session, version_id, samples, invalid, [s["id"] for s in manifest["segments"]]
        )
        head.move_head(session, dataset, version_id, head.HEAD_PUBLISHED)
        return replace(_version_of(row), head_move=head.HEAD_PUBLISHED)


class _Processed(NamedTuple):
    """One processed_samples row as read by commit: a tuple, built straight from the driver's
    row (one per content of the dataset on every commit)."""

    md5: str
    segment_id: str | None
    row: int
    n_rows: int
    status: str
    reason: str | None
    labels: str | None
    lines: str | None
    invalid_rows: str | None
    stats: str | None


def _assemble(
    recipe, files, processed, sidecar, known_splits: dict[str, str] | None = None
) -> tuple[list[_Sample], list[dict]]:
    """Samples in (path, row) order, and the files/lines left out with their reason.
    ``known_splits`` (md5 -> split, from the parent version under the same recipe) spares
    recomputing the split hash of every content already placed."""
    known_splits = known_splits or {}
    samples: list[_Sample] = []
    invalid: list[dict] = []
    # Rows per source sample under this recipe: the original + its augmented copies.
    per_sample = recipe.augment.copies + 1
    split_by_md5: dict[str, str] = {}  # also: the contents already seen (duplicates)
    rule = recipe.labels.rule
    sidecar_path = f"/{recipe.labels.file}" if rule == "sidecar" else None
    for path, md5, size, mtime, status, error in files:
        if sidecar_path is not None and path.endswith(sidecar_path) and recipe.is_sidecar(path):
            continue
        if status not in (STATUS_OK, STATUS_INVALID) or md5 is None:
            invalid.append({"path": path, "md5": md5, "line": None, "reason": error or status})
            continue
        ps = processed.get(md5)
        if ps is None:
            continue  # arrived after the plan: the next build takes it
        if ps.status == SAMPLE_INVALID:
            invalid.append(
                {"path": path, "md5": md5, "line": None, "reason": ps.reason or "invalid"}
            )
            continue
        if ps.invalid_rows:
            for line, reason in json.loads(ps.invalid_rows):
                invalid.append({"path": path, "md5": md5, "line": line, "reason": reason})
        content_labels = json.loads(ps.labels) if ps.labels else None
        lines = json.loads(ps.lines) if ps.lines else None
        path_label = None
        if content_labels is None and rule != "none":
            path_label = recipe.label_for(path, sidecar)
            if path_label is None:
                where = "labels file" if rule == "sidecar" else "class folder"
                invalid.append(
                    {
                        "path": path,
                        "md5": md5,
                        "line": None,
                        "reason": f"no label: the file has no {where}",
                    }
                )
                continue
        # A content's split is decided once, by its first path, so duplicates never straddle it.
        split = split_by_md5.get(md5)
        duplicate = split is not None
        if split is None:
            split = known_splits.get(md5) or recipe.split_for(path, md5)
            split_by_md5[md5] = split
        if ps.n_rows == 1 and content_labels is None and lines is None:
            # The common case (one image per file): no per-row loop.
            samples.append(
                _Sample(
                    path,
                    md5,
                    path_label,
                    split,
                    ps.segment_id,
                    ps.row,
                    size,
                    mtime,
                    duplicate,
                    None,
                    0,
                )
            )
            continue
        # Table rows have a split each, by their row key, unless a group_regex on the path
        # puts the whole file in its group's split.
        row_splits = _row_splits(ps) if lines is not None else None
        if row_splits is not None and recipe.split_key(path, md5) != md5:
            row_splits = None
        for k in range(ps.n_rows):
            copy = k % per_sample
            row_split = split if row_splits is None else row_splits[k]
            if copy and row_split == "val":
                continue  # augmented copies are for training only
            samples.append(
                _Sample(
                    path,
                    md5,
                    content_labels[k] if content_labels else path_label,
                    row_split,
                    ps.segment_id,
                    ps.row + k,
                    size,
                    mtime,
                    duplicate,
                    lines[k] if lines else None,
                    copy,
                )
            )
    return samples, invalid


def _row_splits(ps: _Processed) -> list[str] | None:
    """The per-row splits process recorded for a table's rows (None: the file's split)."""
    text = json.loads(ps.stats).get("splits") if ps.stats else None
    if not text or len(text) != ps.n_rows:
        return None
    return ["val" if c == "v" else "train" for c in text]


def _version_paths(
    session: Session, version_id: str
) -> tuple[dict[str, tuple[str, str | None]], dict[str, str]]:
    """{path: (md5, label)} of a version's samples (its first row per path), and {md5: split}."""
    rows = driver_rows(
        session,
        "SELECT idx, path, md5, label, split FROM version_samples WHERE version_id = ?",
        (version_id,),
    )
    rows.sort()  # by idx (unique per version): cheaper here than SQLite's temp B-tree
    out: dict[str, tuple[str, str | None]] = {}
    splits: dict[str, str] = {}
    for _idx, path, md5, label, split in rows:
        if path not in out:
            out[path] = (md5, label)
        splits[md5] = split
    return out, splits


def path_diff(old: dict[str, tuple], new: dict[str, tuple]) -> dict[str, list[str]]:
    """added / removed / changed lake paths between two {path: (md5, label)} maps."""
    return {
        "added": sorted(set(new) - set(old)),
        "removed": sorted(set(old) - set(new)),
        "changed": sorted(p for p in set(old) & set(new) if old[p] != new[p]),
    }


def _diff(parent_rows: dict, samples: list[_Sample]) -> dict[str, int]:
    """The counts of path_diff(parent_rows, {path: (md5, label)}), without building the lists."""
    new: dict[str, tuple] = {}
    for s in samples:
        if s.path not in new:
            new[s.path] = (s.md5, s.label)
    added = changed = 0
    get = parent_rows.get
    for path, value in new.items():
        old = get(path)
        if old is None:
            added += 1
        elif old != value:
            changed += 1
    return {"added": added, "removed": len(parent_rows) - (len(new) - added), "changed": changed}


def _manifest(
    dataset, recipe, version_id, parent, samples, invalid, processed, diff, session
) -> dict:
    from pipeline.datasets.preprocess import sample_dtype, sample_shape

    created = utcnow()
    # One pass over the samples for every count the manifest holds (this runs per sample on
    # every commit): labels, segments, per-split class counts, train weight per content.
    seg_set: set[str] = set()
    paths: set[str] = set()
    dup_paths: set[str] = set()
    split_n = {"train": 0, "val": 0}
    split_counts: dict[str, dict[str, int]] = {"train": {}, "val": {}}
    train_weights: dict[str, int] = {}
    for s in samples:
        seg_set.add(s.segment_id)
        paths.add(s.path)
        if s.duplicate:
            dup_paths.add(s.path)
        split_n[s.split] += 1
        if s.label is not None:  # unlabelled samples count in "samples" only
            counts = split_counts[s.split]
            counts[s.label] = counts.get(s.label, 0) + 1
        if s.split == "train":
            train_weights[s.md5] = train_weights.get(s.md5, 0) + 1
    classes = sorted(set(split_counts["train"]) | set(split_counts["val"]))
    seg_ids = sorted(seg_set)
    seg_rows = (
        {
            s.segment_id: s
            for s in session.scalars(select(Segment).where(Segment.segment_id.in_(seg_ids)))
        }
        if seg_ids
        else {}
    )
    per_split = {
        split: {"samples": split_n[split], "classes": dict(sorted(split_counts[split].items()))}
        for split in ("train", "val")
    }
    mean, std = _train_mean_std(train_weights, processed)
    shape = list(sample_shape(recipe))
    if samples and -1 in shape:
        info = seg_rows.get(samples[0].segment_id)
        shape = _segment_shape(info) or shape
    return {
        "format_version": mf.FORMAT_VERSION,
        "id": version_id,
        "short_id": version_id[:8],
        "tag": mf.tag_for(dataset, version_id, created),
        "dataset": dataset,
        "parent": parent.version_id if parent else None,
        "recipe": recipe.model_dump(mode="json"),
        "recipe_hash": recipe.recipe_hash,
        "modality": recipe.modality,
        "format": recipe.format,
        "sample_shape": shape,
        "sample_dtype": str(sample_dtype(recipe)),
        "classes": classes,
        "counts": {
            "samples": len(samples),
            "train": per_split["train"]["samples"],
            "val": per_split["val"]["samples"],
            "files": len(paths),
            "duplicates": len(dup_paths),
            "invalid": len(invalid),
            "per_split": per_split,
        },
        "diff": diff,
        "segments": [
            {
                "id": sid,
                "path": seg_rows[sid].path,
                "n_rows": seg_rows[sid].n_rows,
                "size_bytes": seg_rows[sid].size_bytes,
                "sha256": seg_rows[sid].sha256,
            }
            for sid in seg_ids
        ],
        "mean": mean,
        "std": std,
        "files": {
            "metadata": mf.METADATA,
            "invalid": mf.INVALID,
            "index_segment": mf.INDEX_SEGMENT,
            "index_row": mf.INDEX_ROW,
            "labels": mf.LABELS,
            "splits": mf.SPLITS,
        },
        "created_at": created.isoformat(),
    }


def _segment_shape(seg: Segment | None) -> list[int] | None:
    if seg is None:
        return None
    try:
        return read_info(_settings().data_root / seg.path)["x_shape"]
    except (OSError, KeyError, ValueError):
        return None


def _train_mean_std(
    weights: dict[str, int], processed: dict[str, _Processed]
) -> tuple[list[float], list[float]]:
    """Per-channel mean/std of the train split (0..255 for images), from the per-content sums
    recorded by process: weighted by how many train samples (``weights``) each content gives."""
    scales: list[float] = []
    texts: list[str] = []
    for md5, n in weights.items():
        ps = processed[md5]
        if ps.stats:
            # Stats cover all n_rows of the content; scale to the rows this version uses.
            scales.append(n / ps.n_rows)
            texts.append(ps.stats)
    # One JSON document for all contents: one C-level parse instead of one call per content.
    parsed = json.loads("[" + ",".join(texts) + "]")
    keep = [i for i, st in enumerate(parsed) if st.get("count")]
    if not keep:
        return [], []
    w = np.asarray([scales[i] for i in keep])
    total = w @ np.asarray([parsed[i]["sum"] for i in keep], dtype=np.float64)
    total_sq = w @ np.asarray([parsed[i]["sumsq"] for i in keep], dtype=np.float64)
    count = float(w @ np.asarray([parsed[i]["count"] for i in keep], dtype=np.float64))
    if count == 0:
        return [], []
    mean = total / count
    var = np.maximum(total_sq / count - mean * mean, 0.0)
    return [round(float(v), 6) for v in mean], [round(float(v), 6) for v in np.sqrt(var)]


def _publish(folder: Path, manifest: dict, samples: list[_Sample], invalid: list[dict]) -> str:
    """Write the version under a staging name, manifest last, then rename it into place."""
    staging = folder.parent / f"{mf.STAGING_PREFIX}{secrets.token_hex(6)}"
    staging.mkdir(parents=True)
    try:
        seg_pos = {s["id"]: i for i, s in enumerate(manifest["segments"])}
        classes = {c: i for i, c in enumerate(manifest["classes"])}
        label_json: dict[str | None, str] = {}
        lines = [_metadata_line(i, s, label_json) for i, s in enumerate(samples)]
        raw = mf.manifest_bytes(manifest)
        # Every file, the manifest last, is synced before the staging folder is renamed into
        # place (the publish point). A staging folder is never read, only removed, so its files
        # need no order among themselves: one batch of syncs.
        mf.write_all_synced(
            staging,
            [
                (
                    mf.INDEX_SEGMENT,
                    _npy_bytes(
                        np.asarray([seg_pos[s.segment_id] for s in samples], dtype=np.int32)
                    ),
                ),
                (mf.INDEX_ROW, _npy_bytes(np.asarray([s.row for s in samples], dtype=np.int64))),
                (
                    mf.SPLITS,
                    _npy_bytes(np.asarray([s.split == "val" for s in samples], dtype=np.int8)),
                ),
                (
                    mf.LABELS,
                    _npy_bytes(
                        np.asarray(
                            [
                                classes.get(s.label, -1) if s.label is not None else -1
                                for s in samples
                            ],
                            dtype=np.int64,
                        )
                    ),
                ),
                (mf.METADATA, ("\n".join(lines) + "\n" if lines else "").encode()),
                (
                    mf.INVALID,
                    "".join(json.dumps(r, sort_keys=True) + "\n" for r in invalid).encode(),
                ),
                (mf.MANIFEST, raw),
            ],
        )
        mf.fsync_dir(staging)
        pause_hook("commit_staged")
        os.rename(staging, folder)
        mf.fsync_dir(folder.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return hashlib.sha256(raw).hexdigest()


def _metadata_line(i: int, s: _Sample, labels: dict[str | None, str] | None = None) -> str:
    """One metadata.jsonl line, keys sorted, exactly what json.dumps(sort_keys=True) writes;
    formatted by hand, in one f-string, because this runs once per sample on every commit.
    ``labels`` caches the JSON form of each label (a handful of classes)."""
    label = labels.get(s.label) if labels is not None else None
    if label is None:
        label = "null" if s.label is None else _json_string(s.label)
        if labels is not None:
            labels[s.label] = label
    copy = f'"copy": {s.copy}, ' if s.copy else ""
    line = f'"line": {int(s.line)}, ' if s.line is not None else ""
    # hex digests and split names never need escaping
    return (
        f'{{{copy}"duplicate": {"true" if s.duplicate else "false"}, "index": {i}, "label": {label}, '
        f'{line}"md5": "{s.md5}", "mtime_ns": {"null" if s.mtime_ns is None else int(s.mtime_ns)}, '
        f'"path": {_json_string(s.path)}, "row": {int(s.row)}, "segment": "{s.segment_id}", '
        f'"size": {"null" if s.size is None else int(s.size)}, "split": "{s.split}"}}'
    )


def _npy_bytes(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _clean_staging(dataset_dir: Path) -> None:
    """Staging folders left by a killed commit. Only called under the dataset lock, when no
    other commit of this dataset can be writing one."""
    if dataset_dir.is_dir():
        for stale in dataset_dir.glob(f"{mf.STAGING_PREFIX}*"):
            shutil.rmtree(stale, ignore_errors=True)


def _insert_version_rows(
    session: Session,
    version_id: str,
    samples: list[_Sample],
    invalid: list[dict],
    seg_ids: list[str],
) -> None:
    conn = session.connection()
    # Straight to the DBAPI cursor's executemany with tuples: this is one row per sample per
    # version, and SQLAlchemy's per-row parameter processing would double its cost.
    driver_executemany(
        session,
        "INSERT INTO version_samples (version_id, idx, path, md5, label, split, duplicate) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (version_id, i, s.path, s.md5, s.label, s.split, s.duplicate)
            for i, s in enumerate(samples)
        ],
        batch=_INSERT_BATCH,
    )
    if invalid:
        conn.execute(insert(VersionInvalid), [{"version_id": version_id, **r} for r in invalid])
    if seg_ids:
        conn.execute(
            insert(VersionSegment), [{"version_id": version_id, "segment_id": s} for s in seg_ids]
        )


def _version_of(row: DatasetVersion) -> Version:
    return Version(
        dataset=row.dataset,
        version_id=row.version_id,
        tag=row.tag,
        parent_id=row.parent_id,
        samples=row.samples,
        train=row.train,
        val=row.val,
        added=row.added,
        removed=row.removed,
        changed=row.changed,
        created_at=row.created_at.isoformat(),
        path=row.path,
        invalid=row.invalid,
    )


# ---- build: all three locally -----------------------------------------------------------------


def _process_in_worker(args: tuple[dict, str]) -> dict:
    shard, url = args
    return process(Shard.from_dict(shard), store=open_store(url)).to_dict()


def run_build(
    dataset: str,
    *,
    workers: int | None = None,
    store: MetadataStore | None = None,
    scan_first: bool = True,
    max_files: int | None = None,
    max_bytes: int | None = None,
    on_plan: Callable[[list[Shard]], None] | None = None,
    on_shard: Callable[[SegmentRef], None] | None = None,
    wait: bool = True,
    on_wait: Callable[[str], None] | None = None,
) -> BuildReport:
    """Scan the dataset, then plan, process (process pool) and commit; report what was done.
    Another build of the dataset running: wait for it (``on_wait`` gets the message naming its
    pid), or with ``wait=False`` raise BuildBusyError."""
    settings = _settings()
    store = store or open_store()
    workers = workers or settings.hash_workers
    report = BuildReport(dataset, None)
    _recipe(dataset)  # a bad recipe fails before anything else happens
    folder = mf.datasets_root(settings.data_root) / dataset
    with build_lock(folder, dataset, wait=wait, on_wait=on_wait) as lock_fd:
        clock = time.perf_counter()
        if scan_first:
            from pipeline.lake.scan import scan

            # wait=False: a scan of the lake in progress is a busy lock too (ScanBusyError).
            report.scan = scan(settings.lake_dir, dataset=dataset, store=store, wait=wait).summary()
        report.seconds["scan"] = time.perf_counter() - clock
        clock = time.perf_counter()
        shards = plan(dataset, store=store, max_files=max_files, max_bytes=max_bytes)
        report.seconds["plan"] = time.perf_counter() - clock
        clock = time.perf_counter()
        report.shards = len(shards)
        if on_plan:
            on_plan(shards)
        refs: list[SegmentRef] = []
        if workers <= 1 or len(shards) <= 1:
            for shard in shards:
                refs.append(process(shard, store=store, threads=workers))
                if on_shard:
                    on_shard(refs[-1])
        else:
            # Workers die with this process and close the build lock (pipeline/datasets/pool.py).
            with worker_pool(min(workers, len(shards)), close_fds=(lock_fd,)) as pool:
                for data in pool.map(
                    _process_in_worker, [(s.to_dict(), store.url) for s in shards]
                ):
                    refs.append(SegmentRef.from_dict(data))
                    if on_shard:
                        on_shard(refs[-1])
        report.segments = refs
        report.decoded = sum(r.decoded for r in refs)
        report.invalid = sum(r.invalid for r in refs)
        report.reused_segments = sum(1 for r in refs if r.reused)
        report.seconds["process"] = time.perf_counter() - clock
        clock = time.perf_counter()
        report.version = commit(dataset, refs, store=store)
        report.seconds["commit"] = time.perf_counter() - clock
    return report


def build(
    dataset: str, *, workers: int | None = None, store: MetadataStore | None = None
) -> Version | None:
    """Scan, plan, process and commit locally; the new Version, or None when nothing changed."""
    return run_build(dataset, workers=workers, store=store).version


def delete_processed_for_segments(session: Session, segment_ids: list[str]) -> None:
    """Forget the processed samples stored in segments that gc removes, so a later build
    decodes those files again instead of pointing at missing rows."""
    for i in range(0, len(segment_ids), 500):
        chunk = segment_ids[i : i + 500]
        session.execute(delete(ProcessedSample).where(ProcessedSample.segment_id.in_(chunk)))
        session.execute(delete(Segment).where(Segment.segment_id.in_(chunk)))

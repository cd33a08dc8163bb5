"""process: decode one shard into one content-addressed segment."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from pipeline.datasets.build.lakesource import LakeSource
from pipeline.datasets.build.record import (
    _record_segment,
)
from pipeline.datasets.build.values import (
    SegmentRef,
    Shard,
    ShardFile,
    _recipe,
    _settings,
)
from pipeline.datasets.crash_points import pause_hook
from pipeline.datasets.errors import BuildError
from pipeline.datasets.leases import (
    take_lease,
)
from pipeline.datasets.segments import (
    clean_stale_temps,
    load_written,
    segment_id_for,
    segment_relpath,
    segments_guard,
    segments_root,
    write_segment,
)
from pipeline.metadata.store import MetadataStore, open_store

# ---- process ----------------------------------------------------------------------------------


def process(
    shard: Shard | dict,
    *,
    store: MetadataStore | None = None,
    data_root: Path | None = None,
    lake: Path | str | None = None,
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
    # A folder, or an s3:// URL kept a string (a Path would collapse its scheme).
    lake = lake or settings.lake_dir
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
    images = recipe.modality == "image"  # uint8 (C, H, W) rows: exact integer sums

    def decode(f: ShardFile, abspath: str) -> object:
        try:
            return pre.decode(abspath, recipe)
        except InvalidInput as exc:
            return exc
        except Exception as exc:
            # Not a verdict on the file (a transient I/O error, a decoder bug, no memory):
            # fail the shard, naming the file, rather than mark it invalid for good.
            raise BuildError(
                f"{f.path}: cannot decode ({type(exc).__name__}: {exc}); nothing of its "
                "shard was recorded, rerun the build"
            ) from exc

    def read(f: ShardFile) -> object:
        """The file's decoded samples, its InvalidInput, or None when it changed or went away
        since the scan (left for the next scan, nothing recorded)."""
        if keys is not None:
            abspath = os.path.join(lake_dir, f.path)
            if _unchanged_since_scan(abspath, keys.get(f.path), f.md5):
                return decode(f, abspath)
        # Another key than the scan's (or an S3 lake): the bytes must hash to the md5.
        with source.local_copy(f.path, f.md5) as abspath:
            return None if abspath is None else decode(f, abspath)

    files = sorted(shard.files, key=lambda f: f.md5)
    with ExitStack() as stack:
        # A lake folder, or objects GET into a temporary folder (build/lakesource.py).
        source = stack.enter_context(LakeSource(lake))
        # A local lake: the ledger's stat keys of the shard's paths, one query a shard.
        keys = None if source.s3 else _ledger_keys(store, [f.path for f in files])
        lake_dir = str(lake)
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
                # Images: filled below, in one pass over the stacked rows (_image_stats).
                "stats": _stats(xs[start:]) if n and not images else None,
                "splits": "".join(splits) if splits and len(splits) == n else None,
            }
        )
    dtype = sample_dtype(recipe)
    if xs:
        x = np.stack(xs).astype(dtype, copy=False)
    else:
        x = np.zeros((0, *[max(d, 0) for d in shape]), dtype=dtype)
    y = np.asarray(ys, dtype=np.int32)
    # Images: each row's sum and sum of squares serve the mean and std and the flatness test.
    moments = _image_stats(x, entries) if images else None
    _store_near_dup_hashes(recipe, x, entries, moments)
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


def _ledger_keys(store: MetadataStore, paths: list[str]) -> dict[str, tuple]:
    """``path -> (md5, size, mtime_ns, ctime_ns, inode)`` of the ledger's present rows."""
    from pipeline.metadata.driver import driver_rows

    keys: dict[str, tuple] = {}
    with store.session() as session:
        for i in range(0, len(paths), 500):
            chunk = paths[i : i + 500]
            # By path alone, the deleted ones dropped here: with "deleted_at IS NULL" in the
            # WHERE, SQLite without statistics walks the deleted_at index, every present row
            # of the lake once per 500 paths (a million-file build spent most of its time so).
            rows = driver_rows(
                session,
                "SELECT path, md5, size, mtime_ns, ctime_ns, inode, deleted_at FROM ledger_files "
                f"WHERE path IN ({', '.join('?' * len(chunk))})",
                chunk,
            )
            keys.update((r[0], r[1:6]) for r in rows if r[6] is None)
    return keys


def _unchanged_since_scan(abspath: str, key: tuple | None, md5: str) -> bool:
    """Whether the file still has the stat key the ledger recorded with ``md5``: the scan's own
    rule for not hashing a file again (pipeline/lake/walk.py), so a file it passes is decoded
    without being read twice. ctime is in the key: a rewrite can restore size and mtime, never
    ctime. Any difference (or no row, or another md5 there) answers False: hash the bytes."""
    if key is None or key[0] != md5:
        return False
    try:
        st = os.stat(abspath)
    except OSError:
        return False
    return key[1:] == (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _md5_of(abspath: str) -> str | None:
    from pipeline.lake.hashing import md5_file

    try:
        return md5_file(abspath)
    except OSError:
        return None


# Samples hashed per call: bounds the float copies the hash makes (quality/phash.py);
# measured 36 us a 96x96 sample at 16, 43 at 64, 48 at 512 (its temporaries outgrow the caches).
_HASH_BATCH = 16
_HASH_BATCH_BYTES = 4 << 20  # and no more than this of samples (large images: one at a time)


def _store_near_dup_hashes(
    recipe, x: np.ndarray, entries: list[dict], moments: tuple[np.ndarray, np.ndarray] | None
) -> None:
    """Give each image entry its ``phash``: the perceptual hash of its stored sample (its first
    row), or None when it is unhashable. The commit's near-duplicate step reads them from
    segment.json (quality/neardup.py) instead of hashing every new sample again in one
    process after the decode, so the hashing runs here, in parallel, on rows still in memory."""
    from pipeline.datasets.quality.neardup import kind_of
    from pipeline.datasets.quality.phash import perceptual_hash

    if not entries or kind_of(recipe) != "image":
        return
    rows = np.asarray([e["row"] for e in entries], dtype=np.int64)
    step = max(1, min(_HASH_BATCH, _HASH_BATCH_BYTES // max(1, x[0].nbytes)))
    for i in range(0, len(entries), step):
        batch = rows[i : i + step]
        given = None if moments is None else (moments[0][batch], moments[1][batch])
        hashes, unhashable = perceptual_hash(x[batch], given)
        for e, h, skip in zip(
            entries[i : i + step], hashes.tolist(), unhashable.tolist(), strict=True
        ):
            e["phash"] = None if skip else h


# Rows summed per matrix product in _image_stats: bounds its float64 copy (~1.8 MB at 96 px).
_STATS_BATCH_VALUES = 1 << 18


def _image_stats(x: np.ndarray, entries: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Give each image entry its ``stats`` (what _stats gives for its rows, bit for bit) from
    the stacked uint8 rows (N, C, H, W): per row and channel a sum and a sum of squares, one
    float64 matrix product per batch of rows instead of a float64 copy, a square and two
    reductions per file (~2x faster). The sums are of integers below 2**53, exact in any
    order, which is why the figures are those of _stats. Returns each row's sum and sum of
    squares over all its channels (phash.is_flat's moments)."""
    n, channels = x.shape[0], x.shape[1]
    plane = int(np.prod(x.shape[2:]))
    sums = np.empty((n, channels), dtype=np.float64)
    squares = np.empty((n, channels), dtype=np.float64)
    step = max(1, _STATS_BATCH_VALUES // max(1, channels * plane))
    for i in range(0, n, step):
        part = x[i : i + step].reshape(-1, plane).astype(np.float64)  # (rows x C, H x W)
        sums[i : i + step] = part.sum(axis=1).reshape(-1, channels)
        sq = np.matmul(part[:, None, :], part[:, :, None])
        squares[i : i + step] = sq.reshape(-1, channels)
    for e in entries:
        if e["n_rows"]:
            rows = slice(e["row"], e["row"] + e["n_rows"])
            e["stats"] = {
                "count": e["n_rows"] * plane,
                "sum": sums[rows].sum(axis=0).tolist(),
                "sumsq": squares[rows].sum(axis=0).tolist(),
            }
    return sums.sum(axis=1), squares.sum(axis=1)


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

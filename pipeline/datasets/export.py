"""Export a version as a self-contained folder that plain numpy or zarr can read.

``DEST/``: ``x.npy`` + ``y.npy`` (format npy) or ``data.zarr/{x,y}`` (format zarr), in the
version's sample order; ``split.npy`` (int8, 1 = val); ``metadata.jsonl`` (one line per sample,
``index`` = the row in x/y, plus the source path, md5, label, split...); ``export.json`` (the
version's manifest, the classes, and this layout). Nothing in it needs laketrain to be read.

The folder is written under a temp name next to DEST and renamed into place at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.datasets import manifest as mf
from pipeline.datasets.reader import VersionReader, open_version

EXPORT_FORMATS = ("npy", "zarr")
_BATCH = 2048


def open_ref(
    ref: str,
    *,
    dataset: str | None = None,
    data_root: Path | str | None = None,
    store: Any | None = None,
) -> VersionReader:
    """Open a version by id / prefix / tag (``latest`` needs ``dataset``), from the store when
    there is one, else by looking through every dataset's folder on disk (or, on an
    ``s3://`` DATA_ROOT, every dataset prefix with a published manifest)."""
    from pipeline.settings import get_settings
    from pipeline.storage.urls import is_s3

    data_root = data_root or get_settings().data_root
    if not is_s3(data_root):
        data_root = Path(data_root)
    if dataset is not None:
        return open_version(dataset, ref, data_root=data_root, store=store)
    if store is None and os.environ.get("METADATA_DB_URL"):
        from pipeline.metadata.store import open_store

        store = open_store()
    if store is not None:
        from pipeline.datasets.queries import resolve_version

        row = resolve_version(ref, store=store)
        return open_version(row["dataset"], row["version_id"], data_root=data_root, store=store)
    if is_s3(data_root):
        from pipeline.datasets.remote_files import datasets

        names = datasets(str(data_root))
    else:
        root = mf.datasets_root(data_root)
        names = [
            p.name
            for p in (sorted(root.iterdir()) if root.is_dir() else [])
            if p.is_dir() and not p.name.startswith(".")
        ]
    found: list[VersionReader] = []
    for name in names:
        try:
            found.append(open_version(name, ref, data_root=data_root))
        except (mf.VersionNotFound, mf.ManifestError):
            continue
    if len(found) != 1:
        raise mf.VersionNotFound(
            f"no version matches {ref!r}"
            if not found
            else f"{ref!r} matches versions of several datasets; name the dataset"
        )
    return found[0]


def export_version(reader: VersionReader, dest: Path | str, *, fmt: str = "npy") -> dict[str, Any]:
    """Write ``reader``'s samples to ``dest`` (which must not exist); return a summary."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"--format must be one of {', '.join(EXPORT_FORMATS)}; got {fmt!r}")
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"export destination {dest} already exists; choose a new folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp-{secrets.token_hex(4)}"
    tmp.mkdir()
    n = len(reader)
    shape = tuple(reader.sample_shape)
    dtype = np.dtype(reader.manifest["sample_dtype"])
    try:
        if fmt == "npy":
            x_out = np.lib.format.open_memmap(
                tmp / "x.npy", mode="w+", dtype=dtype, shape=(n, *shape)
            )
            y_out = np.lib.format.open_memmap(tmp / "y.npy", mode="w+", dtype=np.int64, shape=(n,))
        else:
            import zarr

            group = zarr.open_group(str(tmp / "data.zarr"), mode="w")
            rows = max(1, min(64, n))
            x_out = group.create_array("x", shape=(n, *shape), chunks=(rows, *shape), dtype=dtype)
            y_out = group.create_array("y", shape=(n,), chunks=(max(1, n),), dtype=np.int64)
            group.attrs["classes"] = reader.classes
        for start in range(0, n, _BATCH):
            stop = min(n, start + _BATCH)
            x, y = reader.get_batch(np.arange(start, stop))
            x_out[start:stop] = x
            y_out[start:stop] = y
        if fmt == "npy":
            x_out.flush()
            y_out.flush()
            del x_out, y_out
        split = np.zeros(n, dtype=np.int8)
        with open(tmp / "metadata.jsonl", "w") as fh:
            for i in range(n):
                rec = reader.metadata(i)
                rec["source_index"] = rec["index"]
                rec["index"] = i
                split[i] = rec["split"] == "val"
                fh.write(json.dumps(rec, sort_keys=True) + "\n")
        np.save(tmp / "split.npy", split)
        layout = (
            {"x": "x.npy", "y": "y.npy"}
            if fmt == "npy"
            else {"x": "data.zarr/x", "y": "data.zarr/y"}
        )
        summary = {
            "dataset": reader.dataset,
            "version_id": reader.version_id,
            "tag": reader.tag,
            "format": fmt,
            "samples": n,
            "classes": reader.classes,
            "mean": reader.mean,
            "std": reader.std,
            "layout": {**layout, "split": "split.npy", "metadata": "metadata.jsonl"},
            "y": "index into classes (-1 = no label)",
        }
        with open(tmp / "export.json", "w") as fh:
            json.dump({**summary, "manifest": reader.manifest}, fh, indent=2, sort_keys=True)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {**summary, "dest": str(dest)}

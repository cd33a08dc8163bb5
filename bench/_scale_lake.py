"""bench/scale.py's lake (tiny ``.npy`` files in class folders, appended to or interleaved) and
what it measures of DATA_ROOT and the store."""

from __future__ import annotations

import os
import time
from pathlib import Path

CLASSES = 10
SHAPE = 4  # float32 values per sample: 16 bytes of data, a 144-byte .npy file


def _npy_header() -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.zeros(SHAPE, dtype=np.float32), allow_pickle=False)
    return buf.getvalue()[: -4 * SHAPE]


def make_files(lake: Path, start: int, count: int) -> None:
    """Files start..start+count-1, spread over every class folder (the harder of the two common
    drops: a new file lands in every folder's last leaf), back-dated so they are settled."""
    import numpy as np

    header = _npy_header()
    old = time.time() - 3600
    made: set[Path] = set()
    for i in range(start, start + count):
        folder = lake / "scale" / f"c{i % CLASSES}"
        if folder not in made:
            folder.mkdir(parents=True, exist_ok=True)
            made.add(folder)
        path = folder / f"f{i:08d}.npy"
        with open(path, "wb") as fh:
            fh.write(header + np.full(SHAPE, i, dtype=np.float32).tobytes())
        os.utime(path, (old, old))


def make_interleaved(lake: Path, samples: int, count: int, round_: int) -> None:
    """``count`` new files at random places among the first ``samples`` files: each is named
    after an existing file and sorts right after it (``f00000123.npy`` < ``f00000123r0.npy`` <
    ``f00000124.npy``), in that file's class folder. Their contents are new (negative values)."""
    import random

    import numpy as np

    header = _npy_header()
    old = time.time() - 3600
    for j in sorted(random.Random(round_).sample(range(samples), count)):
        path = lake / "scale" / f"c{j % CLASSES}" / f"f{j:08d}r{round_}.npy"
        value = -(round_ * samples + j) - 1
        path.write_bytes(header + np.full(SHAPE, value, dtype=np.float32).tobytes())
        os.utime(path, (old, old))


def _one_value(work: Path, sql: str, params: tuple = ()) -> int:
    import sqlite3

    conn = sqlite3.connect(work / "data" / "metadata.db")
    try:
        return conn.execute(sql, params).fetchone()[0]
    finally:
        conn.close()


def stored_leaves(work: Path) -> int:
    """Leaves the store holds (each written once, by the first version that had it)."""
    return _one_value(work, "SELECT COUNT(*) FROM chunks WHERE kind = 'leaf'")


def version_leaves(work: Path, version_id: str) -> int:
    return _one_value(
        work, "SELECT COUNT(*) FROM version_chunks WHERE version_id = ?", (version_id,)
    )


def tree_bytes(root: Path, *, skip: str | None = None) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        if skip is not None and skip in dirnames and Path(dirpath) == root:
            dirnames.remove(skip)
        for f in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except FileNotFoundError:
                pass
    return total


def data_bytes(work: Path) -> tuple[int, int]:
    """(bytes under DATA_ROOT outside segments/ and the store, bytes of the SQLite store)."""
    import sqlite3

    data = work / "data"
    # The WAL holds the last transactions' pages until a checkpoint: count the store's pages.
    conn = sqlite3.connect(data / "metadata.db")
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    store = sum(p.stat().st_size for p in data.glob("metadata.db*") if p.is_file())
    return tree_bytes(data, skip="segments") - store, store

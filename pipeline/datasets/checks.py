"""Checks run on a version before training."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np


def check_leakage(reader: Any) -> list[str]:
    """The md5s found in both the train and the val split (sorted); empty means no leakage.
    Splits are decided by content, so a non-empty answer means a corrupt or hand-made version.
    A table's rows have a split each, so one file is in both splits: for a table the check is
    on the rows, the val rows whose features equal a train row's (``path line N``)."""
    if getattr(reader, "modality", None) == "table":
        return _table_leakage(reader)
    base = reader
    train = set(np.asarray(base.split("train").md5s()).tolist())
    val = set(np.asarray(base.split("val").md5s()).tolist())
    return sorted(train & val)


def _row_digests(reader: Any, chunk: int = 65536) -> list[bytes]:
    out: list[bytes] = []
    for start in range(0, len(reader), chunk):
        x, _ = reader.get_batch(np.arange(start, min(start + chunk, len(reader))))
        x = np.ascontiguousarray(x)
        out.extend(hashlib.sha256(row.tobytes()).digest() for row in x)
    return out


def _table_leakage(reader: Any) -> list[str]:
    train = set(_row_digests(reader.split("train")))
    val = reader.split("val")
    found = []
    for i, digest in enumerate(_row_digests(val)):
        if digest in train:
            meta = val.metadata(i)
            found.append(f"{meta.get('path')} line {meta.get('line')}")
    return sorted(found)

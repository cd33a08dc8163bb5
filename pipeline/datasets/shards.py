"""How ``plan`` cuts a dataset's new files into shards: by files, source bytes and decoded bytes.

One shard is one ``process`` call, which holds every decoded sample of the shard in memory
(and, while it stacks them into the segment, about twice that). Files and source bytes alone
do not bound that: a recipe with ``image.size = 4096`` and 8 augmented copies turns each
small JPEG into 9 x 48 MiB, so 512 files a shard would need some 200 GB. The decoded size of
a sample is known from the recipe, so a shard also closes before its estimated decoded bytes
pass SHARD_DECODED_MB; a single file above that bound gets a shard of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

# Decoded bytes per source byte of a table, a rough upper bound: a CSV needs at least two
# characters per value ("1,") where the sample holds a 4-byte float32; a Parquet file is
# compressed, typically 4-10x.
_CSV_FACTOR = 2
_PARQUET_FACTOR = 8


def decoded_bytes(recipe: Any, path: str, size: int) -> int:
    """Estimated bytes of the samples one file decodes to under ``recipe`` (every row the
    segment stores for it: an image's original and its augmented copies)."""
    if recipe.modality == "image":
        spec = recipe.image
        return spec.channels * spec.size * spec.size * (recipe.augment.copies + 1)
    if recipe.modality == "array":
        spec = recipe.array
        return math.prod(spec.shape) * np.dtype(spec.dtype).itemsize
    factor = _PARQUET_FACTOR if path.lower().endswith(".parquet") else _CSV_FACTOR
    return max(1, int(size)) * factor


F = TypeVar("F")


def pack(
    files: Iterable[F],
    *,
    max_files: int,
    max_bytes: int,
    max_decoded: int,
    size_of: Any,
    decoded_of: Any,
) -> list[list[F]]:
    """Consecutive groups of ``files`` (order kept) within all three bounds; a file that alone
    exceeds a bound is a group of its own."""
    groups: list[list[F]] = []
    batch: list[F] = []
    batch_bytes = batch_decoded = 0
    for f in files:
        size, decoded = size_of(f), decoded_of(f)
        if batch and (
            len(batch) >= max_files
            or batch_bytes + size > max_bytes
            or batch_decoded + decoded > max_decoded
        ):
            groups.append(batch)
            batch, batch_bytes, batch_decoded = [], 0, 0
        batch.append(f)
        batch_bytes += size
        batch_decoded += decoded
    if batch:
        groups.append(batch)
    return groups


def shard_decoded_bytes(recipe: Any, files: Sequence[Any]) -> int:
    """Estimated decoded bytes of a shard's files (``ShardFile``s)."""
    return sum(decoded_bytes(recipe, f.path, f.size) for f in files)

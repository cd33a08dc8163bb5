"""process gives each image file its per-channel count / sum / sum of squares (the commit's
mean and std come from them) in one pass over the stacked rows: the figures must be those of
the per-file formula, bit for bit, whatever the rows per file (augmented copies) and sizes."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.datasets.build.processing import _image_stats, _stats


@pytest.mark.parametrize("shape", [(3, 96, 96), (1, 28, 28), (3, 224, 224), (3, 5, 7)])
def test_image_stats_are_the_per_file_stats_bit_for_bit(shape, monkeypatch):
    import pipeline.datasets.build.processing as processing

    # Small batches, so that files straddle the matrix products' batches.
    monkeypatch.setattr(processing, "_STATS_BATCH_VALUES", int(np.prod(shape)) * 3)
    rng = np.random.default_rng(len(shape) + shape[-1])
    rows_per_file = [1, 3, 0, 2, 1, 1, 4, 1]
    x = rng.integers(0, 256, (sum(rows_per_file), *shape), dtype=np.uint8)
    x[:2] = 255  # the largest squares
    entries, start = [], 0
    for n in rows_per_file:
        entries.append({"row": start, "n_rows": n, "stats": None})
        start += n
    sums, squares = _image_stats(x, entries)
    values = x.reshape(len(x), -1).astype(np.int64)  # each row's moments, for its flatness
    assert sums.tolist() == values.sum(axis=1).tolist()
    assert squares.tolist() == (values**2).sum(axis=1).tolist()
    for e in entries:
        want = _stats(list(x[e["row"] : e["row"] + e["n_rows"]])) if e["n_rows"] else None
        assert e["stats"] == want

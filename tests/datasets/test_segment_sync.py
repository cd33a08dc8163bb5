"""A segment's files are all synced, in one batch, before the rename that publishes its
folder: npy and zarr alike."""

from __future__ import annotations

import os

import numpy as np
import pytest


@pytest.mark.parametrize("fmt", ["npy", "zarr"])
def test_every_file_of_a_segment_is_synced_before_its_folder_is_published(
    tmp_path, monkeypatch, fmt
) -> None:
    from pipeline.datasets import segments

    final = segments.segments_root(tmp_path, "rh") / "seg1"
    synced: list[str] = []
    real = segments.sync_all

    def spy(fds):
        names = [os.readlink(f"/proc/self/fd/{fd}") for fd in fds]
        assert not final.exists()  # not published before its files are durable
        synced.extend(names)
        real(fds)

    monkeypatch.setattr(segments, "sync_all", spy)
    x = np.arange(2 * 3 * 4 * 4, dtype=np.uint8).reshape(2, 3, 4, 4)
    written = segments.write_segment(
        tmp_path, recipe_hash="rh", segment_id="seg1", fmt=fmt, x=x, y=np.array([0, 1]), info={}
    )
    assert written.path == final
    files = {str(p.relative_to(written.path)) for p in written.path.rglob("*") if p.is_file()}
    # Synced under the temp folder's name (.tmp-...): the path inside it is the published one.
    inside = [n.split("/.tmp-", 1)[1].split("/", 1)[1] for n in synced]
    assert files and sorted(inside) == sorted(files)  # each file once, in one batch

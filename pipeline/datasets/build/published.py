"""``process`` for any DATA_ROOT: the segment is written locally, then published to an
``s3://`` data root by the task that wrote it.

Why the process task uploads its own segment, and not the commit: mapped ``process`` tasks
may run on other workers than ``commit``, and only the writer's machine has the segment's
files (in its work root, ``pipeline/datasets/dataroot.py``). A segment found on S3 before
decoding is pulled instead of decoded again (a rerun on a worker that did not write it).
With a local DATA_ROOT this is ``processing.process`` itself.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.datasets import dataroot
from pipeline.datasets.build.processing import process as process_locally
from pipeline.datasets.build.values import SegmentRef, Shard
from pipeline.datasets.segments import segment_relpath
from pipeline.metadata.store import MetadataStore


def process(
    shard: Shard | dict,
    *,
    store: MetadataStore | None = None,
    data_root: Path | str | None = None,
    lake: Path | None = None,
    threads: int = 1,
) -> SegmentRef:
    """Decode one shard into one segment and record it (``processing.process``); with an
    ``s3://`` data root, in its work root, then upload it (data first, ``segment.json``
    last) before returning, so the commit, wherever it runs, finds it on S3."""
    if isinstance(shard, dict):
        shard = Shard.from_dict(shard)
    local, remote = dataroot.resolve(data_root)
    if remote is not None:
        from pipeline.datasets.pull import pull_segment

        # Published by an earlier attempt elsewhere: reuse it rather than decode again.
        pull_segment(remote, local, segment_relpath(shard.recipe_hash, shard.segment_id))
    ref = process_locally(shard, store=store, data_root=local, lake=lake, threads=threads)
    if remote is not None:
        from pipeline.datasets.publish import publish_segment

        publish_segment(local, remote, ref.path)
    return ref

"""Build a dataset version in three steps: plan → process (per shard) → commit.

- ``plan`` (planning.py) reads the LEDGER (every current file of the dataset), not a scan's
  change set, so a missed or collapsed trigger event can never lose a file; it returns shards of
  the md5s that have no processed sample under the current recipe yet.
- ``process`` (processing.py, record.py) decodes one shard into one content-addressed segment
  and records the processed samples; rerunning the same shard reuses the segment it finds.
- ``commit`` (committing.py) assembles the version from the store alone (assemble.py; no
  decoding, no segment reads), and publishes it atomically through the version writer
  (writer.py), under the dataset's lock, unless the lake content is unchanged.

The three steps are plain functions over JSON-safe values (values.py) so the ingest DAG can map
``process`` over shards on any worker; ``build`` / ``run_build`` (local.py) run them locally
with a process pool. Submodule names are not the step names on purpose: a submodule imported
late would otherwise replace the function of the same name on this package.
"""

from pipeline.datasets.build.assemble import path_diff
from pipeline.datasets.build.committing import commit
from pipeline.datasets.build.local import build, run_build
from pipeline.datasets.build.planning import plan
from pipeline.datasets.build.published import process
from pipeline.datasets.build.record import delete_processed_for_segments
from pipeline.datasets.build.values import (
    BuildReport,
    SegmentRef,
    Shard,
    ShardFile,
    Version,
    _Sample,
)
from pipeline.datasets.build.writer import _metadata_line
from pipeline.datasets.errors import BuildError

__all__ = [
    "BuildError",
    "BuildReport",
    "SegmentRef",
    "Shard",
    "ShardFile",
    "Version",
    "_Sample",
    "_metadata_line",
    "build",
    "commit",
    "delete_processed_for_segments",
    "path_diff",
    "plan",
    "process",
    "run_build",
]

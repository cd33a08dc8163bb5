"""laketrain's public API for training code: what a trainer of your own needs to honour the
environment contract, with the same data access, checkpoints, exact resume and run records as
the built-in trainer (which uses exactly these objects). Needs the ``training`` extra (torch),
never Airflow. Reference: docs/training-api.md.

    from training import api

    version = api.open_version()                      # DATASET_NAME, DATASET_VERSION, DATA_ROOT
    train = api.VersionDataset(version.split("train"), batch_size=64, seed=0)
    ckpt = api.checkpoints()                          # CHECKPOINT_URL/RUN_ID
    report = api.RunReport.from_env(ckpt)             # metrics.jsonl, result.json, the store
    stop = api.Preemption().install()                 # SIGTERM -> stop.requested

The names below are stable: `open_version`, `VersionDataset`, `CheckpointManager`,
`checkpoints`, `Preemption`, `RunReport`, `init_distributed`, `DistInfo`, `ContractError` and
the exit codes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from training.checkpoint import CheckpointManager
from training.data import VersionDataset
from training.distributed import DistInfo, init_distributed
from training.exit_codes import EXIT_CONFIG, EXIT_DATA, EXIT_FAILED, EXIT_OK, EXIT_PREEMPTED
from training.preemption import Preemption
from training.recorder import RunReport

__all__ = [
    "EXIT_CONFIG",
    "EXIT_DATA",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_PREEMPTED",
    "CheckpointManager",
    "ContractError",
    "DistInfo",
    "Preemption",
    "RunReport",
    "VersionDataset",
    "checkpoints",
    "init_distributed",
    "open_version",
]


class ContractError(ValueError):
    """A variable of the environment contract is missing or malformed (exit 2)."""


def _env(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise ContractError(f"{name} is not set: the launcher sets it (docs/training-api.md)")
    return value


def open_version(
    name: str | None = None,
    version: str | None = None,
    *,
    data_root: str | Path | None = None,
) -> Any:
    """The dataset version to train on, as a `VersionReader` (``len``, ``split("train")``,
    ``get_batch``, ``classes``, ``mean``/``std``, ``version_id``...). With no arguments:
    ``DATASET_NAME``, ``DATASET_VERSION`` (an id, a unique prefix, a tag or ``latest``;
    default latest) and ``DATA_ROOT``; with ``METADATA_DB_URL`` set the version is resolved
    through the store, else from the manifests under DATA_ROOT. A version that does not exist
    raises ``LookupError`` (exit 3 by the contract)."""
    from pipeline.datasets.reader import open_version as _open

    name = name or _env("DATASET_NAME")
    version = version or os.environ.get("DATASET_VERSION") or "latest"
    data_root = data_root or os.environ.get("DATA_ROOT") or None
    return _open(name, version, data_root=data_root)


def checkpoints(
    base_url: str | None = None,
    run_id: str | None = None,
    *,
    keep_last: int = 2,
    rank: int | None = None,
    local_dir: Path | None = None,
) -> CheckpointManager:
    """The run's `CheckpointManager` under ``CHECKPOINT_URL/<RUN_ID>`` (``file://`` or
    ``s3://``, boto3's own AWS_* variables). ``rank`` defaults to the DDP rank (only rank 0
    writes; every rank can load). Use the same RUN_ID on a retry and ``load_latest()`` finds
    the run's newest valid checkpoint."""
    base_url = (base_url or _env("CHECKPOINT_URL")).rstrip("/")
    run_id = run_id or _env("RUN_ID")
    if rank is None:
        from training.data import _rank_and_world

        rank = _rank_and_world()[0]
    return CheckpointManager(base_url, run_id, keep_last=keep_last, rank=rank, local_dir=local_dir)

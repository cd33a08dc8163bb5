"""What the DAG files need at parse time, computed cheaply: settings and the recipes folder.

Nothing here touches a database, a connection or the network: the dag-processor parses the
DAG files every few seconds and must never block on (or fail because of) a service.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def lake_dir() -> str:
    from pipeline.settings import get_settings

    return str(get_settings().lake_dir)


def settle_seconds() -> float:
    from pipeline.settings import get_settings

    return get_settings().settle_seconds


def poll_seconds() -> float:
    """Seconds between two looks of the lake watcher: ``LAKETRAIN_POLL_SECONDS``, else 30 for
    an ``s3://`` lake (each poll is a listing, billed per request) and 1 for a folder. A bad
    value raises SettingsError naming the variable."""
    from pipeline.settings import get_settings

    return get_settings().poll_seconds


def default_launcher() -> str:
    """The train form's default launcher (``LAKETRAIN_DEFAULT_LAUNCHER``, default ``local``).
    The compose stack sets ``docker``: its Airflow image carries no torch, so a local trainer
    process cannot run there."""
    from pipeline.orchestration.env_contract import LAUNCHERS

    value = os.environ.get("LAKETRAIN_DEFAULT_LAUNCHER", "local")
    if value not in LAUNCHERS:
        raise ValueError(
            f"LAKETRAIN_DEFAULT_LAUNCHER={value!r}: must be one of {', '.join(LAUNCHERS)}"
        )
    return value


def trainer_image() -> str:
    """The train form's default image: ``LAKETRAIN_TRAINER_IMAGE`` (the built-in trainer's)."""
    from pipeline.orchestration.launchers import LauncherConfig

    return LauncherConfig.from_env().trainer_image


def recipe_names() -> list[str]:
    """Datasets with a recipe file (the train form's dataset choices)."""
    from pipeline.datasets.recipes import list_recipes

    return list_recipes()


def trainable_datasets() -> tuple[list[str], dict[str, str]]:
    """(datasets the train form offers, {dataset left out: why}). Judged from each recipe and
    the top level of its lake folder (one scandir): an unlabelled dataset (``rule = "none"``,
    or images directly in its folder) or a recipe that does not load would only fail later,
    in the trainer or at resolve."""
    from pipeline.orchestration.refusals import untrainable_reason

    offered, left_out = [], {}
    for name in recipe_names():
        reason = untrainable_reason(name)
        if reason is None:
            offered.append(name)
        else:
            left_out[name] = reason
    return offered, left_out


def auto_train_datasets() -> list[str]:
    """Datasets whose recipe sets ``auto_train``. A broken recipe is left out (and logged):
    it must not stop the train DAG from loading; the ingest reports it by name."""
    from pipeline.datasets.recipes import load_recipe

    out = []
    for name in recipe_names():
        try:
            if load_recipe(name).auto_train:
                out.append(name)
        except ValueError as exc:
            log.warning("recipe %s not readable, not auto-training on it: %s", name, exc)
    return out


def max_active_training_runs() -> int:
    """Training runs at once (``LAKETRAIN_MAX_ACTIVE_TRAINING``, default 1: one GPU box)."""
    return max(1, int(os.environ.get("LAKETRAIN_MAX_ACTIVE_TRAINING", "1")))


def sqs_watch() -> tuple[str, str] | None:
    """(queue URL, s3://bucket/prefix) when the lake is watched through S3 notifications in
    SQS (``LAKETRAIN_LAKE_SQS_QUEUE_URL`` and ``LAKETRAIN_LAKE_S3_PREFIX``), else None."""
    queue = os.environ.get("LAKETRAIN_LAKE_SQS_QUEUE_URL", "").strip()
    if not queue:
        return None
    prefix = os.environ.get("LAKETRAIN_LAKE_S3_PREFIX", "").strip()
    if not prefix.startswith("s3://"):
        raise ValueError(
            f"LAKETRAIN_LAKE_S3_PREFIX={prefix!r}: must be s3://bucket/prefix when "
            "LAKETRAIN_LAKE_SQS_QUEUE_URL is set"
        )
    return queue, prefix

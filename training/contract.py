"""The trainer's inputs at the deployment edge: ``TRAIN_<FIELD>`` variables and ``--<field>``
flags (flags win) into a `TrainConfig`, and the `RunTarget` (which dataset, where to write)
from ``DATASET_NAME``, ``DATASET_VERSION``, ``DATA_ROOT``, ``METADATA_DB_URL``,
``CHECKPOINT_URL`` and ``RUN_ID``. A bad value raises `ConfigError` naming the variable or flag
the user typed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from training.config import (
    ENV_PREFIX,
    SECTIONS,
    ConfigError,
    TrainConfig,
    build_config,
    field_index,
)


@dataclass(frozen=True)
class RunTarget:
    """The deployment edge: which data, and where the run writes."""

    dataset: str
    version: str
    data_root: str | None
    metadata_db_url: str | None
    checkpoint_url: str
    run_id: str


def env_values(environ: Mapping[str, str]) -> dict[str, str]:
    """The TRAIN_<FIELD> variables of an environment, by field name. Unknown TRAIN_ names fail,
    since a typo (TRAIN_EPOCH=5) that silently trains with the default wastes a GPU day."""
    index = field_index()
    found: dict[str, str] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX) :].lower()
        if name.startswith("test_"):
            continue  # TRAIN_TEST_* are test hooks, read by the loop itself
        if name not in index:
            raise ConfigError(f"{key}: unknown training-config field {name!r}")
        found[name] = value
    return found


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training",
        description="Train on one dataset version. Every flag can also be set as an environment "
        "variable (TRAIN_<FIELD>, or the deployment variables named below); flags win.",
    )
    edge = p.add_argument_group("what and where (environment contract)")
    edge.add_argument("--dataset", help="DATASET_NAME")
    edge.add_argument(
        "--version", help="DATASET_VERSION: id, id prefix, tag or latest (default latest)"
    )
    edge.add_argument("--data-root", help="DATA_ROOT")
    edge.add_argument("--metadata-db-url", help="METADATA_DB_URL (optional: record the run)")
    edge.add_argument(
        "--checkpoint-url",
        help="CHECKPOINT_URL: file:///... or s3://bucket/prefix (the run writes to <url>/<run_id>/)",
    )
    edge.add_argument("--run-id", help="RUN_ID: stable across retries, so a retry resumes")
    edge.add_argument(
        "--print-config", action="store_true", help="Print the resolved config as JSON and exit."
    )
    for sec, klass in SECTIONS.items():
        group = p.add_argument_group(f"{sec} (TRAIN_<FIELD>)")
        for f in dataclasses.fields(klass):
            meta = f.metadata
            extra = f" [{'|'.join(meta['choices'])}]" if meta.get("choices") else ""
            flag_kw = {"nargs": "?", "const": "true"} if isinstance(f.default, bool) else {}
            group.add_argument(
                f"--{f.name.replace('_', '-')}",
                dest=f.name,
                default=None,
                metavar="V",
                **flag_kw,
                # argparse %-formats help strings: escape the %s of "10 %" and the like.
                help=f"{meta['help']}{extra} (default {f.default!r}; env {ENV_PREFIX}{f.name.upper()})".replace(
                    "%", "%%"
                ),
            )
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    return _parser().parse_args(list(argv) if argv is not None else None)


def _check_dataset(dataset: str) -> None:
    """The rule load_recipe applies: one lake folder name, so ``../../x`` cannot reach data
    outside DATA_ROOT."""
    from pipeline.datasets.recipes import DatasetNameError, check_dataset_name

    try:
        check_dataset_name(dataset)
    except DatasetNameError as exc:
        raise ConfigError(f"DATASET_NAME / --dataset: {exc}") from None


def _check_checkpoint_url(url: str) -> None:
    """A usable base URL, checked now rather than as a traceback at the first upload; the URL
    is shown with its credentials masked."""
    from pipeline.redact import redact_url

    label = "CHECKPOINT_URL / --checkpoint-url"
    shown = redact_url(url)
    if not url.startswith(("file://", "s3://")):
        raise ConfigError(f"{label}: must start with file:// or s3:// (got {shown!r})")
    if shown != url:
        raise ConfigError(
            f"{label}: must not embed credentials (got {shown!r}); set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY instead"
        )
    from pipeline.storage import store_for

    try:
        store_for(url)
    except ValueError as exc:
        raise ConfigError(f"{label}: {redact_url(str(exc))}") from None


_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+:-]{0,199}$")


def resolve(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[TrainConfig, RunTarget, argparse.Namespace]:
    """Config and target from the environment, overridden by CLI flags; ConfigError on bad input."""
    env = dict(os.environ if environ is None else environ)
    ns = parse_args(argv)
    values: dict[str, Any] = dict(env_values(env))
    sources = dict.fromkeys(values, "env")
    for name in field_index():
        cli = getattr(ns, name)
        if cli is not None:
            values[name] = cli
            sources[name] = "cli"
    cfg = build_config(values, sources=sources)

    dataset = ns.dataset or env.get("DATASET_NAME", "")
    if not dataset:
        raise ConfigError("DATASET_NAME / --dataset: required (the dataset to train on)")
    _check_dataset(dataset)
    version = ns.version or env.get("DATASET_VERSION") or "latest"
    checkpoint_url = (ns.checkpoint_url or env.get("CHECKPOINT_URL") or "").rstrip("/")
    if not checkpoint_url:
        from pipeline.settings import SettingsError, load_settings

        try:
            checkpoint_url = load_settings().checkpoint_url
        except SettingsError as exc:
            raise ConfigError(str(exc)) from None
    _check_checkpoint_url(checkpoint_url)
    run_id = ns.run_id or env.get("RUN_ID", "")
    if not run_id:
        raise ConfigError(
            "RUN_ID / --run-id: required (stable across retries, so that a retry resumes)"
        )
    if not _RUN_ID_RE.match(run_id):
        raise ConfigError(
            f"RUN_ID / --run-id: letters, digits and ._=+:- only, at most 200 characters (got {run_id!r})"
        )
    target = RunTarget(
        dataset=dataset,
        version=version,
        data_root=ns.data_root or env.get("DATA_ROOT") or None,
        metadata_db_url=ns.metadata_db_url or env.get("METADATA_DB_URL") or None,
        checkpoint_url=checkpoint_url,
        run_id=run_id,
    )
    return cfg, target, ns

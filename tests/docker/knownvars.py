"""Which environment variables something actually reads, derived from the code itself, so a
variable the compose file sets that nothing reads (a typo, a renamed setting) is caught."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path

import yaml

from tests.docker.helpers import REPO

# Read by the entrypoints of third-party images, which are not here to scan: the official
# Airflow image (dumb-init's process-group mode for Celery's warm shutdown), PostgreSQL and MinIO.
IMAGE_ENTRYPOINT_VARS = {
    "airflow": {"DUMB_INIT_SETSID"},
    "postgres": {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"},
    "minio": {"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"},
}


def settings_vars() -> set[str]:
    from pipeline.settings import Settings

    return {name.upper() for name in Settings.model_fields}


@lru_cache(maxsize=1)
def code_laketrain_vars() -> frozenset[str]:
    """Every LAKETRAIN_* name that appears in the project's code (pipeline/, training/, dags/)."""
    names: set[str] = set()
    for folder in ("pipeline", "training", "dags"):
        for path in (REPO / folder).rglob("*.py"):
            names.update(
                re.findall(r"\bLAKETRAIN_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace"))
            )
    return frozenset(names)


@lru_cache(maxsize=1)
def boto_vars() -> frozenset[str]:
    """The AWS_* variables botocore reads (its config provider and credential providers)."""
    import botocore

    root = Path(botocore.__file__).parent
    names: set[str] = set()
    for name in ("configprovider.py", "credentials.py", "session.py"):
        names.update(re.findall(r"['\"](AWS_[A-Z0-9_]+)['\"]", (root / name).read_text()))
    return frozenset(names)


@lru_cache(maxsize=1)
def airflow_options() -> frozenset[tuple[str, str]]:
    """(section, option) of Airflow's own config and of every installed provider's."""
    import airflow

    core = yaml.safe_load(
        (Path(airflow.__file__).parent / "config_templates" / "config.yml").read_text()
    )
    sections = dict(core)
    for ep in entry_points(group="apache_airflow_provider"):
        info = ep.load()()
        sections.update(info.get("config") or {})
    return frozenset(
        (section.lower(), option.lower())
        for section, body in sections.items()
        for option in (body.get("options") or {})
    )


def airflow_option_of(var: str) -> tuple[str, str] | None:
    m = re.fullmatch(r"AIRFLOW__([A-Z0-9_.]+?)__([A-Z0-9_]+)", var)
    return (m.group(1).lower(), m.group(2).lower()) if m else None


def trainer_train_vars() -> set[str]:
    from training.config import ENV_PREFIX, field_index

    return {ENV_PREFIX + name.upper() for name in field_index()}


def shell_vars(text: str) -> set[str]:
    """Variables a shell script or command line reads: $NAME and ${NAME...}."""
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text)) | set(
        re.findall(r"os\.environ\[['\"]([A-Za-z_][A-Za-z0-9_]*)['\"]\]", text)
    )

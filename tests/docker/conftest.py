"""Fixtures: a `.env` written by the real `docker/init_env.py`, and the compose file read with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.docker.helpers import DOCKER_DIR, load_compose, read_env_file


@pytest.fixture(scope="session")
def env_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `.env` as `docker/init_env.py` writes it, and the host folders it made."""
    root = tmp_path_factory.mktemp("compose-env")
    subprocess.run(
        [
            sys.executable,
            str(DOCKER_DIR / "init_env.py"),
            "--output",
            str(root / ".env"),
            "--data-root",
            str(root / "host-data"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return root


@pytest.fixture(scope="session")
def dotenv(env_dir: Path) -> dict[str, str]:
    return read_env_file(env_dir / ".env")


@pytest.fixture(scope="session")
def compose(dotenv: dict[str, str]) -> dict[str, Any]:
    """docker-compose.yml with anchors merged and the generated `.env` interpolated."""
    return load_compose(dotenv)


@pytest.fixture(scope="session")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
)
LONG_RUNNING_AIRFLOW = AIRFLOW_SERVICES[1:]

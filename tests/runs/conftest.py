"""A lake with two versions of a small digits dataset, a metadata store on each backend, and
``laketrain`` run through its entry point with that environment (real subprocesses, real
training runs on CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PG_ADMIN_URL, _libpq, _pg_available
from tests.orchestration.test_dag_runs import write_digits_subset

REPO = Path(__file__).resolve().parents[2]
LAKETRAIN = str(Path(sys.executable).with_name("laketrain"))
# One thread: the same float summation order in every run, and fair to the shared cores.
TRAIN_FLAGS = ("--epochs", "2", "--batch-size", "16", "--model", "mlp", "--gpus", "0")
TRAIN_FLAGS += ("--env", "OMP_NUM_THREADS=1")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def runs_home(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Two versions of digits (v1: 6 files a class, v2: 8), on the backend of the param."""
    root = tmp_path_factory.mktemp(f"runs_{request.param}")
    pg_name = None
    if request.param == "sqlite":
        url = f"sqlite:///{root / 'metadata.db'}"
    else:
        if not _pg_available():
            pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
        import psycopg

        pg_name = f"lt_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(_libpq(PG_ADMIN_URL), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{pg_name}"')
        url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{pg_name}"
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "AWS_", "TRAIN_", "DATASET_", "RUN_ID", "MLFLOW"))
        },
        # The project root is the repository: `python -m training` runs from there.
        "LAKETRAIN_HOME": str(REPO),
        "LAKE_DIR": str(root / "lake"),
        "DATA_ROOT": str(root / "data"),
        "CHECKPOINT_URL": (root / "objects").as_uri(),
        "METADATA_DB_URL": url,
        "RECIPES_DIR": str(REPO / "recipes"),
        "SETTLE_SECONDS": "0",
        "LAKETRAIN_USER": "tester",
    }
    write_digits_subset(root / "lake", per_class=6)
    v1 = laketrain(env, "build", "digits", "--json")
    write_digits_subset(root / "lake", per_class=8)
    v2 = laketrain(env, "build", "digits", "--json")
    home = {
        "root": root,
        "env": env,
        "url": url,
        "backend": request.param,
        "v1": json.loads(v1.stdout)["version"],
        "v2": json.loads(v2.stdout)["version"],
    }
    yield home
    from pipeline.metadata.store import forget_store

    forget_store(url)
    if pg_name is not None:
        import psycopg

        with psycopg.connect(_libpq(PG_ADMIN_URL), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')


def laketrain(
    env: dict[str, str], *args: str, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``laketrain ARGS`` through its console-script entry point."""
    proc = subprocess.run(
        [LAKETRAIN, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    if check:
        assert proc.returncode == 0, f"laketrain {args}: {proc.stdout}\n{proc.stderr}"
    return proc


def cli(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``laketrain ARGS`` run in this process by the typer app the entry point hands them to,
    under exactly ``env`` (the rest of this process's environment hidden), with its stdout,
    stderr and exit status. For the commands that only read and write the store: a fresh
    process costs each of them ~0.5 s of CPU in imports, and a test module makes ~50 of them.
    What is about the process -- an exit code a caller acts on, a launch -- goes through
    :func:`laketrain`."""
    from typer.testing import CliRunner

    from pipeline.cli_app import app
    from pipeline.settings import get_settings

    scoped = {**{k: None for k in os.environ if k not in env}, **env}
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, list(args), env=scoped, catch_exceptions=False)
    finally:
        get_settings.cache_clear()
    proc = subprocess.CompletedProcess(
        ["laketrain", *args], result.exit_code, result.stdout, result.stderr
    )
    if check:
        assert proc.returncode == 0, f"laketrain {args}: {proc.stdout}\n{proc.stderr}"
    return proc


def store_of(home: dict[str, Any]) -> Any:
    from pipeline.metadata.store import open_store

    return open_store(home["url"])

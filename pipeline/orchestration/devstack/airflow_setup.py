"""Airflow as the dev stack runs it: the components' environment, ``db migrate``, and each
component's command line (loopback only, no log servers)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from pipeline.orchestration.devstack.config import ADMIN_USER, HOST, StackConfig
from pipeline.orchestration.devstack.credentials import persisted_secret

_SQLITE_ARGS = "pipeline.orchestration.devstack.airflow_sqlite"


def airflow_env(cfg: StackConfig, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every Airflow component (and so of every task and the trainer)."""
    assert cfg.home is not None and cfg.port is not None
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "AIRFLOW_HOME": str(cfg.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(cfg.root / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(cfg.parallelism),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            # A finished task otherwise holds its worker slot for ~5 s: with a few slots, the
            # next task of an ingest waits for nothing (measured by bench/ingest_latency.py).
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{cfg.home / 'airflow.db'}",
            # Wait 30 s for its write lock, not sqlite3's 5 (airflow_sqlite.py says why).
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": f"{_SQLITE_ARGS}.SYNC",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": f"{_SQLITE_ARGS}.ASYNC",
            "AIRFLOW__API_AUTH__JWT_SECRET": persisted_secret(cfg.home / "jwt_secret", 64),
            "AIRFLOW__API__SECRET_KEY": persisted_secret(cfg.home / "api_secret_key", 32),
            "AIRFLOW__API__HOST": HOST,
            "AIRFLOW__API__PORT": str(cfg.port),
            "AIRFLOW__API__BASE_URL": cfg.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{cfg.url}/execution/",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(
                cfg.home / "simple_auth_manager_passwords.json"
            ),
            # The trigger class and the task bodies come from the installed (editable) package.
            # The repository root must NOT be on PYTHONPATH: its laketrain.egg-info would make
            # Airflow find the plugin's entry point twice ("already registered" in the UI).
            "PYTHONPATH": env.get("PYTHONPATH", ""),
            # pipeline.settings resolves var/lake, var/data, var/objects, recipes/ from here.
            "LAKETRAIN_HOME": str(cfg.root),
        }
    )
    env.update(cfg.extra_env)
    return env


def airflow_bin() -> str:
    here = Path(sys.executable).parent / "airflow"
    return str(here) if here.exists() else (shutil.which("airflow") or "airflow")


def init_airflow(
    cfg: StackConfig, env: Mapping[str, str], *, log: Callable[[str], None] = print
) -> None:
    assert cfg.home is not None
    (cfg.home / "logs").mkdir(parents=True, exist_ok=True)
    log(f"airflow db migrate ({cfg.home})")
    out = subprocess.run(
        [airflow_bin(), "db", "migrate"],
        env=dict(env),
        cwd=cfg.root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode != 0:
        raise RuntimeError(
            f"airflow db migrate failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )


def component_argv(name: str, cfg: StackConfig) -> list[str]:
    argv = [airflow_bin(), name]
    if name == "api-server":
        argv += ["--host", HOST, "--port", str(cfg.port), "--workers", "1"]
    elif name in ("scheduler", "triggerer"):
        argv += ["--skip-serve-logs"]
    return argv

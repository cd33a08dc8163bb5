"""A real Airflow 3 stack for the UI tests: api-server (and, for the training journey, the
scheduler, dag-processor and triggerer) on free loopback ports, with fixed users.

Each component is a real process in its own process group, stopped with SIGTERM (SIGKILL after
a grace period). Logs go to files under the stack's home so a failing test can show them.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
USERS = {"admin": "admin", "viewer": "viewer"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AirflowStack:
    def __init__(self, home: Path, extra_env: dict[str, str]) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        af = home / "airflow"
        af.mkdir(parents=True, exist_ok=True)
        pw = af / "passwords.json"
        pw.write_text(json.dumps(USERS))
        self.env = {
            **os.environ,
            **extra_env,
            "AIRFLOW_HOME": str(af),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{af / 'airflow.db'}",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(48),
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(24),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            # user:role — the admin, and a viewer who may read but not trigger.
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(pw),
        }
        self.procs: dict[str, subprocess.Popen] = {}
        self.airflow = str(Path(sys.executable).with_name("airflow"))

    def migrate(self) -> None:
        subprocess.run(
            [self.airflow, "db", "migrate"],
            env=self.env,
            check=True,
            cwd=self.home,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=180,
        )

    def start(self, name: str) -> None:
        args = {
            "api-server": [
                "api-server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            "scheduler": ["scheduler", "--skip-serve-logs"],
            "dag-processor": ["dag-processor"],
            "triggerer": ["triggerer", "--skip-serve-logs"],
        }[name]
        log = open(self.home / f"{name}.log", "wb")  # noqa: SIM115 — lives as long as the process
        self.procs[name] = subprocess.Popen(
            [self.airflow, *args],
            env=self.env,
            cwd=self.home,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_healthy(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(
                        f"airflow {name} exited with {p.returncode}:\n{self.log_tail(name)}"
                    )
            try:
                if httpx.get(f"{self.url}/api/v2/monitor/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(
            f"api-server not healthy after {timeout}s:\n{self.log_tail('api-server')}"
        )

    def token(self, user: str = "admin") -> str:
        r = httpx.post(
            f"{self.url}/auth/token", json={"username": user, "password": USERS[user]}, timeout=30
        )
        r.raise_for_status()
        return r.json()["access_token"]

    def log_tail(self, name: str, n: int = 4000) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

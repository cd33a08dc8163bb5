"""A CeleryExecutor Airflow on loopback, made of real processes: api-server, scheduler,
dag-processor and N `airflow celery worker`s, on a fresh PostgreSQL database and a dedicated
Redis database. Every process is started in its own session and stopped by its own pid/pgid
(SIGTERM, then SIGKILL), never by name."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")


# The waits look again 5 times a second: a REST call costs milliseconds, a 1 s sleep half a
# second a wait.
POLL = 0.2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class CeleryStack:
    home: Path
    airflow_db_url: str  # postgresql+psycopg://...
    redis_url: str
    dags_folder: Path
    extra_env: Mapping[str, str]
    workers: tuple[str, ...] = ("w1", "w2")
    concurrency: int = 2
    port: int = field(default_factory=free_port)
    procs: list[Proc] = field(default_factory=list)
    token: str | None = None

    # ------------------------------------------------------------------ environment

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, **more: str) -> dict[str, str]:
        jwt = getattr(self, "_jwt", None) or secrets.token_hex(48)
        self._jwt = jwt
        api_key = getattr(self, "_api_key", None) or secrets.token_hex(24)
        self._api_key = api_key
        result_backend = "db+" + self.airflow_db_url
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(REPO),  # tests.scaleout.hostnames for the workers
            "AIRFLOW_HOME": str(self.home / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.airflow_db_url,
            # psycopg 3 is async-capable itself; Airflow would otherwise derive an asyncpg URL,
            # a driver this environment does not carry.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": self.airflow_db_url,
            "AIRFLOW__CELERY__BROKER_URL": self.redis_url,
            "AIRFLOW__CELERY__RESULT_BACKEND": result_backend,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.concurrency),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__API_AUTH__JWT_SECRET": jwt,
            "AIRFLOW__API__SECRET_KEY": api_key,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
            **self.extra_env,
        }
        env.update(more)
        return env

    # ------------------------------------------------------------------ processes

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        log = self.home / f"{name}.log"
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.home,
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def migrate(self) -> None:
        (self.home / "airflow").mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps({"admin": "admin"}))
        out = subprocess.run(
            [AIRFLOW, "db", "migrate"],
            env=self.env(),
            capture_output=True,
            text=True,
            cwd=self.home,
        )
        if out.returncode != 0:
            raise RuntimeError(
                f"airflow db migrate failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
            )

    def start(self) -> None:
        env = self.env()
        self._start(
            "api-server",
            [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(self.port)],
            env,
        )
        self._start("scheduler", [AIRFLOW, "scheduler", "--skip-serve-logs"], env)
        self._start("dag-processor", [AIRFLOW, "dag-processor"], env)
        for name in self.workers:
            wenv = self.env(
                AIRFLOW__CORE__HOSTNAME_CALLABLE="tests.scaleout.hostnames.worker_name",
                SCALEOUT_WORKER_NAME=f"{name}-host",
            )
            self._start(
                f"worker-{name}",
                [
                    AIRFLOW,
                    "celery",
                    "worker",
                    "--celery-hostname",
                    f"{name}@%h",
                    "--concurrency",
                    str(self.concurrency),
                    "--skip-serve-logs",
                ],
                wenv,
            )

    def check_alive(self) -> None:
        for p in self.procs:
            if p.popen.poll() is not None:
                raise RuntimeError(f"{p.name} exited with {p.popen.returncode}:\n{p.tail()}")

    def stop(self, grace_seconds: float = 3.0) -> None:
        """SIGTERM, then SIGKILL after ``grace_seconds``: the test stops the stack once it has
        read the task records, so a graceful Celery warm shutdown buys nothing (it was 20 s)."""
        for p in self.procs:
            if p.popen.poll() is None:
                _signal_group(p.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        for p in self.procs:
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # the group too: prefork children, task supervisors
            _signal_group(p.popen.pid, signal.SIGKILL)
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def logs(self) -> str:
        return "\n\n".join(f"===== {p.name} =====\n{p.tail()}" for p in self.procs)

    # ------------------------------------------------------------------ REST API

    def wait_healthy(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                r = requests.get(f"{self.base_url}/api/v2/monitor/health", timeout=3)
                if r.ok and r.json().get("scheduler", {}).get("status") == "healthy":
                    return
            except requests.RequestException:
                pass
            time.sleep(POLL)
        raise TimeoutError(f"Airflow not healthy after {timeout}s\n{self.logs()}")

    def _auth(self) -> dict[str, str]:
        if self.token is None:
            r = requests.post(
                f"{self.base_url}/auth/token",
                json={"username": "admin", "password": "admin"},
                timeout=30,
            )
            r.raise_for_status()
            self.token = r.json()["access_token"]
        return {"Authorization": f"Bearer {self.token}"}

    def _poll(self, path: str) -> requests.Response | None:
        """GET ``path`` for a polling loop: None when the request timed out or could not
        connect. On a loaded 2-core machine the API server can stall past one request's
        timeout while the stack starts or a run is busy: a slow answer, so the loop asks
        again before its own deadline. Any other error (a failed login) still raises."""
        try:
            return requests.get(f"{self.base_url}/api/v2{path}", headers=self._auth(), timeout=30)
        except (requests.Timeout, requests.ConnectionError):
            return None

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        r = requests.request(
            method, f"{self.base_url}/api/v2{path}", headers=self._auth(), timeout=30, **kwargs
        )
        if not r.ok:
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:500]}")
        return r.json()

    def wait_dag(self, dag_id: str, timeout: float = 90) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            r = self._poll(f"/dags/{dag_id}")
            if r is not None and r.ok:
                return r.json()
            time.sleep(POLL)
        raise TimeoutError(f"DAG {dag_id} not parsed after {timeout}s\n{self.logs()}")

    def run_dag(
        self, dag_id: str, conf: Mapping[str, Any] | None = None, timeout: float = 150
    ) -> dict:
        if self.api("GET", f"/dags/{dag_id}").get("is_paused"):
            self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        run = self.api(
            "POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": dict(conf or {})}
        )
        run_id = run["dag_run_id"]
        deadline = time.monotonic() + timeout
        run = {"state": "unknown (no answer)"}  # every poll may time out
        while time.monotonic() < deadline:
            self.check_alive()
            r = self._poll(f"/dags/{dag_id}/dagRuns/{run_id}")
            if r is not None:
                if not r.ok:
                    raise RuntimeError(f"GET dagRuns/{run_id}: {r.status_code} {r.text[:500]}")
                run = r.json()
                if run["state"] in ("success", "failed"):
                    return run
            time.sleep(POLL)
        raise TimeoutError(
            f"{dag_id} run {run_id} still {run['state']} after {timeout}s\n{self.logs()}"
        )

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        out = self.api(
            "GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 1000}
        )
        return out["task_instances"]


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the group this stack started (start_new_session: pgid == pid)
    except (ProcessLookupError, PermissionError):
        pass

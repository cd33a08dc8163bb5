"""A real Airflow 3 stack for the UI tests — the dev stack's own pieces
(``pipeline.orchestration.devstack``: environment, ``db migrate``, the four components in their
own process groups, health wait, SIGTERM-then-SIGKILL stop) on a free loopback port, with two
fixed users (admin, and a viewer who may read but not trigger) instead of a generated password.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from pipeline.orchestration import devstack

REPO = Path(__file__).resolve().parents[2]
USERS = {"admin": "admin", "viewer": "viewer"}


class AirflowStack:
    def __init__(
        self, home: Path, extra_env: dict[str, str], db_template: Path | None = None
    ) -> None:
        af = home / "airflow"
        af.mkdir(parents=True, exist_ok=True)
        passwords = af / "test_passwords.json"
        passwords.write_text(json.dumps(USERS))
        self.cfg = devstack.StackConfig(
            root=REPO,
            home=af,
            port=devstack.free_port(),
            parallelism=2,
            grace_seconds=15.0,
            extra_env={
                **extra_env,
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
                # The package is installed: the repo root on PYTHONPATH would expose its
                # laketrain.egg-info as a second distribution and Airflow would load the
                # plugin's entry point twice ("already registered" import error).
                "PYTHONPATH": "",
            },
        )
        self.url = self.cfg.url
        self.env = devstack.airflow_env(self.cfg)
        self.procs: list[devstack.Proc] = []
        self.db_template = db_template

    def start(self, timeout: float = 150.0) -> None:
        if self.db_template is not None:  # a copy of a database migrated once per process
            from tests.orchestration.airflow_db import seed_home

            seed_home(self.cfg.home, self.db_template)
        else:
            devstack.init_airflow(self.cfg, self.env, log=lambda _msg: None)
        self.procs = devstack.start_components(self.cfg, self.env)
        try:
            devstack.wait_healthy(
                devstack.Api(self.url, "admin", USERS["admin"]), timeout, self.procs
            )
        except BaseException as exc:
            tails = "\n".join(f"--- {p.name}\n{self.log_tail(p.name)}" for p in self.procs)
            self.stop()
            raise RuntimeError(f"Airflow did not come up: {exc}\n{tails}") from None

    def token(self, user: str = "admin") -> str:
        r = httpx.post(
            f"{self.url}/auth/token", json={"username": user, "password": USERS[user]}, timeout=30
        )
        r.raise_for_status()
        return r.json()["access_token"]

    def log_tail(self, name: str, n: int = 4000) -> str:
        path = self.cfg.home / "logs" / f"{name}.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def stop(self, grace_seconds: float = 2.0) -> None:
        # Only at teardown, with everything read: 2 s, not the dev stack's graceful 15-20 s (the
        # triggerer alone takes ~15 s to leave, Airflow waiting 10 s on its trigger runner).
        devstack.stop_groups([(p.pid, p.create_time) for p in self.procs], grace_seconds)
        self.procs = []

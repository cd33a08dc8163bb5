"""The four components as one unit (start, wait healthy, stop), the sample lake they start on,
and the pid file through which ``stop`` and ``status`` find a running stack."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from pipeline.orchestration.devstack.airflow_setup import airflow_env, init_airflow
from pipeline.orchestration.devstack.api import Api, wait_healthy
from pipeline.orchestration.devstack.config import (
    ADMIN_USER,
    COMPONENTS,
    HOST,
    PID_FILE,
    StackConfig,
    free_port,
)
from pipeline.orchestration.devstack.credentials import admin_password
from pipeline.orchestration.devstack.processes import (
    Proc,
    start_component,
    start_components,
    stop_groups,
    stop_procs,
)


def prepare_lake(env: Mapping[str, str], *, log: Callable[[str], None] = print) -> None:
    """Create the sample lake when the lake is empty, and migrate the laketrain store."""
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in env.items() if not k.startswith("AIRFLOW")})
    try:
        from pipeline.lake.sample_lake import create_sample_lake
        from pipeline.metadata.store import open_store
        from pipeline.settings import get_settings

        get_settings.cache_clear()
        s = get_settings()
        written = create_sample_lake(s.lake_dir)
        if written:
            log(
                f"sample lake created in {s.lake_dir}: "
                + ", ".join(f"{n} {k}" for k, n in written.items())
            )
        open_store(s.database_url)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        from pipeline.settings import get_settings

        get_settings.cache_clear()


# ------------------------------------------------------------------------------- pid file


def read_pid_file(home: Path) -> dict | None:
    try:
        return json.loads((home / PID_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None


def runner_alive(info: dict) -> bool:
    """Whether the ``up`` process the pid file names still runs (its create_time guards
    against a reused pid)."""
    import psutil

    try:
        p = psutil.Process(info["devstack"]["pid"])
        return abs(p.create_time() - info["devstack"]["create_time"]) < 1.0
    except (psutil.NoSuchProcess, KeyError, TypeError):
        return False


def stop_recorded(info: dict, home: Path, grace_seconds: float) -> None:
    """Stop every component the pid file names, then remove the pid file."""
    stop_groups([(c["pid"], c["create_time"]) for c in info.get("components", [])], grace_seconds)
    (home / PID_FILE).unlink(missing_ok=True)


# ------------------------------------------------------------------------------- the stack


class DevStack:
    """The four components as one unit: start, wait healthy, stop."""

    def __init__(self, cfg: StackConfig, *, log: Callable[[str], None] = print) -> None:
        self.cfg = cfg
        self.log = log
        if cfg.port is None:
            cfg.port = free_port(8080)
        self.env = airflow_env(cfg)
        self.password = admin_password(cfg.home)  # type: ignore[arg-type]
        self.procs: list[Proc] = []
        self.api = Api(cfg.url, ADMIN_USER, self.password)

    @property
    def pid_file(self) -> Path:
        return self.cfg.home / PID_FILE  # type: ignore[operator]

    def start(self, *, timeout: float = 180.0, prepare: bool = True, migrate: bool = True) -> None:
        """``migrate=False``: the home already holds an Airflow database at head (the tests
        copy one migrated once per test process)."""
        if prepare:
            prepare_lake(self.env, log=self.log)
        if migrate:
            init_airflow(self.cfg, self.env, log=self.log)
        else:
            (self.cfg.home / "logs").mkdir(parents=True, exist_ok=True)  # type: ignore[operator]
        self.log(f"starting {', '.join(COMPONENTS)} on {HOST}:{self.cfg.port}")
        self.procs = start_components(self.cfg, self.env)
        self._write_pid_file()
        try:
            wait_healthy(self.api, timeout=timeout, procs=self.procs)
        except BaseException:
            self.stop()
            raise

    def _write_pid_file(self) -> None:
        import psutil

        data = {
            "devstack": {"pid": os.getpid(), "create_time": psutil.Process().create_time()},
            "url": self.cfg.url,
            "components": [
                {"name": p.name, "pid": p.pid, "create_time": p.create_time} for p in self.procs
            ],
        }
        tmp = self.pid_file.with_name(PID_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, self.pid_file)

    def stop_component(self, name: str) -> None:
        """Stop one component (SIGTERM, then SIGKILL), e.g. to restart the triggerer."""
        for p in [p for p in self.procs if p.name == name]:
            stop_procs([p], self.cfg.grace_seconds)
            self.procs.remove(p)
        self._write_pid_file()

    def start_component(self, name: str) -> None:
        self.procs.append(start_component(name, self.cfg, self.env))
        self._write_pid_file()

    def stop(self) -> None:
        if not self.procs:
            return
        self.log("stopping " + ", ".join(f"{p.name} ({p.pid})" for p in self.procs))
        stop_procs(self.procs, self.cfg.grace_seconds)
        self.procs = []
        self.pid_file.unlink(missing_ok=True)

    def __enter__(self) -> DevStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""The dev stack's pieces: its Airflow configuration, secrets kept once, free ports, and
stopping process groups with real signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pipeline.orchestration import devstack
from pipeline.orchestration.devstack import (
    StackConfig,
    admin_password,
    airflow_env,
    free_port,
    stop_groups,
)

REPO = Path(__file__).resolve().parents[2]


def test_airflow_env_is_loopback_local_and_sized(tmp_path: Path) -> None:
    cfg = StackConfig(
        home=tmp_path / "af", port=18123, parallelism=3, extra_env={"SETTLE_SECONDS": "7"}
    )
    env = airflow_env(cfg, base={"PATH": "/usr/bin", "PYTHONPATH": "/elsewhere"})
    assert env["AIRFLOW_HOME"] == str(tmp_path / "af")
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(REPO / "dags")
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__PARALLELISM"] == "3"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"
    assert env["AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL"] == "10"
    assert (
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{tmp_path / 'af' / 'airflow.db'}"
    )
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18123/execution/"
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1"
    # The package is installed editable; the repo root on PYTHONPATH would expose its
    # laketrain.egg-info and register the UI plugin twice.
    assert env["PYTHONPATH"].split(os.pathsep) == ["/elsewhere"]
    assert env["LAKETRAIN_HOME"] == str(REPO)
    assert env["SETTLE_SECONDS"] == "7"  # settings reach every component
    assert len(env["AIRFLOW__API_AUTH__JWT_SECRET"].encode()) >= 64
    # generated once, then kept: a restart keeps sessions and tokens valid
    again = airflow_env(cfg, base={})
    assert again["AIRFLOW__API_AUTH__JWT_SECRET"] == env["AIRFLOW__API_AUTH__JWT_SECRET"]
    assert again["AIRFLOW__API__SECRET_KEY"] == env["AIRFLOW__API__SECRET_KEY"]
    for name in ("jwt_secret", "api_secret_key"):
        assert stat.S_IMODE((tmp_path / "af" / name).stat().st_mode) == 0o600


_BUSY_TIMEOUTS = """
import asyncio
from sqlalchemy import text
from airflow import settings

settings.configure_orm()
sync = settings.engine.raw_connection().cursor().execute("PRAGMA busy_timeout").fetchone()[0]

async def busy_async():
    async with settings.async_engine.connect() as conn:
        value = (await conn.execute(text("PRAGMA busy_timeout"))).scalar()
    await settings.async_engine.dispose()
    return value

print(sync, asyncio.run(busy_async()))
"""


def test_airflow_waits_30_s_for_its_sqlite_lock_on_both_engines(tmp_path: Path) -> None:
    """A REST trigger once failed with HTTP 500 after sqlite3's default 5 s lock wait (the
    scheduler and the task API writing): the stack's Airflow engines, sync and async, wait
    30 s (airflow_sqlite.py), read back from SQLite itself; without the setting, 5 s."""
    (tmp_path / "af").mkdir()
    env = airflow_env(StackConfig(home=tmp_path / "af", port=18124, parallelism=2))

    def busy_timeouts(env: dict[str, str]) -> str:
        out = subprocess.run(
            [sys.executable, "-c", _BUSY_TIMEOUTS],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout.strip().splitlines()[-1]

    assert busy_timeouts(env) == "30000 30000"
    for name in ("CONNECT_ARGS", "CONNECT_ARGS_ASYNC"):
        del env[f"AIRFLOW__DATABASE__SQL_ALCHEMY_{name}"]
    assert busy_timeouts(env) == "5000 5000"


def test_admin_password_is_generated_once_and_private(tmp_path: Path) -> None:
    first = admin_password(tmp_path)
    assert len(first) >= 12 and admin_password(tmp_path) == first
    path = tmp_path / "simple_auth_manager_passwords.json"
    assert json.loads(path.read_text()) == {"admin": first}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    other = tmp_path / "other"
    assert admin_password(other) != first


def test_parallelism_follows_the_machine_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    for cores, expected in ((1, 2), (2, 2), (6, 6), (64, 8), (None, 2)):
        monkeypatch.setattr(os, "cpu_count", lambda c=cores: c)
        assert devstack.default_parallelism() == expected


def test_free_port_prefers_the_asked_one_unless_taken() -> None:
    port = free_port()
    assert free_port(port) == port
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        other = free_port(port)
    assert other != port


def test_components_listen_only_where_told(tmp_path: Path) -> None:
    cfg = StackConfig(home=tmp_path, port=18080)
    assert devstack.component_argv("api-server", cfg)[1:] == [
        "api-server",
        "--host",
        "127.0.0.1",
        "--port",
        "18080",
        "--workers",
        "1",
    ]
    assert devstack.component_argv("scheduler", cfg)[1:] == ["scheduler", "--skip-serve-logs"]
    assert devstack.component_argv("triggerer", cfg)[1:] == ["triggerer", "--skip-serve-logs"]
    assert devstack.component_argv("dag-processor", cfg)[1:] == ["dag-processor"]


STUBBORN = """
import os, signal, subprocess, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    def on_term(signum, frame):
        open(sys.argv[2], "w").write("TERM")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def start_group(mode: str, marker: Path | None = None) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen(
        [sys.executable, "-c", STUBBORN, mode, str(marker)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    child = int(p.stdout.readline())
    return p, child


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_stop_groups_terminates_then_kills_whole_groups(tmp_path: Path) -> None:
    polite, polite_child = start_group("polite", tmp_path / "polite-got-term")
    stubborn, stubborn_child = start_group("ignore")
    t0 = time.monotonic()
    stop_groups(
        [
            (polite.pid, psutil.Process(polite.pid).create_time()),
            (stubborn.pid, psutil.Process(stubborn.pid).create_time()),
        ],
        grace_seconds=1.0,
    )
    assert (tmp_path / "polite-got-term").read_text() == "TERM"  # asked first
    # the stubborn leader and both children ignore SIGTERM: only SIGKILL ends them, and the
    # whole group goes, not only its leader
    assert all(gone(pid) for pid in (polite.pid, polite_child, stubborn.pid, stubborn_child))
    assert time.monotonic() - t0 < 30


def test_stop_groups_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    p, child = start_group("polite", tmp_path / "m")
    try:
        stop_groups([(p.pid, psutil.Process(p.pid).create_time() - 1000)], grace_seconds=0.5)
        assert p.poll() is None  # create_time differs: not the process we started
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_stop_without_a_running_stack_says_so(tmp_path: Path) -> None:
    env = {**os.environ, "LAKETRAIN_DEVSTACK_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.orchestration.devstack", "stop"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert out.returncode == 0 and "not running" in out.stdout


@pytest.mark.slow
def test_up_stops_what_a_dead_previous_run_left_behind(tmp_path: Path) -> None:
    leftover, child = start_group("polite", tmp_path / "left-got-term")
    home = tmp_path / "af"
    home.mkdir()
    (home / "devstack.json").write_text(
        json.dumps(
            {
                "devstack": {
                    "pid": 2**22 + 12345,
                    "create_time": 0.0,
                },  # a runner that no longer exists
                "url": "http://127.0.0.1:1",
                "components": [
                    {
                        "name": "scheduler",
                        "pid": leftover.pid,
                        "create_time": psutil.Process(leftover.pid).create_time(),
                    }
                ],
            }
        )
    )
    env = {**os.environ, "LAKETRAIN_DEVSTACK_HOME": str(home)}
    # `up` stops the leftovers first; starting the new stack is replaced by an exit here.
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pipeline.orchestration import devstack as d; "
            "d.DevStack.start = lambda self, **k: (_ for _ in ()).throw(SystemExit(7)); "
            "sys.exit(d.main(['up', '--port', '1']))",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 7, out.stdout + out.stderr
    assert "left behind" in out.stdout
    assert (tmp_path / "left-got-term").read_text() == "TERM"
    assert gone(leftover.pid) and gone(child)
    assert not (home / "devstack.json").exists()

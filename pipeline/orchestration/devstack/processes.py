"""The components as process groups: start one with its log file, stop groups (SIGTERM, a
grace period, then SIGKILL), and list what they listen on."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.orchestration.devstack.airflow_setup import component_argv
from pipeline.orchestration.devstack.config import COMPONENTS, StackConfig


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    create_time: float

    @property
    def pid(self) -> int:
        return self.popen.pid


def start_component(name: str, cfg: StackConfig, env: Mapping[str, str]) -> Proc:
    import psutil

    assert cfg.home is not None
    logfile = open(cfg.home / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
    popen = subprocess.Popen(
        component_argv(name, cfg),
        env=dict(env),
        cwd=cfg.root,
        stdin=subprocess.DEVNULL,
        stdout=logfile,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group: one signal reaches its workers too
    )
    logfile.close()
    return Proc(name, popen, psutil.Process(popen.pid).create_time())


def start_components(cfg: StackConfig, env: Mapping[str, str]) -> list[Proc]:
    return [start_component(name, cfg, env) for name in COMPONENTS]


def stop_procs(procs: Iterable[Proc], grace_seconds: float) -> None:
    stop_groups([(p.pid, p.create_time) for p in procs], grace_seconds)


def stop_groups(entries: list[tuple[int, float | None]], grace_seconds: float = 20.0) -> None:
    """SIGTERM every process group (leader pid, its create_time to guard against pid reuse),
    wait up to ``grace_seconds`` for all of them, then SIGKILL what is left."""
    import psutil

    live = []
    for pid, created in entries:
        try:
            p = psutil.Process(pid)
            if created is not None and abs(p.create_time() - created) > 1.0:
                continue  # the pid was reused by someone else's process
        except psutil.NoSuchProcess:
            p = None
        members = _group_members(pid)
        if p is not None or members:
            live.append((pid, members))
            _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline and any(_alive(m) for _, m in live):
        time.sleep(0.2)
    for pid, members in live:
        if _alive(members) or _group_members(pid):
            _signal_group(pid, signal.SIGKILL)
            for m in members:
                try:
                    m.kill()
                except Exception:
                    pass
    for _, members in live:
        for m in members:
            try:
                m.wait(timeout=5)
            except Exception:
                pass


def _group_members(pgid: int) -> list[Any]:
    import psutil

    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def _alive(procs: list[Any]) -> bool:
    import psutil

    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            continue
    return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def listeners(pids: list[int]) -> list[tuple[str, int, int]]:
    """(ip, port, pid) of every listening TCP socket of these processes and their children."""
    import psutil

    tree: set[int] = set()
    for pid in pids:
        try:
            p = psutil.Process(pid)
            tree.add(pid)
            tree.update(c.pid for c in p.children(recursive=True))
        except psutil.NoSuchProcess:
            continue
    out = []
    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in tree:
            out.append((conn.laddr.ip, conn.laddr.port, conn.pid))
    return sorted(out)

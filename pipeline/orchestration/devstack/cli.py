"""``devstack up`` (start everything, print the login, follow along until Ctrl-C), ``stop``
(from another shell: ``make stop``) and ``status``."""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from datetime import UTC, datetime
from typing import Any

from pipeline.orchestration.devstack.config import ADMIN_USER, StackConfig
from pipeline.orchestration.devstack.stack import (
    DevStack,
    read_pid_file,
    runner_alive,
    stop_recorded,
)
from pipeline.orchestration.follow import Follower


def cmd_up(args: argparse.Namespace) -> int:
    cfg = StackConfig(port=args.port)
    running = read_pid_file(cfg.home)  # type: ignore[arg-type]
    if running and runner_alive(running):
        print(
            f"already running at {running.get('url')} (pid {running['devstack']['pid']}); `make stop` first"
        )
        return 1
    if running:
        # The previous runner died without stopping its components (SIGKILL, a crash): they
        # would share the SQLite database with the new ones.
        print("stopping the components a previous run left behind")
        stop_recorded(running, cfg.home, cfg.grace_seconds)  # type: ignore[arg-type]
    stack = DevStack(cfg)
    stop_event = threading.Event()
    since = datetime.now(UTC)  # versions older than this `make run` are not news

    def on_signal(signum: int, _frame: Any) -> None:
        stop_event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        stack.start()
        _print_welcome(stack)
        _follow_along(stack, stop_event, since)
    finally:
        stack.stop()
        print("stopped")
    return 0


def _print_welcome(stack: DevStack) -> None:
    cfg = stack.cfg
    print()
    print(f"  Airflow UI   {cfg.url}")
    print(f"  login        {ADMIN_USER} / {stack.password}")
    print(
        f"  lake         {stack.env.get('LAKE_DIR') or cfg.root / 'var' / 'lake'}  (drop files here)"
    )
    print(f"  logs         {cfg.home / 'logs'}")  # type: ignore[operator]
    print("  Ctrl-C (or `make stop`) stops everything.")
    print()
    print("following along: the watcher fires, lake_ingest builds versions, train runs on them")


def _follow_along(stack: DevStack, stop_event: threading.Event, since: datetime) -> None:
    """Print what the stack does until a signal, or until a component exits."""
    logs = stack.cfg.home / "logs"  # type: ignore[operator]
    follower = Follower(stack.api, stack.env, since=since)
    while not stop_event.is_set():
        for p in stack.procs:
            if p.popen.poll() is not None:
                print(
                    f"{p.name} exited with code {p.popen.returncode}; see {logs / (p.name + '.log')}"
                )
                stop_event.set()
        try:
            follower.poll()
        except Exception as exc:  # the API restarting: keep following
            print(f"  (API not answering: {exc})")
        stop_event.wait(2.0)


def _recorded() -> tuple[StackConfig, dict | None]:
    """This machine's stack config and its pid file's record (None, and said so, when none)."""
    cfg = StackConfig()
    info = read_pid_file(cfg.home)  # type: ignore[arg-type]
    if not info:
        print("not running")
    return cfg, info


def cmd_stop(args: argparse.Namespace) -> int:
    cfg, info = _recorded()
    if not info:
        return 0
    if runner_alive(info):
        # The runner stops its components itself (and removes the pid file) on SIGTERM.
        os.kill(info["devstack"]["pid"], signal.SIGTERM)
        deadline = time.monotonic() + cfg.grace_seconds + 10
        while time.monotonic() < deadline and runner_alive(info):
            time.sleep(0.3)
    stop_recorded(info, cfg.home, cfg.grace_seconds)  # type: ignore[arg-type]
    print("stopped")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    import psutil

    _cfg, info = _recorded()
    if not info:
        return 1
    print(f"devstack {'running' if runner_alive(info) else 'gone'} at {info.get('url')}")
    for c in info.get("components", []):
        alive = psutil.pid_exists(c["pid"])
        print(f"  {c['name']:<14} pid {c['pid']:<8} {'running' if alive else 'stopped'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="devstack", description="the whole platform on this machine, on loopback only"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start everything and follow along (Ctrl-C stops)")
    up.add_argument(
        "--port", type=int, default=None, help="API/UI port (default 8080 or a free one)"
    )
    sub.add_parser("stop", help="stop a running `up`")
    sub.add_parser("status", help="is it running?")
    args = parser.parse_args(argv)
    return {"up": cmd_up, "stop": cmd_stop, "status": cmd_status}[args.command](args)

"""``make run``: the whole platform on this machine, on loopback only, and ``make stop``.

``python -m pipeline.orchestration.devstack up`` (what ``make run`` calls):

1. creates the sample lake when the lake is empty;
2. initialises Airflow under ``var/airflow`` (SQLite, LocalExecutor, parallelism sized to the
   machine, examples off, DAGs unpaused, a generated JWT secret, API secret key and admin
   password kept there), then ``airflow db migrate``;
3. starts the api-server on 127.0.0.1 (port 8080, or a free one), the scheduler, the
   dag-processor and the triggerer (no log servers: nothing listens on 0.0.0.0);
4. prints the UI URL and the login, then follows along: the watcher fires, ingest builds a
   version, training runs on it.

Ctrl-C (or SIGTERM, or ``devstack stop`` from another shell) stops every process it started:
SIGTERM to each process group, then SIGKILL after a grace period.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.orchestration.follow import Follower

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
HOST = "127.0.0.1"
ADMIN_USER = "admin"
PID_FILE = "devstack.json"


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def default_parallelism() -> int:
    """Worker slots: the machine's cores, at least 2 (one ingest shard beside a training run),
    at most 8 (each LocalExecutor worker is a pre-started Python process)."""
    return max(2, min(8, os.cpu_count() or 2))


def free_port(preferred: int | None = None, host: str = HOST) -> int:
    """``preferred`` when nothing listens there, else a free port chosen by the kernel."""
    candidates = [preferred] if preferred else []
    for port in [*candidates, 0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free TCP port on the loopback interface")


@dataclass
class StackConfig:
    """Where the dev stack lives and how it is wired. ``extra_env`` reaches every component
    (tests point METADATA_DB_URL, CHECKPOINT_URL, LAKE_DIR... elsewhere through it)."""

    root: Path = field(default_factory=repo_root)
    home: Path | None = None  # AIRFLOW_HOME; default <root>/var/airflow
    port: int | None = None  # default 8080, or a free port when 8080 is taken
    parallelism: int = field(default_factory=default_parallelism)
    extra_env: dict[str, str] = field(default_factory=dict)
    grace_seconds: float = 20.0

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        # LAKETRAIN_DEVSTACK_HOME moves the whole Airflow state (tests, a second stack).
        default_home = os.environ.get("LAKETRAIN_DEVSTACK_HOME") or self.root / "var" / "airflow"
        self.home = Path(self.home or default_home).resolve()
        if self.parallelism < 1:
            raise ValueError(f"parallelism must be >= 1, got {self.parallelism}")

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


# ------------------------------------------------------------------------------- init


def _persisted_secret(path: Path, nbytes: int) -> str:
    """A random secret generated once and kept in ``path`` (mode 0600)."""
    if path.is_file():
        value = path.read_text().strip()
        if value:
            return value
    value = secrets.token_urlsafe(nbytes)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    os.replace(tmp, path)
    return value


def admin_password(home: Path) -> str:
    """The admin password: generated once, kept in the simple auth manager's passwords file."""
    path = home / "simple_auth_manager_passwords.json"
    if path.is_file():
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and data.get(ADMIN_USER):
                return str(data[ADMIN_USER])
        except ValueError:
            pass
    password = secrets.token_urlsafe(12)
    home.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({ADMIN_USER: password}, f)
    os.replace(tmp, path)
    return password


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
            "AIRFLOW__API_AUTH__JWT_SECRET": _persisted_secret(cfg.home / "jwt_secret", 64),
            "AIRFLOW__API__SECRET_KEY": _persisted_secret(cfg.home / "api_secret_key", 32),
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


# ------------------------------------------------------------------------------- processes


def component_argv(name: str, cfg: StackConfig) -> list[str]:
    argv = [airflow_bin(), name]
    if name == "api-server":
        argv += ["--host", HOST, "--port", str(cfg.port), "--workers", "1"]
    elif name in ("scheduler", "triggerer"):
        argv += ["--skip-serve-logs"]
    return argv


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


# ------------------------------------------------------------------------------- REST API


class Api:
    """A tiny REST API v2 client (urllib: nothing to install, nothing to mock)."""

    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.base = base_url.rstrip("/")
        self.username, self.password = username, password
        self.token: str | None = None

    def _request(
        self, method: str, path: str, body: Any = None, auth: bool = True
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if auth:
            if self.token is None:
                self.login()
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode(errors="replace")

    def login(self) -> None:
        status, body = self._request(
            "POST",
            "/auth/token",
            {"username": self.username, "password": self.password},
            auth=False,
        )
        if status not in (200, 201) or not isinstance(body, dict):
            raise RuntimeError(f"login to {self.base} failed: HTTP {status}")
        self.token = body["access_token"]

    def get(self, path: str) -> tuple[int, Any]:
        return self._request("GET", path)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        return self._request("POST", path, body)

    def patch(self, path: str, body: Any) -> tuple[int, Any]:
        return self._request("PATCH", path, body)

    def health(self) -> dict | None:
        try:
            status, body = self._request("GET", "/api/v2/monitor/health", auth=False)
        except (OSError, urllib.error.URLError):
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def dag_runs(self, dag_id: str, limit: int = 20) -> list[dict]:
        status, body = self.get(f"/api/v2/dags/{dag_id}/dagRuns?limit={limit}&order_by=-run_after")
        return body.get("dag_runs", []) if status == 200 and isinstance(body, dict) else []

    def trigger(self, dag_id: str, conf: dict) -> tuple[int, Any]:
        return self.post(f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})


def wait_healthy(api: Api, timeout: float = 180.0, procs: list[Proc] | None = None) -> dict:
    """Until every component reports healthy; raise with the component logs' tails when one
    exits or the timeout passes."""
    deadline = time.monotonic() + timeout
    last: dict | None = None
    while time.monotonic() < deadline:
        for p in procs or []:
            if p.popen.poll() is not None:
                raise RuntimeError(f"{p.name} exited with code {p.popen.returncode}")
        last = api.health()
        if last and all(
            (last.get(k) or {}).get("status") == "healthy"
            for k in ("metadatabase", "scheduler", "triggerer", "dag_processor")
        ):
            return last
        time.sleep(1.0)
    raise TimeoutError(f"the stack was not healthy after {timeout:.0f}s: {last}")


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

    def start(self, *, timeout: float = 180.0, prepare: bool = True) -> None:
        if prepare:
            prepare_lake(self.env, log=self.log)
        init_airflow(self.cfg, self.env, log=self.log)
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
            stop_groups([(p.pid, p.create_time)], self.cfg.grace_seconds)
            self.procs.remove(p)
        self._write_pid_file()

    def start_component(self, name: str) -> None:
        self.procs.append(start_component(name, self.cfg, self.env))
        self._write_pid_file()

    def stop(self) -> None:
        if not self.procs:
            return
        self.log("stopping " + ", ".join(f"{p.name} ({p.pid})" for p in self.procs))
        stop_groups([(p.pid, p.create_time) for p in self.procs], self.cfg.grace_seconds)
        self.procs = []
        try:
            self.pid_file.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> DevStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------------------- commands


def cmd_up(args: argparse.Namespace) -> int:
    cfg = StackConfig(port=args.port)
    running = read_pid_file(cfg.home)  # type: ignore[arg-type]
    if running and _devstack_alive(running):
        print(
            f"already running at {running.get('url')} (pid {running['devstack']['pid']}); `make stop` first"
        )
        return 1
    if running:
        # The previous runner died without stopping its components (SIGKILL, a crash): they
        # would share the SQLite database with the new ones.
        print("stopping the components a previous run left behind")
        stop_groups(
            [(c["pid"], c["create_time"]) for c in running.get("components", [])], cfg.grace_seconds
        )
        (cfg.home / PID_FILE).unlink(missing_ok=True)  # type: ignore[operator]
    stack = DevStack(cfg)
    stop_event = threading.Event()
    since = datetime.now(UTC)  # versions older than this `make run` are not news

    def on_signal(signum: int, _frame: Any) -> None:
        stop_event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        stack.start()
        print()
        print(f"  Airflow UI   {cfg.url}")
        print(f"  login        {ADMIN_USER} / {stack.password}")
        print(
            f"  lake         {stack.env.get('LAKE_DIR') or cfg.root / 'var' / 'lake'}  (drop files here)"
        )
        print(f"  logs         {cfg.home / 'logs'}")
        print("  Ctrl-C (or `make stop`) stops everything.")
        print()
        print("following along: the watcher fires, lake_ingest builds versions, train runs on them")
        follower = Follower(stack.api, stack.env, since=since)
        while not stop_event.is_set():
            for p in stack.procs:
                if p.popen.poll() is not None:
                    print(
                        f"{p.name} exited with code {p.popen.returncode}; see {cfg.home / 'logs' / (p.name + '.log')}"
                    )
                    stop_event.set()
            try:
                follower.poll()
            except Exception as exc:  # the API restarting: keep following
                print(f"  (API not answering: {exc})")
            stop_event.wait(2.0)
    finally:
        stack.stop()
        print("stopped")
    return 0


def read_pid_file(home: Path) -> dict | None:
    try:
        return json.loads((home / PID_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None


def _devstack_alive(info: dict) -> bool:
    import psutil

    try:
        p = psutil.Process(info["devstack"]["pid"])
        return abs(p.create_time() - info["devstack"]["create_time"]) < 1.0
    except (psutil.NoSuchProcess, KeyError, TypeError):
        return False


def cmd_stop(args: argparse.Namespace) -> int:
    cfg = StackConfig()
    info = read_pid_file(cfg.home)  # type: ignore[arg-type]
    if not info:
        print("not running")
        return 0
    if _devstack_alive(info):
        # The runner stops its components itself (and removes the pid file) on SIGTERM.
        os.kill(info["devstack"]["pid"], signal.SIGTERM)
        deadline = time.monotonic() + cfg.grace_seconds + 10
        while time.monotonic() < deadline and _devstack_alive(info):
            time.sleep(0.3)
    comps = [(c["pid"], c["create_time"]) for c in info.get("components", [])]
    stop_groups(comps, cfg.grace_seconds)
    try:
        (cfg.home / PID_FILE).unlink()  # type: ignore[operator]
    except FileNotFoundError:
        pass
    print("stopped")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    import psutil

    cfg = StackConfig()
    info = read_pid_file(cfg.home)  # type: ignore[arg-type]
    if not info:
        print("not running")
        return 1
    print(f"devstack {'running' if _devstack_alive(info) else 'gone'} at {info.get('url')}")
    for c in info.get("components", []):
        alive = psutil.pid_exists(c["pid"])
        print(f"  {c['name']:<14} pid {c['pid']:<8} {'running' if alive else 'stopped'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devstack", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start everything and follow along (Ctrl-C stops)")
    up.add_argument(
        "--port", type=int, default=None, help="API/UI port (default 8080 or a free one)"
    )
    sub.add_parser("stop", help="stop a running `up`")
    sub.add_parser("status", help="is it running?")
    args = parser.parse_args(argv)
    return {"up": cmd_up, "stop": cmd_stop, "status": cmd_status}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

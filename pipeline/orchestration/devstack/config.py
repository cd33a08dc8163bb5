"""Where the dev stack lives and how it is wired: its home, port and size."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
HOST = "127.0.0.1"
ADMIN_USER = "admin"
PID_FILE = "devstack.json"


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


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

"""`make run` as a user runs it: `python -m pipeline.orchestration.devstack up` on an empty
lake, in its own Airflow home, followed until training ran on the digits version; then
`devstack stop` from another process stops every component (what `make stop` does)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_make_run_follows_along_and_make_stop_stops_everything(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_"))},
        "LAKETRAIN_DEVSTACK_HOME": str(tmp_path / "airflow"),
        "LAKE_DIR": str(tmp_path / "lake"),
        "DATA_ROOT": str(tmp_path / "data"),
        "CHECKPOINT_URL": (tmp_path / "objects").as_uri(),
        "METADATA_DB_URL": f"sqlite:///{tmp_path / 'metadata.db'}",
        "PYTHONUNBUFFERED": "1",
    }
    up = subprocess.Popen(
        [sys.executable, "-m", "pipeline.orchestration.devstack", "up"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(up.stdout.readline, "")), daemon=True
    )
    reader.start()

    def wait_for(pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(lines):
                if m := re.search(pattern, line):
                    return m
            assert up.poll() is None, "".join(lines)[-5000:]
            time.sleep(0.5)
        pytest.fail(
            f"no line matching {pattern!r} within {timeout:.0f}s:\n" + "".join(lines)[-5000:]
        )

    try:
        wait_for(r"sample lake created in .*digits", 120)
        url = wait_for(r"Airflow UI\s+(http://127\.0\.0\.1:\d+)", 240).group(1)
        password = wait_for(r"login\s+admin / (\S+)", 10).group(1)
        stored = json.loads(
            (tmp_path / "airflow" / "simple_auth_manager_passwords.json").read_text()
        )
        assert stored == {"admin": password}
        assert url.startswith("http://127.0.0.1:")
        wait_for(r"lake_ingest .*: success", 300)
        wait_for(r"version digits_v\d{8}_[0-9a-f]{8}: 1797 samples", 60)
        wait_for(r"train .*\(by an asset event\): success", 600)
        wait_for(r"run train-.*: succeeded", 60)
        info = json.loads((tmp_path / "airflow" / "devstack.json").read_text())
        pids = [c["pid"] for c in info["components"]]
        tree = set(pids)
        for pid in pids:
            tree.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        stop = subprocess.run(
            [sys.executable, "-m", "pipeline.orchestration.devstack", "stop"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert up.wait(timeout=60) == 0
        reader.join(timeout=10)
        assert "stopped" in "".join(lines)
        for pid in tree:
            try:
                assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
            except psutil.NoSuchProcess:
                pass
        assert not (tmp_path / "airflow" / "devstack.json").exists()
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGTERM)
            up.wait(timeout=60)

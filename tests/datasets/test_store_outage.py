"""The metadata store down, or its connection killed in the middle of a build: every command
exits 1 with one line naming the store (password masked) and what to retry, and nothing is
half-published. Real subprocesses, a real closed port, a real PostgreSQL backend killed with
pg_terminate_backend."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.datasets.conftest import image_lake


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(home: Path, db_url: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(home / "lake"),
        "DATA_ROOT": str(home / "data"),
        "SETTLE_SECONDS": "0",
        "METADATA_DB_URL": db_url,
        "COLUMNS": "80",
        **extra,
    }


def _laketrain(home: Path, db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        env=_env(home, db_url),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _assert_one_line_store_error(out: subprocess.CompletedProcess[str], retry: str) -> str:
    assert out.returncode == 1, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    line = lines[0]
    assert line.startswith("error: metadata store ") and "Traceback" not in out.stderr
    assert f"retry `{retry}`" in line, line
    return line


@pytest.mark.parametrize("command", [["versions"], ["build", "pets", "--workers", "1"]])
def test_an_unreachable_store_is_one_line_without_the_password(lt_env, command):
    image_lake(lt_env, per_class=1)
    port = _free_port()
    url = f"postgresql+psycopg://laketrain:s3cret-pw@127.0.0.1:{port}/laketrain"
    out = _laketrain(lt_env, url, *command)
    line = _assert_one_line_store_error(out, "laketrain " + " ".join(command))
    assert f"laketrain:***@127.0.0.1:{port}/laketrain" in line
    assert "s3cret-pw" not in out.stderr + out.stdout


def test_a_connection_killed_mid_build_is_one_line_and_publishes_nothing(lt_env, pg_url):
    import psycopg

    from pipeline.datasets.queries import list_versions
    from pipeline.metadata.store import MetadataStore
    from tests.conftest import _libpq

    image_lake(lt_env, per_class=3)
    build = ["build", "pets", "--workers", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *build],
        env=_env(
            lt_env,
            pg_url,
            LAKETRAIN_TEST_PAUSE_AT="commit_renamed",  # the version folder is renamed into
            LAKETRAIN_TEST_PAUSE_SECONDS="8",  # place; the store's transaction is open
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.strip() == "LAKETRAIN_PAUSED_AT commit_renamed":
                break
        else:
            raise AssertionError(f"the build never paused: {''.join(seen)}")
        with psycopg.connect(_libpq(pg_url), autocommit=True) as killer:
            killed = killer.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()[0]
        assert killed >= 1
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    _assert_one_line_store_error(result, "laketrain " + " ".join(build))
    assert "terminating connection" in err or "server closed the connection" in err

    store = MetadataStore(pg_url)
    try:
        assert list_versions("pets", store=store) == []  # nothing half-published
        rerun = _laketrain(lt_env, pg_url, *build)
        assert rerun.returncode == 0, rerun.stderr
        assert [v["samples"] for v in list_versions("pets", store=store)] == [6]
    finally:
        store.dispose()

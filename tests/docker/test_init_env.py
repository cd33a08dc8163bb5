"""docker/init_env.py: `.env` with every variable, absolute host paths, fresh secrets, owner-only."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

from tests.docker.helpers import DOCKER_DIR, ENV_EXAMPLE, read_env_file

SCRIPT = DOCKER_DIR / "init_env.py"


def _run(tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--output",
            str(tmp / ".env"),
            "--data-root",
            str(tmp / "d"),
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
    )


def test_writes_every_variable_with_a_value(tmp_path: Path) -> None:
    _run(tmp_path)
    env = read_env_file(tmp_path / ".env")
    assert set(env) == set(read_env_file(ENV_EXAMPLE))
    assert [k for k, v in env.items() if not v] == []
    assert env["LAKETRAIN_HOST_DATA_ROOT"] == str((tmp_path / "d").resolve())
    assert env["LAKETRAIN_LAKE_BUCKET"] == "laketrain-lake"  # the lake is a MinIO bucket
    assert (tmp_path / "d").is_dir()
    assert len(env["AIRFLOW_JWT_SECRET"].encode()) >= 64
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
    # comments stay, so .env can be read beside .env.example
    assert (tmp_path / ".env").read_text().count("#") == ENV_EXAMPLE.read_text().count("#")


def test_secrets_are_fresh_and_url_safe(tmp_path: Path) -> None:
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        _run(tmp_path / run)
    a, b = read_env_file(tmp_path / "a" / ".env"), read_env_file(tmp_path / "b" / ".env")
    secrets = [k for k in a if any(w in k for w in ("PASSWORD", "SECRET", "FERNET"))]
    assert len(secrets) >= 6
    for key in secrets:
        assert a[key] != b[key], key
        assert all(c.isalnum() or c in "-_=" for c in a[key]), f"{key} would need escaping in a URL"
    assert len({a[k] for k in secrets}) == len(secrets), "two secrets share a value"


def test_never_overwrites_an_existing_env_without_force(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("POSTGRES_PASSWORD=mine\n")
    out = _run(tmp_path)
    assert "exists" in out.stdout
    assert (tmp_path / ".env").read_text() == "POSTGRES_PASSWORD=mine\n"
    _run(tmp_path, "--force")
    assert read_env_file(tmp_path / ".env")["POSTGRES_PASSWORD"] != "mine"
    assert not list(tmp_path.glob("*.tmp"))


def test_prints_no_secret(tmp_path: Path) -> None:
    out = _run(tmp_path)
    env = read_env_file(tmp_path / ".env")
    for key in (
        "POSTGRES_PASSWORD",
        "AIRFLOW_JWT_SECRET",
        "MINIO_ROOT_PASSWORD",
        "AIRFLOW_ADMIN_PASSWORD",
    ):
        assert env[key] not in out.stdout + out.stderr

"""docker/postgres/10-laketrain-metadata.sh, run for real against the local PostgreSQL the way
the postgres image runs it: it creates the metadata store's role and database, which the
store's own migrations (what airflow-init's `laketrain db upgrade` runs) then fill."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import PG_ADMIN_URL, _libpq, _pg_available

SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "postgres" / "10-laketrain-metadata.sh"


@pytest.fixture
def names():
    if not _pg_available() or not shutil.which("psql"):
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL (and psql) must be available in CI")
        pytest.skip("PostgreSQL or psql not available")
    import psycopg

    tag = uuid.uuid4().hex[:10]
    db, user = f"lt_meta_{tag}", f"lt_user_{tag}"
    yield db, user
    with psycopg.connect(_libpq(PG_ADMIN_URL), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        conn.execute(f'DROP ROLE IF EXISTS "{user}"')


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    from urllib.parse import urlsplit

    admin = urlsplit(_libpq(PG_ADMIN_URL))
    base = {
        "PATH": os.environ["PATH"],
        "PGHOST": admin.hostname or "127.0.0.1",
        "PGPORT": str(admin.port or 5432),
        "POSTGRES_USER": admin.username or "postgres",
        "POSTGRES_DB": admin.path.lstrip("/") or "postgres",
    }
    return subprocess.run(
        ["bash", str(SCRIPT)], env={**base, **env}, capture_output=True, text=True
    )


def test_creates_the_metadata_database_that_migrations_then_fill(names) -> None:
    import psycopg
    from sqlalchemy import inspect

    from pipeline.metadata.store import current_revision, head_revision, make_engine, upgrade

    db, user = names
    password = "pw'with\"quotes;--"
    out = _run(
        {"LAKETRAIN_DB_NAME": db, "LAKETRAIN_DB_USER": user, "LAKETRAIN_DB_PASSWORD": password}
    )
    assert out.returncode == 0, out.stderr
    assert password not in out.stdout + out.stderr
    with psycopg.connect(_libpq(PG_ADMIN_URL), autocommit=True) as conn:
        owner = conn.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", (db,)
        ).fetchone()
        assert owner == (user,)
        assert conn.execute(
            "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (user,)
        ).fetchone() == (True,)
    admin_host = PG_ADMIN_URL.split("@", 1)[1].rsplit("/", 1)[0]
    engine = make_engine(f"postgresql+psycopg://{user}@{admin_host}/{db}")
    try:
        upgrade(engine)  # as the new role: it owns its database, so it can create the tables
        assert current_revision(engine) == head_revision()
        tables = set(inspect(engine).get_table_names())
        assert {"ledger_files", "dataset_versions"} <= tables, tables
    finally:
        engine.dispose()


def test_a_missing_variable_is_named(names) -> None:
    db, _ = names
    out = _run({"LAKETRAIN_DB_NAME": db, "LAKETRAIN_DB_USER": "x"})
    assert out.returncode != 0
    assert "LAKETRAIN_DB_PASSWORD" in out.stderr

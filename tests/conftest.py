"""Shared fixtures: an isolated settings environment per test, and metadata stores on both
backends (SQLite and the local PostgreSQL), each in a database created for the test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# The S3 fixtures (a shared real moto_server, a private one a test may kill) for every folder.
from tests.s3_fixtures import _moto_process, moto_server, private_moto_server  # noqa: F401

PG_ADMIN_URL = os.environ.get(
    "LAKETRAIN_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(_libpq(PG_ADMIN_URL), connect_timeout=3):
            return True
    except Exception:
        return False


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture
def lt_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point every setting at a fresh folder under tmp_path; return that folder."""
    from pipeline.settings import get_settings

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("LAKETRAIN_HOME", str(home))
    monkeypatch.setenv("LAKE_DIR", str(home / "lake"))
    monkeypatch.setenv("DATA_ROOT", str(home / "data"))
    monkeypatch.setenv("CHECKPOINT_URL", (home / "objects").as_uri())
    monkeypatch.setenv("SETTLE_SECONDS", "0")
    monkeypatch.delenv("METADATA_DB_URL", raising=False)
    (home / "lake").mkdir()
    get_settings.cache_clear()
    yield home
    get_settings.cache_clear()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test, dropped afterwards."""
    if not _pg_available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not reachable on 127.0.0.1:5432")
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    import psycopg

    name = f"lt_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(PG_ADMIN_URL), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    yield url
    from pipeline.metadata.store import forget_store

    forget_store(url)
    with psycopg.connect(_libpq(PG_ADMIN_URL), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The metadata-store URL on each backend, in a database of this test's own."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'metadata.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(db_url: str, lt_env: Path, monkeypatch: pytest.MonkeyPatch):
    """A migrated MetadataStore on each backend, also set as the process default."""
    from pipeline.metadata.store import MetadataStore
    from pipeline.settings import get_settings

    monkeypatch.setenv("METADATA_DB_URL", db_url)
    get_settings.cache_clear()
    s = MetadataStore(db_url)
    yield s
    s.dispose()

"""Fixtures for the scale-out test: fresh PostgreSQL databases and a dedicated Redis database."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import _PG_POOL, PG_ADMIN_URL, _libpq, _pg_available

# A Redis database number of its own, so the test never touches what others keep in db 0.
REDIS_URL = os.environ.get("LAKETRAIN_TEST_REDIS", "redis://127.0.0.1:6379/7")


def _need(ok: bool, what: str) -> None:
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"{what} is not reachable")
        pytest.skip(f"{what} is not reachable")


@pytest.fixture
def pg_databases() -> Iterator[dict[str, str]]:
    """Two fresh databases: `airflow` (Airflow's own) and `metadata` (the laketrain store)."""
    _need(_pg_available(), "PostgreSQL on 127.0.0.1:5432")
    import psycopg

    tag = uuid.uuid4().hex[:10]
    names = {"airflow": f"lt_scale_af_{tag}", "metadata": f"lt_scale_md_{tag}"}
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    with psycopg.connect(_libpq(PG_ADMIN_URL), autocommit=True) as conn:
        for name in names.values():
            conn.execute(f'CREATE DATABASE "{name}"')
    yield {key: f"{base}/{name}" for key, name in names.items()}
    # Dropped on the test process's background dropper (tests/pg_pool.py): each DROP forces a
    # server checkpoint, 14 s for the two on the shared disk, spent overlapping the next test.
    for name in names.values():
        _PG_POOL.give_back(name)


@pytest.fixture
def redis_url() -> Iterator[str]:
    """The broker URL, its database emptied before and after (only this database number)."""
    try:
        import redis

        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
        client.flushdb()
    except Exception:
        _need(False, f"Redis at {REDIS_URL}")
    yield REDIS_URL
    client.flushdb()
    client.close()

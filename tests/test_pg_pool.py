"""The test-database pool (tests/pg_pool.py): a reused database is indistinguishable from a
fresh copy, and one it cannot make so is dropped, never handed out again."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from tests.conftest import _admin_execute, _connect_to, _pg_db_url, _require_pg
from tests.pg_pool import PgDatabasePool

pytestmark = pytest.mark.postgres


def _exists(name: str) -> bool:
    with _connect_to("postgres") as conn:
        return bool(
            conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        )


@pytest.fixture
def pool_and_template():
    """A pool of its own and a migrated template of its own (dropped afterwards)."""
    _require_pg()
    from pipeline.metadata.store import MetadataStore

    template = f"lt_test_{uuid.uuid4().hex[:12]}"
    _admin_execute(f'CREATE DATABASE "{template}"')
    MetadataStore(_pg_db_url(template)).dispose()
    pool = PgDatabasePool(_admin_execute, _connect_to)
    yield pool, template
    pool.forget_template(template)
    pool.close()
    _admin_execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')


def _fresh_state(name: str) -> tuple[list, list, int]:
    """(alembic rows, row counts of every table but alembic_version, next scans id)."""
    with _connect_to(name) as conn:
        alembic = conn.execute("SELECT * FROM alembic_version").fetchall()
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                "AND tablename <> 'alembic_version' ORDER BY 1"
            ).fetchall()
        ]
        counts = [(t, conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in tables]
        next_id = conn.execute("SELECT nextval(pg_get_serial_sequence('scans', 'id'))").fetchone()[
            0
        ]
    return alembic, counts, next_id


def test_a_used_copy_comes_back_empty_with_its_schema_and_sequences_restarted(pool_and_template):
    pool, template = pool_and_template
    first = pool.take(template)
    fresh = _fresh_state(first)
    with _connect_to(first) as conn:  # what a test leaves behind: rows, a used sequence,
        conn.execute(
            "INSERT INTO scans (lake, dataset, started_at) "
            "SELECT 'lake', 'd', now() FROM generate_series(1, 5)"
        )
        left_open = _connect_to(first)  # and a connection it forgot to close
        left_open.execute("SELECT 1")
    assert _fresh_state(first) != fresh
    pool.give_back(first)
    again = pool.take(template)
    assert again == first  # reused, not a new CREATE DATABASE
    assert _fresh_state(again) == fresh
    with pytest.raises(psycopg.OperationalError):  # terminated, not left holding locks
        left_open.execute("SELECT 1")


def test_a_copy_whose_schema_changed_is_dropped_and_never_handed_out(pool_and_template):
    pool, template = pool_and_template
    first = pool.take(template)
    with _connect_to(first) as conn:
        conn.execute("ALTER TABLE scans ADD COLUMN extra integer")
    pool.give_back(first)
    second = pool.take(template)
    assert second != first
    pool.drain()
    assert not _exists(first)
    assert all(count == 0 for _, count in _fresh_state(second)[1])
    with _connect_to(second) as conn:
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'scans'"
        ).fetchall()
    assert ("extra",) not in columns


def test_an_empty_database_is_emptied_again_after_a_migration(pool_and_template):
    from pipeline.metadata.store import MetadataStore

    pool, _ = pool_and_template
    empty = pool.take(None)
    MetadataStore(_pg_db_url(empty)).dispose()  # what the migration tests do to it
    with _connect_to(empty) as conn:
        conn.execute("CREATE SCHEMA scratch")
    pool.give_back(empty)
    again = pool.take(None)
    assert again == empty
    with _connect_to(again) as conn:
        tables = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        schemas = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
            "AND nspname <> 'information_schema'"
        ).fetchall()
    assert tables == [] and schemas == [("public",)]


def test_close_drops_every_database_the_pool_still_holds_or_handed_out(pool_and_template):
    pool, template = pool_and_template
    names = [pool.take(template), pool.take(None)]
    for name in names:
        pool.give_back(name)
    names.append(pool.take(template))  # taken and never given back: a test that failed early
    pool.close()
    assert not any(_exists(n) for n in names)

"""Migrations and the store's basics on both backends, each in a database of its own."""

from __future__ import annotations

from sqlalchemy import inspect

from pipeline.metadata.store import (
    MetadataStore,
    current_revision,
    head_revision,
    make_engine,
    upgrade,
)


def test_migrations_apply_to_an_empty_database_and_back(db_url):
    engine = make_engine(db_url)
    assert current_revision(engine) is None
    upgrade(engine, "head")
    assert current_revision(engine) == head_revision()
    tables = set(inspect(engine).get_table_names())
    assert {"ledger_files", "scans", "lake_locks", "alembic_version"} <= tables

    from alembic import command

    from pipeline.metadata.store import alembic_config

    with engine.begin() as conn:
        cfg = alembic_config(db_url)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    upgrade(engine, "head")
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_the_store_migrates_itself_on_first_use(db_url):
    store = MetadataStore(db_url)
    assert current_revision(store.engine) == head_revision()
    MetadataStore(db_url).dispose()  # a second open finds it current and changes nothing
    store.dispose()


def test_sqlite_runs_in_wal_mode(tmp_path):
    store = MetadataStore(f"sqlite:///{tmp_path / 'm.db'}")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    store.dispose()


def test_every_model_is_covered_by_the_migrations(db_url):
    """The ORM and the migrations agree: every mapped table and column exists after upgrade."""
    from pipeline.metadata.models import Base

    store = MetadataStore(db_url)
    insp = inspect(store.engine)
    for table in Base.metadata.sorted_tables:
        columns = {c["name"] for c in insp.get_columns(table.name)}
        assert {c.name for c in table.columns} <= columns, table.name
    store.dispose()


_OPEN_AT_ONCE = """
import sys, time
from pipeline.metadata.store import MetadataStore, current_revision, head_revision
start = float(sys.argv[2])
while time.time() < start:  # every process opens the fresh store at the same instant
    time.sleep(0.001)
store = MetadataStore(sys.argv[1])
assert current_revision(store.engine) == head_revision()
"""


def test_processes_opening_a_fresh_store_at_once_migrate_it_once(db_url):
    """First use from several processes at once (a build's worker pool, two CLI commands on a
    new machine): one migrates, the others wait and find it current; none fails."""
    import subprocess
    import sys
    import time

    start = time.time() + 3.0  # after every interpreter has started and imported
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_AT_ONCE, db_url, str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, "\n".join(outputs)
    assert current_revision(make_engine(db_url)) == head_revision()


# ---- outages: one clear error naming the store, never its password ---------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_store_is_store_unavailable_naming_it_without_the_password():
    import pytest

    from pipeline.metadata.store import StoreUnavailable

    port = _free_port()  # closed again: nothing listens there
    with pytest.raises(StoreUnavailable) as info:
        MetadataStore(f"postgresql+psycopg://bob:s3cret@127.0.0.1:{port}/lt")
    text = str(info.value)
    assert f"bob:***@127.0.0.1:{port}/lt" in text and "s3cret" not in text
    assert "Connection refused" in text and "\n" not in text


def test_a_host_that_never_answers_fails_after_the_connect_timeout(monkeypatch):
    """A server that accepts TCP but never speaks would hang libpq for good without a
    connect timeout; with one, opening the store fails with StoreUnavailable."""
    import socket
    import threading

    from pipeline.metadata import store as store_mod

    monkeypatch.setattr(store_mod, "CONNECT_TIMEOUT_S", 2)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes handshakes; nobody ever answers
    port = silent.getsockname()[1]
    outcome: list[BaseException | None] = []

    def open_it() -> None:
        try:
            MetadataStore(f"postgresql+psycopg://bob:pw@127.0.0.1:{port}/lt")
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    t = threading.Thread(target=open_it, daemon=True)
    t.start()
    t.join(120)
    silent.close()
    assert outcome, "opening a store on a silent host never returned"
    assert isinstance(outcome[0], store_mod.StoreUnavailable), outcome[0]


def test_a_connection_killed_mid_session_is_store_unavailable_and_the_store_recovers(pg_url):
    import psycopg
    import pytest
    from sqlalchemy import text

    from pipeline.metadata.store import StoreUnavailable
    from tests.conftest import _libpq

    store = MetadataStore(pg_url)
    with pytest.raises(StoreUnavailable) as info:
        with store.session() as session:
            pid = session.execute(text("SELECT pg_backend_pid()")).scalar()
            with psycopg.connect(_libpq(pg_url), autocommit=True) as killer:
                killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            session.execute(text("SELECT 1"))
    assert "terminating connection" in str(info.value)
    with store.session() as session:  # the next session reconnects
        assert session.execute(text("SELECT 2")).scalar() == 2
    store.dispose()


def test_the_head_is_read_off_the_migration_files_as_alembic_reads_it():
    from alembic.script import ScriptDirectory

    from pipeline.metadata.fastpath import migration_revisions
    from pipeline.metadata.store import alembic_config

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert [migration_revisions().head] == script.get_heads()
    assert migration_revisions().known == {r.revision for r in script.walk_revisions()}


def test_migration_files_with_two_heads_are_an_error(tmp_path):
    import pytest

    from pipeline.metadata.fastpath import migration_revisions

    for name, down in (("a", None), ("b", "a"), ("c", "a")):
        (tmp_path / f"{name}.py").write_text(
            f'revision = "{name}"\ndown_revision = {down!r}\n', encoding="utf-8"
        )
    with pytest.raises(RuntimeError, match="2 heads"):
        migration_revisions(tmp_path)


def test_a_store_behind_head_is_upgraded_on_open(db_url):
    engine = make_engine(db_url)
    upgrade(engine, "0002_datasets")
    MetadataStore(db_url).dispose()
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_a_store_from_a_newer_laketrain_is_refused_and_left_as_it_is(db_url, lt_env):
    import os
    import subprocess
    import sys

    import pytest

    from pipeline.metadata.fastpath import StoreVersionError

    engine = make_engine(db_url)
    upgrade(engine, "head")
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    with pytest.raises(StoreVersionError, match="9999_from_the_future.*newer laketrain"):
        MetadataStore(db_url)
    # The command line says so in one line, whichever path opens the store.
    env = {**os.environ, "METADATA_DB_URL": db_url, "LAKE_DIR": str(lt_env / "lake")}
    for args in (["scan"], ["files"]):
        out = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 1, out.stderr
        assert "newer laketrain" in out.stderr and "Traceback" not in out.stderr
    assert current_revision(engine) == "9999_from_the_future"
    engine.dispose()


def test_switching_to_wal_is_retried_while_another_process_holds_the_lock():
    """SQLite answers "database is locked" at once, without its busy handler, when two
    processes switch a fresh file to WAL at the same instant (a CI run failed on it): the
    switch is retried until the busy timeout, and any other error is raised at once."""
    import sqlite3

    import pytest

    from pipeline.metadata.store import _retry_while_locked

    answers = [sqlite3.OperationalError("database is locked")] * 3 + [None]
    calls = []

    def switch():
        calls.append(1)
        answer = answers[len(calls) - 1]
        if answer is not None:
            raise answer

    _retry_while_locked(switch, timeout_s=5.0)
    assert len(calls) == 4

    def locked():
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _retry_while_locked(locked, timeout_s=0.05)  # gives up at the deadline

    def broken():
        calls.append(1)
        raise sqlite3.OperationalError("disk I/O error")

    calls.clear()
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _retry_while_locked(broken, timeout_s=5.0)
    assert len(calls) == 1  # not retried

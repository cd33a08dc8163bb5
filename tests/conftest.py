"""Shared fixtures: an isolated settings environment per test, and metadata stores on both
backends (SQLite and the local PostgreSQL), each in a database created for the test.

A ``store`` starts as a copy of a database migrated once per test process (PostgreSQL:
``CREATE DATABASE ... TEMPLATE``; SQLite: a copied file): running every migration for each of
~470 store tests cost minutes of the suite. ``pg_url`` alone still gives an EMPTY database.

Under pytest-xdist (``make test`` runs ``-n 3 --dist loadfile``) each test module is one unit
of work, so a module's (or the UI package's) expensive fixture is built by one worker only;
see ``pytest_collection_modifyitems`` below and docs/testing.md."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# The S3 fixtures (a shared real moto_server, a private one a test may kill) for every folder.
from tests.pg_pool import PgDatabasePool
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


def _admin_execute(sql: str) -> None:
    import psycopg

    with psycopg.connect(_libpq(PG_ADMIN_URL), autocommit=True) as conn:
        conn.execute(sql)


# Per test process: migrated databases emptied and reused, the rest dropped behind (tests/pg_pool.py).
def _connect_to(name: str):
    import psycopg

    return psycopg.connect(_libpq(_pg_db_url(name)), autocommit=True)


_PG_POOL = PgDatabasePool(_admin_execute, _connect_to)


def _new_pg_database(template: str | None = None) -> str:
    """A uniquely named database no test has used (a copy of ``template`` when given)."""
    return _PG_POOL.take(template)


def _drop_pg_database(name: str) -> None:
    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _pg_db_url(name: str) -> str:
    return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def _require_pg() -> None:
    if not _pg_available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not reachable on 127.0.0.1:5432")
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")


@pytest.fixture(scope="session")
def _pg_migrated_template() -> Iterator[str]:
    """A PostgreSQL database migrated to head once per test process (uuid-named, so xdist
    workers and other engineers' runs never share one); no connection stays open on it, as
    CREATE DATABASE ... TEMPLATE requires."""
    _require_pg()
    from pipeline.metadata.store import MetadataStore

    name = f"lt_test_{uuid.uuid4().hex[:12]}"
    _admin_execute(f'CREATE DATABASE "{name}"')
    MetadataStore(_pg_db_url(name)).dispose()
    yield name
    _PG_POOL.forget_template(name)  # its ready copies first: no copy may be in the making
    _drop_pg_database(name)


@pytest.fixture(scope="session")
def _sqlite_migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite metadata file migrated to head once per test process (closed: no WAL left)."""
    from pipeline.metadata.store import MetadataStore

    path = tmp_path_factory.mktemp("store_template") / "metadata.db"
    MetadataStore(f"sqlite:///{path}").dispose()
    return path


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, EMPTY PostgreSQL database for this test, dropped afterwards."""
    yield from _pg_database(None)


def _pg_database(template: str | None) -> Iterator[str]:
    _require_pg()
    name = _new_pg_database(template)
    url = _pg_db_url(name)
    yield url
    from pipeline.metadata.store import forget_store

    forget_store(url)
    _PG_POOL.give_back(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The metadata-store URL on each backend, in a database of this test's own. When the test
    also takes ``store`` (which migrates the database to head before the test sees it), the
    database starts as a copy of a migrated template instead: the same state, without running
    every migration again."""
    migrated = "store" in request.fixturenames
    if request.param == "sqlite":
        path = tmp_path / "metadata.db"
        if migrated:
            shutil.copyfile(request.getfixturevalue("_sqlite_migrated_template"), path)
        yield f"sqlite:///{path}"
    elif migrated:
        yield from _pg_database(request.getfixturevalue("_pg_migrated_template"))
    else:
        yield request.getfixturevalue("pg_url")


@pytest.fixture(scope="session")
def airflow_db_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Airflow (SQLite) database migrated once per test process; the end-to-end and UI
    stacks start on copies of it (tests/orchestration/airflow_db.py says why)."""
    from tests.orchestration.airflow_db import migrate_template

    return migrate_template(tmp_path_factory.mktemp("airflow_template"))


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


# --- pytest-xdist: which tests share a worker, and in what order the work is handed out ----
#
# `make test` runs `-n 3 --dist loadfile --no-loadscope-reorder`: each test module is one unit
# of work, so a module-scoped fixture (an Airflow stack, a dag.test() subprocess) is built by
# one worker only. (xdist's own `loadgroup` cannot be used: on pytest 9.2 its xdist_group
# marks no longer reach the scheduler, pytest-dev/pytest-xdist#1386.)

# Package-scoped fixtures that start services: the modules naming one form one unit of work,
# so the service starts once and not once per worker.
_SHARED_SERVICES = {"tests/ui/": "ui_stack"}


def _shared_scope(module: str, root: Path) -> str | None:
    for folder, fixture in _SHARED_SERVICES.items():
        if module.startswith(folder):
            try:
                if fixture in (root / module).read_text(errors="replace"):
                    return f"{folder}({fixture})"
            except OSError:
                return None
    return None


@pytest.hookimpl(optionalhook=True)  # a venv without pytest-xdist still runs the suite
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # -> scheduler | None
    """``--dist loadfile``, with the modules sharing a package-scoped service in one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    root, scopes = config.rootpath, {}

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module not in scopes:
                scopes[module] = _shared_scope(module, root) or module
            return scopes[module]

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker: the modules holding slow tests first (collection order otherwise,
    the same in every worker), so that a 5-minute end-to-end module is not handed out last
    while the other worker sits idle. Without xdist the order is unchanged."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    slow_first = sorted(
        modules.values(), key=lambda m: not any(i.get_closest_marker("slow") for i in m)
    )  # a stable sort: collection order within each half
    items[:] = [item for module in slow_first for item in module]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Drop the databases the pool still holds: an xdist worker may leave without atexit."""
    _PG_POOL.close()

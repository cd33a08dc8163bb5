"""Fixtures of the UI tests: a real Airflow stack serving the plugin over real built versions,
and a headless Debian Chromium driven by Playwright."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ui.airflow_stack import REPO, AirflowStack
from tests.ui.lakedata import Built, build_two_versions, lake_env

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO / "tests" / "artifacts"


@dataclass
class UIStack:
    stack: AirflowStack
    built: Built
    store_url: str
    home: Path


def _metadata_url(home: Path) -> tuple[str, str | None]:
    """PostgreSQL (a database of its own) when the local server runs, else SQLite."""
    from tests.conftest import PG_ADMIN_URL, _libpq, _pg_available

    if not _pg_available():
        return f"sqlite:///{home / 'metadata.db'}", None
    import psycopg

    name = f"lt_ui_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(PG_ADMIN_URL), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}", name


@pytest.fixture(scope="package")
def ui_stack(
    tmp_path_factory: pytest.TempPathFactory, airflow_db_template: Path
) -> Iterator[UIStack]:
    """Airflow (api-server with the plugin, scheduler, dag-processor, triggerer) over two
    versions of digits built by the real pipeline."""
    from pipeline.metadata.store import MetadataStore
    from pipeline.settings import get_settings

    home = tmp_path_factory.mktemp("uistack")
    (home / "lake").mkdir()
    url, pg_name = _metadata_url(home)
    env = {**lake_env(home), "METADATA_DB_URL": url}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        get_settings.cache_clear()
        store = MetadataStore(url)
        built = build_two_versions(home / "lake", store)
        store.dispose()
    get_settings.cache_clear()
    stack = AirflowStack(home, env, db_template=airflow_db_template)
    try:
        # api-server, scheduler, dag-processor, triggerer: started together, the journey needs all.
        stack.start()
        yield UIStack(stack, built, url, home)
    finally:
        stack.stop()
        if pg_name:
            import psycopg

            from tests.conftest import PG_ADMIN_URL, _libpq

            with psycopg.connect(_libpq(PG_ADMIN_URL), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')


@pytest.fixture(scope="package")
def browser():
    """Debian's Chromium, headless; Playwright never downloads a browser here."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield b
        b.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS

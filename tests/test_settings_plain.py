"""The settings object without pydantic: the same checks, a frozen value, a masked repr, and
an import that stays cheap (it is on every command's start-up)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from pipeline.settings import Settings, SettingsError, load_settings


def test_numbers_are_read_as_the_pydantic_model_read_them(monkeypatch):
    monkeypatch.setenv("HASH_WORKERS", " 4.0 ")
    monkeypatch.setenv("SETTLE_SECONDS", "1e1")
    monkeypatch.setenv("laketrain_poll_seconds", "0.5")  # matched without regard to case
    s = load_settings()
    assert (s.hash_workers, s.settle_seconds, s.poll_seconds) == (4, 10.0, 0.5)
    assert load_settings(shard_mb="7", no_such_setting=1).shard_mb == 7


@pytest.mark.parametrize(
    ("var", "value", "why"),
    [
        ("SETTLE_SECONDS", "inf", "finite"),
        ("LAKETRAIN_POLL_SECONDS", "nan", "finite"),
        ("HASH_WORKERS", "2.5", "valid integer"),
        ("HASH_WORKERS", "257", "less than or equal to 256"),
        ("LAKETRAIN_CACHE_MB", "", "valid integer"),
    ],
)
def test_a_bad_number_names_the_variable_and_the_bound(monkeypatch, var, value, why):
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError, match=f"{var}='{value}': .*{why}"):
        load_settings()


def test_every_problem_is_reported_at_once(monkeypatch):
    monkeypatch.setenv("SHARD_FILES", "0")
    monkeypatch.setenv("CHECKPOINT_URL", "ftp://x")
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert "SHARD_FILES='0'" in str(err.value) and "CHECKPOINT_URL='ftp://x'" in str(err.value)


def test_settings_are_frozen_and_never_print_a_password(monkeypatch):
    monkeypatch.setenv("METADATA_DB_URL", "postgresql+psycopg://lt:hunter2-pw@db/lt")
    s = load_settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.hash_workers = 3  # type: ignore[misc]
    assert s.database_url.endswith("hunter2-pw@db/lt")  # the store still gets it
    assert "hunter2-pw" not in repr(s) and "lt:***@db" in repr(s)
    with pytest.raises(SettingsError, match="METADATA_DB_URL"):
        Settings(metadata_db_url="no url")  # made directly, still checked


def test_importing_the_settings_loads_no_pydantic():
    probe = "import sys, pipeline.settings; print(sorted(m for m in sys.modules if m.startswith('pydantic')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

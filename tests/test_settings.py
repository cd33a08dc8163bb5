"""Settings come from the environment; a bad value fails at start naming the variable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.settings import SettingsError, load_settings


def test_defaults_live_under_var(monkeypatch, tmp_path):
    for name in (
        "LAKE_DIR",
        "DATA_ROOT",
        "METADATA_DB_URL",
        "CHECKPOINT_URL",
        "SETTLE_SECONDS",
        "HASH_WORKERS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LAKETRAIN_HOME", str(tmp_path))
    s = load_settings()
    assert s.lake_dir == tmp_path / "var" / "lake"
    assert s.data_root == tmp_path / "var" / "data"
    assert s.database_url == f"sqlite:///{tmp_path / 'var' / 'data' / 'metadata.db'}"
    assert s.checkpoint_url == (tmp_path / "var" / "objects").as_uri()
    assert s.hash_workers >= 1 and s.settle_seconds >= 0


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("SETTLE_SECONDS", "soon"),
        ("SETTLE_SECONDS", "-1"),
        ("HASH_WORKERS", "0"),
        ("SHARD_FILES", "0"),
        ("SHARD_MB", "lots"),
        ("CHECKPOINT_URL", "ftp://x"),
        ("METADATA_DB_URL", "not a url"),
    ],
)
def test_an_invalid_value_names_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError, match=var):
        load_settings()


def test_the_cli_exits_with_the_variable_name(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "files"],
        env={"PATH": "/usr/bin:/bin", "HASH_WORKERS": "many", "LAKETRAIN_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "HASH_WORKERS" in out.stderr


@pytest.mark.parametrize(
    ("var", "value", "secret"),
    [
        ("METADATA_DB_URL", "laketrain:hunter2-db-pw@db:5432/lt", "hunter2-db-pw"),
        ("CHECKPOINT_URL", "ftp://laketrain:hunter2-ftp-pw@host/x", "hunter2-ftp-pw"),
        ("CHECKPOINT_URL", "s3://AKIAEXAMPLEKEY:wJalrSECRETKEY@bucket/x", "wJalrSECRETKEY"),
    ],
)
def test_the_settings_error_names_the_variable_without_its_password(
    monkeypatch, var, value, secret
):
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError) as err:
        load_settings()
    message = str(err.value)
    assert var in message and "***" in message
    assert secret not in message and "AKIAEXAMPLEKEY" not in message


def test_a_checkpoint_url_with_a_host_or_embedded_keys_is_refused(monkeypatch):
    monkeypatch.setenv("CHECKPOINT_URL", "file://etc/x")
    with pytest.raises(SettingsError, match=r"CHECKPOINT_URL.*names a host 'etc'"):
        load_settings()
    monkeypatch.setenv("CHECKPOINT_URL", "s3://KEY:SECRET@bucket")
    with pytest.raises(SettingsError, match="must not embed credentials"):
        load_settings()


@pytest.mark.parametrize("var", ["LAKE_DIR", "DATA_ROOT"])
def test_a_location_is_a_folder_or_an_s3_url_kept_as_a_string(monkeypatch, tmp_path, var):
    field = var.lower()
    monkeypatch.setenv(var, "s3://lake-bucket/team/")
    assert getattr(load_settings(), field) == "s3://lake-bucket/team"
    monkeypatch.setenv(var, str(tmp_path / "x"))
    assert getattr(load_settings(), field) == tmp_path / "x"
    monkeypatch.setenv(var, (tmp_path / "y").as_uri())
    assert getattr(load_settings(), field) == tmp_path / "y"
    for bad, why in [
        ("s3://", "needs a bucket"),
        ("s3://KEY:wJalrTOPSECRET@bucket/p", "must not embed credentials"),
        ("gs://bucket/p", "s3://bucket/prefix"),
    ]:
        monkeypatch.setenv(var, bad)
        with pytest.raises(SettingsError, match=f"{var}=.*{why}") as err:
            load_settings()
        assert "wJalrTOPSECRET" not in str(err.value)


def test_an_s3_data_root_keeps_the_default_sqlite_store_local(monkeypatch, tmp_path):
    monkeypatch.setenv("LAKETRAIN_HOME", str(tmp_path))
    monkeypatch.setenv("DATA_ROOT", "s3://data-bucket/p")
    monkeypatch.delenv("METADATA_DB_URL", raising=False)
    assert load_settings().database_url == f"sqlite:///{tmp_path / 'var' / 'data' / 'metadata.db'}"


def test_the_poll_interval_defaults_by_lake_kind(monkeypatch, tmp_path):
    monkeypatch.delenv("LAKETRAIN_POLL_SECONDS", raising=False)
    monkeypatch.setenv("LAKE_DIR", "s3://b/lake")
    assert load_settings().poll_seconds == 30.0
    monkeypatch.setenv("LAKE_DIR", str(tmp_path))
    assert load_settings().poll_seconds == 1.0
    monkeypatch.setenv("LAKETRAIN_POLL_SECONDS", "0")
    with pytest.raises(SettingsError, match="LAKETRAIN_POLL_SECONDS"):
        load_settings()

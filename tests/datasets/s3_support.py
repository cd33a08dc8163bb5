"""Helpers for the tests of an ``s3://`` DATA_ROOT: settings pointed at a moto bucket, with
no local data folder at all (the build's work root and the reader's cache live under
LAKETRAIN_CACHE_DIR, which the test names)."""

from __future__ import annotations

from pathlib import Path

import pytest


def use_s3_data_root(
    monkeypatch: pytest.MonkeyPatch, home: Path, bucket_url: str, prefix: str = "data"
) -> str:
    """Point DATA_ROOT at ``bucket_url/prefix`` and the cache at ``home/cache``; return the
    data root URL. The metadata store stays the test's (METADATA_DB_URL)."""
    from pipeline.settings import get_settings

    url = f"{bucket_url}/{prefix}"
    monkeypatch.setenv("DATA_ROOT", url)
    monkeypatch.setenv("LAKETRAIN_CACHE_DIR", str(home / "cache"))
    get_settings.cache_clear()
    return url

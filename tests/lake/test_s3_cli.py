"""`laketrain` against an s3:// lake, through the real entry point in a subprocess: the scan,
`versions` of a dataset only the lake has, `contains` by object URL, and a dead endpoint
reported in one line naming the URL (no traceback, no credentials)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lake.test_s3_scan import lake_on
from tests.s3_fixtures import TEST_SECRET_ACCESS_KEY


@pytest.fixture
def s3_lake(moto_server, lt_env, monkeypatch):
    yield from lake_on(moto_server, monkeypatch)


def laketrain(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {
        **os.environ,  # AWS_* and LAKE_DIR as the fixture set them
        "LAKETRAIN_HOME": str(home),
        "DATA_ROOT": str(home / "data"),
        **env,
    }
    full.pop("METADATA_DB_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_scan_versions_and_contains_on_an_s3_lake(s3_lake, lt_env):
    s3_lake.put("ds/cat/a.png", b"a")
    s3_lake.put("ds/dog/b.png", b"bb")
    s3_lake.put("ds//bad.png", b"bad")
    out = laketrain(lt_env, "scan", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert (summary["new"], summary["refused"]) == (2, 1)
    assert summary["refused_files"][0]["path"] == "ds//bad.png"

    out = laketrain(lt_env, "scan")
    assert out.returncode == 0, out.stderr
    assert f"of {s3_lake.url}" in out.stdout and "ds//bad.png: empty path segment" in out.stdout

    s3_lake.put("fresh/x/c.png", b"c")  # in the lake, never scanned: known by the listing
    out = laketrain(lt_env, "versions", "fresh", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
    assert laketrain(lt_env, "versions", "nosuch").returncode != 0

    out = laketrain(lt_env, "contains", f"{s3_lake.url}/ds/cat/a.png", "--json")
    assert out.returncode == 0, out.stderr
    out = laketrain(lt_env, "contains", "s3://other-bucket/ds/cat/a.png")
    assert out.returncode != 0 and "not inside the lake" in out.stderr + out.stdout


def test_a_dead_endpoint_is_one_line_naming_the_url(lt_env, monkeypatch):
    from tests.s3_fixtures import SilentServer, set_aws_env

    server = SilentServer()
    try:
        set_aws_env(monkeypatch, server.endpoint, lt_env)
        out = laketrain(
            lt_env,
            "scan",
            LAKE_DIR="s3://some-bucket/lake",
            LAKETRAIN_S3_ATTEMPTS="2",
            LAKETRAIN_S3_READ_TIMEOUT="0.5",
            LAKETRAIN_S3_CONNECT_TIMEOUT="0.5",
        )
    finally:
        server.close()
    assert out.returncode == 2  # the code of every bad-input error
    assert "Traceback" not in out.stderr
    assert "s3://some-bucket/lake" in out.stderr and "after 2 attempts" in out.stderr
    assert TEST_SECRET_ACCESS_KEY not in out.stderr + out.stdout


def test_sample_lake_refuses_to_write_to_an_s3_lake(lt_env):
    out = laketrain(lt_env, "sample-lake", LAKE_DIR="s3://some-bucket/lake")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "never writes to an S3 lake" in out.stderr and "aws s3 cp --recursive" in out.stderr

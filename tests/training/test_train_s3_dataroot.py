"""Training with DATA_ROOT on ``s3://`` and no local data folder at all: the digits version is
built into a moto bucket, then ``python -m training`` (no metadata store, its own empty
cache) trains on it, is preempted, resumes bitwise equal to a run on a local DATA_ROOT, and
the version is exported from S3."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.training.test_train_e2e import RESUME_CFG, assert_bitwise_equal, final_state, start
from tests.training.trainer_support import REPO, base_env, digits_home, run_trainer
from training.checkpoint import CheckpointManager

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return digits_home(tmp_path_factory)


@pytest.fixture(scope="module")
def reference(digits: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run on the LOCAL DATA_ROOT that the S3 run must match bitwise."""
    ckpt = tmp_path_factory.mktemp("ref_ckpt")
    proc = run_trainer(base_env(digits, ckpt, "reference", **RESUME_CFG))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"state": final_state(ckpt, "reference")}


@pytest.fixture
def s3_digits(digits: dict[str, Any], moto_server: Any, tmp_path: Path) -> dict[str, Any]:
    """The digits lake built into ``s3://<bucket>/data`` by its own store and work root."""
    from pipeline.settings import get_settings

    data_root = f"{moto_server.url}/data"
    env = {
        **digits["env"],
        "LAKETRAIN_HOME": str(tmp_path / "builder"),
        "DATA_ROOT": data_root,
        "LAKETRAIN_CACHE_DIR": str(tmp_path / "builder-cache"),
        "METADATA_DB_URL": f"sqlite:///{tmp_path / 'builder.db'}",
    }
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        get_settings.cache_clear()
        from pipeline.datasets.build import build

        version = build("digits", workers=1)
        get_settings.cache_clear()
    assert version is not None
    return {"data_root": data_root, "version_id": version.version_id}


def _trainer_env(digits, s3_digits, tmp_path: Path, ckpt: str, run_id: str) -> dict[str, str]:
    env = base_env(digits, ckpt, run_id, **RESUME_CFG)  # type: ignore[arg-type]
    env.update(
        {
            "DATA_ROOT": s3_digits["data_root"],
            "LAKETRAIN_HOME": str(tmp_path / "trainer"),
            "LAKETRAIN_CACHE_DIR": str(tmp_path / "trainer-cache"),
            "LAKE_DIR": str(tmp_path / "no-lake"),
        }
    )
    return env


def test_train_preempt_resume_on_an_s3_data_root_matches_the_local_run_bitwise(
    digits, reference, s3_digits, moto_server, tmp_path
):
    # The same lake and recipe: the same version id as the local DATA_ROOT's.
    assert s3_digits["version_id"] == digits["version_id"]
    ckpt = f"{moto_server.url}/checkpoints"
    env = _trainer_env(digits, s3_digits, tmp_path, ckpt, "s3-data")
    proc = start({**env, "TRAIN_TEST_PAUSE_AFTER_STEP": "10"})
    deadline = time.monotonic() + 240
    for line in proc.stdout:  # type: ignore[union-attr]
        if "TRAIN_TEST_PAUSED step=10" in line:
            break
        assert time.monotonic() < deadline
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75, proc.stderr.read()[-3000:]  # type: ignore[union-attr]
    again = run_trainer(env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from step 10" in again.stderr
    manager = CheckpointManager(ckpt, "s3-data")
    assert manager.read_result()["status"] == "succeeded"
    assert_bitwise_equal(manager.load_latest(), reference["state"])
    # Read through the cache: the segments are there, checked; no data folder anywhere.
    cache = tmp_path / "trainer-cache" / "objects" / moto_server.bucket / "data"
    assert list(cache.glob("segments/*/*/x.npy"))
    assert not (tmp_path / "trainer" / "var" / "data").exists()


def test_export_from_an_s3_data_root_without_a_store(digits, s3_digits, tmp_path):
    env = _trainer_env(digits, s3_digits, tmp_path, (tmp_path / "x").as_uri(), "export")
    env.pop("METADATA_DB_URL", None)
    dest = tmp_path / "exported"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "export", s3_digits["version_id"][:12], str(dest)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    summary = json.loads((dest / "export.json").read_text())
    assert summary["version_id"] == s3_digits["version_id"]
    # Byte for byte what the same version exported from the local DATA_ROOT holds.
    from pipeline.datasets.export import export_version
    from pipeline.datasets.reader import open_version

    local = open_version("digits", digits["version_id"], data_root=digits["home"] / "data")
    export_version(local, tmp_path / "local-export")
    for name in ("x.npy", "y.npy", "split.npy"):
        assert np.array_equal(np.load(dest / name), np.load(tmp_path / "local-export" / name))
    assert (dest / "metadata.jsonl").read_text() == (
        tmp_path / "local-export" / "metadata.jsonl"
    ).read_text()

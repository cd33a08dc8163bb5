"""Training from a version built off an s3:// lake needs nothing new: the digits sample lake is
uploaded to a moto bucket, built with LAKE_DIR=s3://..., and gives the same version (same
version_id) as the folder lake does; `python -m training` trains on it, is killed (SIGKILL)
after a mid-epoch checkpoint, resumes, and ends bitwise equal to an uninterrupted run; the
version is exported byte for byte as the folder lake's."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.training.test_train_e2e import (
    RESUME_CFG,
    assert_bitwise_equal,
    final_state,
    start,
    wait_paused_with_checkpoint,
)
from tests.training.trainer_support import REPO, base_env, digits_home, read_result, run_trainer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return digits_home(tmp_path_factory)


@pytest.fixture(scope="module")
def reference(digits: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run on the FOLDER lake's version that the resumed run must match."""
    ckpt = tmp_path_factory.mktemp("ref_ckpt")
    proc = run_trainer(base_env(digits, ckpt, "reference", **RESUME_CFG))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"state": final_state(ckpt, "reference")}


def _upload_lake(digits: dict[str, Any], moto_server: Any) -> int:
    from concurrent.futures import ThreadPoolExecutor

    lake = digits["home"] / "lake"
    files = sorted(p for p in (lake / "digits").rglob("*.png"))
    client, bucket = moto_server.client, moto_server.bucket
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda p: client.put_object(
                    Bucket=bucket, Key=f"lake/{p.relative_to(lake).as_posix()}", Body=p.read_bytes()
                ),
                files,
            )
        )
    return len(files)


def test_a_version_built_from_an_s3_lake_is_the_folder_lakes_trains_resumes_and_exports(
    digits, reference, moto_server, tmp_path: Path
):
    from pipeline.settings import get_settings

    n_files = _upload_lake(digits, moto_server)
    env = {
        **digits["env"],
        "LAKETRAIN_HOME": str(tmp_path / "home"),
        "LAKE_DIR": f"{moto_server.url}/lake",
        "DATA_ROOT": str(tmp_path / "data"),
        "METADATA_DB_URL": f"sqlite:///{tmp_path / 'meta.db'}",
    }
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        get_settings.cache_clear()
        from pipeline.datasets.build import run_build

        report = run_build("digits", workers=2)
        get_settings.cache_clear()
    assert report.scan["new"] == n_files == 1797
    assert report.version is not None
    # Same bytes, same paths, same recipe: the very version the folder lake gave.
    assert report.version.version_id == digits["version_id"]

    # Train on it; killed after the checkpoint of step 15 (mid epoch 0), then resumed.
    ckpt = tmp_path / "ckpt"
    train_env = base_env(digits, ckpt, "from-s3-lake", **RESUME_CFG)
    train_env.update({"DATA_ROOT": env["DATA_ROOT"], "LAKETRAIN_HOME": env["LAKETRAIN_HOME"]})
    proc = start({**train_env, "TRAIN_TEST_PAUSE_AFTER_STEP": "15"})
    try:
        wait_paused_with_checkpoint(proc, ckpt, "from-s3-lake", 15)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    again = run_trainer(train_env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from step 15" in again.stderr
    result = read_result(ckpt, "from-s3-lake")
    assert result["status"] == "succeeded" and result["epochs_done"] == RESUME_CFG["epochs"]
    assert result["dataset"]["version_id"] == digits["version_id"]
    assert_bitwise_equal(final_state(ckpt, "from-s3-lake"), reference["state"])

    # Export through the CLI, as a user would: the folder lake's version, byte for byte.
    dest = tmp_path / "exported"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "export", digits["version_id"][:12], str(dest)],
        env={**train_env, "METADATA_DB_URL": env["METADATA_DB_URL"]},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    assert json.loads((dest / "export.json").read_text())["version_id"] == digits["version_id"]
    from pipeline.datasets.export import export_version
    from pipeline.datasets.reader import open_version

    local = open_version("digits", digits["version_id"], data_root=digits["home"] / "data")
    export_version(local, tmp_path / "folder-export")
    for name in ("x.npy", "y.npy", "split.npy"):
        assert np.array_equal(np.load(dest / name), np.load(tmp_path / "folder-export" / name))

    def lines(path: Path) -> list[dict]:
        # A file's mtime is its object's LastModified on S3: the one field that differs (the
        # version id, hashed from the content, does not include it).
        return [
            {k: v for k, v in json.loads(line).items() if k != "mtime_ns"}
            for line in path.read_text().splitlines()
        ]

    assert lines(dest / "metadata.jsonl") == lines(tmp_path / "folder-export" / "metadata.jsonl")

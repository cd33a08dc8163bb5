"""Training from a version built off an s3:// lake needs nothing new: the digits sample lake is
uploaded to a moto bucket, built with LAKE_DIR=s3://..., and gives the same version (same
version_id) as the folder lake does; `python -m training` then trains a tiny run on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.training.trainer_support import base_env, digits_home, read_result, run_trainer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return digits_home(tmp_path_factory)


def test_a_version_built_from_an_s3_lake_is_the_folder_lakes_and_trains(
    digits, moto_server, tmp_path: Path
):
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.settings import get_settings

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
    assert report.scan["new"] == len(files) == 1797
    assert report.version is not None
    # Same bytes, same paths, same recipe: the very version the folder lake gave.
    assert report.version.version_id == digits["version_id"]

    ckpt = tmp_path / "ckpt"
    train_env = base_env(digits, ckpt, "from-s3-lake", width=8, depth=1, epochs=1, batch_size=64)
    train_env.update({"DATA_ROOT": env["DATA_ROOT"], "LAKETRAIN_HOME": env["LAKETRAIN_HOME"]})
    proc = run_trainer(train_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = read_result(ckpt, "from-s3-lake")
    assert result["status"] == "succeeded" and result["epochs_done"] == 1
    assert result["dataset"]["version_id"] == digits["version_id"]

"""The trainer's edge cases, with real subprocesses, real signals and real data: a run whose
checkpoints are all unusable (TRAIN_RESUME), an empty val split (TRAIN_ALLOW_NO_VAL), the
``laketrain-run-*`` scratch folders of killed trainers, and credentials in log lines."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.s3_fixtures import (
    TEST_ACCESS_KEY_ID,
    TEST_SECRET_ACCESS_KEY,
    SilentServer,
    set_aws_env,
)
from tests.training.trainer_support import REPO, base_env, digits_home, read_result, run_trainer

FAST = {"model": "mlp", "width": 16, "depth": 1, "epochs": 1, "checkpoint_every": 5}


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return digits_home(tmp_path_factory)


def _store_url(digits: dict[str, Any]) -> str:
    return f"sqlite:///{Path(digits['env']['DATA_ROOT']) / 'metadata.db'}"


def _corrupt_every_checkpoint(run_dir: Path) -> list[Path]:
    states = sorted(run_dir.glob("step-*/state.pt"))
    for path in states:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    return states


# ------------------------------------------------------------------------- TRAIN_RESUME


@pytest.mark.slow
def test_every_checkpoint_unusable_is_refused_under_require_and_an_error_event_under_auto(
    digits: dict[str, Any], tmp_path: Path
) -> None:
    from pipeline import runs
    from pipeline.metadata.store import MetadataStore

    ckpt, run_id = tmp_path / "objects", "edge-unusable"
    env = {**base_env(digits, ckpt, run_id, **FAST), "METADATA_DB_URL": _store_url(digits)}
    first = run_trainer({**env, "TRAIN_RESUME": "require"})  # a first attempt just starts
    assert first.returncode == 0, first.stderr[-3000:]
    assert read_result(ckpt, run_id)["events"] == []  # a fresh run is normal: no event
    assert "none is usable" not in first.stderr and "WARNING: every" not in first.stderr
    corrupted = _corrupt_every_checkpoint(ckpt / run_id)
    assert len(corrupted) >= 2

    refused = run_trainer({**env, "TRAIN_RESUME": "require"})
    assert refused.returncode == 3, refused.stderr[-3000:]
    assert "TRAIN_RESUME=require refuses to start again from step 0" in refused.stderr
    result = read_result(ckpt, run_id)
    assert result["status"] == "failed" and result["exit_code"] == 3
    assert [e["level"] for e in result["events"]] == ["ERROR"]
    assert all(p.exists() for p in corrupted)  # refusing deletes nothing

    auto = run_trainer(env)  # TRAIN_RESUME defaults to auto
    assert auto.returncode == 0, auto.stderr[-3000:]
    assert "WARNING: every checkpoint of run edge-unusable is unusable" in auto.stderr
    assert " ERROR training: run edge-unusable has checkpoints" in auto.stderr
    assert "resumed from step" not in auto.stderr
    result = read_result(ckpt, run_id)
    assert result["status"] == "succeeded"
    (event,) = result["events"]
    assert event["level"] == "ERROR" and "none is usable" in event["message"]
    assert f"step {corrupted[0].parent.name[5:]} is corrupt" in event["message"]
    recorded = runs.get_run(run_id, store=MetadataStore(_store_url(digits)))
    assert [e["message"] for e in recorded["events"]][-1] == event["message"]

    never = run_trainer({**env, "TRAIN_RESUME": "never"})
    assert never.returncode == 0, never.stderr[-3000:]
    assert "resumed from step" not in never.stderr  # the valid checkpoints were ignored
    (event,) = read_result(ckpt, run_id)["events"]
    assert event["level"] == "WARNING" and "TRAIN_RESUME=never" in event["message"]


# --------------------------------------------------------------------- empty val split


@pytest.fixture(scope="module")
def no_val(tmp_path_factory: pytest.TempPathFactory, digits: dict[str, Any]) -> dict[str, Any]:
    """A two-class image dataset whose recipe puts nothing in val (val_fraction = 0)."""
    home = tmp_path_factory.mktemp("noval_home")
    lake = home / "lake" / "noval"
    for label in ("0", "1"):
        shutil.copytree(Path(digits["env"]["LAKE_DIR"]) / "digits" / label, lake / label)
    recipes = home / "recipes"
    recipes.mkdir()
    (recipes / "noval.toml").write_text(
        (REPO / "recipes" / "digits.toml")
        .read_text()
        .replace("val_fraction = 0.2", "val_fraction = 0.0")
        .replace("auto_train = true", "auto_train = false")
    )
    env = {
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(home / "lake"),
        "DATA_ROOT": str(home / "data"),
        "SETTLE_SECONDS": "0",
        "RECIPES_DIR": str(recipes),
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("METADATA_DB_URL", raising=False)
        from pipeline.datasets.build import build
        from pipeline.settings import get_settings

        get_settings.cache_clear()
        version = build("noval")
        get_settings.cache_clear()
    assert version is not None and version.val == 0 and version.train > 0
    return {"env": env}


def test_an_empty_val_split_is_refused_unless_allowed(
    digits: dict[str, Any], no_val: dict[str, Any], tmp_path: Path
) -> None:
    ckpt = tmp_path / "objects"
    env = {**base_env(digits, ckpt, "edge-noval", **FAST), **no_val["env"], "DATASET_NAME": "noval"}
    refused = run_trainer(env)
    assert refused.returncode == 3, refused.stderr[-3000:]
    assert (
        "has an empty val split" in refused.stderr and "TRAIN_ALLOW_NO_VAL=true" in refused.stderr
    )
    assert read_result(ckpt, "edge-noval")["status"] == "failed"

    allowed = run_trainer({**env, "TRAIN_ALLOW_NO_VAL": "true"})
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    result = read_result(ckpt, "edge-noval")
    assert result["status"] == "succeeded" and result["best_metric"] is None
    assert [e["level"] for e in result["events"]] == ["WARNING"]


# ------------------------------------------------------------------ scratch folders


def _scratch(tmpdir: Path) -> list[Path]:
    return sorted(tmpdir.glob("laketrain-run-*"))


def _start(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "training"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_a_sigkilled_trainers_scratch_folder_is_removed_by_the_next_trainer(
    digits: dict[str, Any], tmp_path: Path
) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**base_env(digits, tmp_path / "objects", "edge-kill", **FAST), "TMPDIR": str(tmpdir)}
    proc = _start({**env, "TRAIN_TEST_PAUSE_AFTER_STEP": "3"})
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if "TRAIN_TEST_PAUSED step=3" in line:
                break
        else:
            raise AssertionError(
                f"the trainer ended early: {proc.wait()} {proc.stderr.read()[-3000:]}"
            )  # type: ignore[union-attr]
        (folder,) = _scratch(tmpdir)
        assert json.loads((folder / "owner.json").read_text())["pid"] == proc.pid
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _scratch(tmpdir) == [folder]  # SIGKILL: nobody could clean up

    # A folder whose owner is alive (this test process) is left alone.
    alive = tmpdir / "laketrain-run-alive"
    alive.mkdir()
    (alive / "owner.json").write_text(
        json.dumps({"pid": os.getpid(), "host": os.uname().nodename, "start": None})
    )
    nxt = run_trainer(
        {**env, "RUN_ID": "edge-next", "DATASET_VERSION": "digits_v19990101_deadbeef"}
    )
    assert nxt.returncode == 3, nxt.stderr[-3000:]  # any run start cleans, even a refused one
    assert _scratch(tmpdir) == [alive]


def test_sigterm_outside_the_training_loop_exits_75_and_removes_the_scratch_folder(
    digits: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    server = SilentServer()  # the checkpoint store hangs: the trainer waits in its first call
    try:
        set_aws_env(monkeypatch, server.endpoint, tmp_path)
        env = {
            **base_env(digits, "s3://lt-hung-bucket/ckpt", "edge-term", **FAST),
            **{k: v for k, v in os.environ.items() if k.startswith("AWS_")},
            "TMPDIR": str(tmpdir),
            "LAKETRAIN_S3_READ_TIMEOUT": "120",
            "LAKETRAIN_S3_ATTEMPTS": "1",
        }
        proc = _start(env)
        try:
            deadline = time.monotonic() + 120
            while not (server.connections and _scratch(tmpdir)):
                assert proc.poll() is None, proc.stderr.read()[-3000:]  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "the trainer never reached the store"
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
        finally:
            server.close()  # from now on the store refuses at once: result.json fails fast
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.close()
    assert proc.returncode == 75, err[-3000:]
    assert "stopped by SIGTERM outside the training loop" in err
    assert _scratch(tmpdir) == []
    assert TEST_SECRET_ACCESS_KEY not in out + err and TEST_ACCESS_KEY_ID not in out + err


# ------------------------------------------------------------------------ credentials


def test_a_malformed_store_url_is_a_config_error_that_never_shows_its_password(
    digits: dict[str, Any], tmp_path: Path
) -> None:
    env = {
        **base_env(digits, tmp_path / "objects", "edge-secret", **FAST),
        "METADATA_DB_URL": "laketrain:hunter2-db-pw@db:5432/lt",
    }
    proc = run_trainer(env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "METADATA_DB_URL" in proc.stderr
    assert "hunter2-db-pw" not in proc.stderr + proc.stdout
    assert "hunter2-db-pw" not in json.dumps(read_result(tmp_path / "objects", "edge-secret"))


def test_the_trainers_log_lines_and_tracebacks_mask_url_credentials() -> None:
    code = """
import logging
from training.train import setup_logging
setup_logging(0)
log = logging.getLogger("training")
log.error("cannot reach %s", "postgresql+psycopg://laketrain:hunter2-db-pw@db:5432/lt")
try:
    raise RuntimeError("upload to s3://AKIAKEYID:wJalrSECRET@bucket/x failed")
except RuntimeError:
    log.exception("checkpoint upload failed")
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "laketrain:***@db:5432/lt" in proc.stderr and "s3://***@bucket/x" in proc.stderr
    for secret in ("hunter2-db-pw", "wJalrSECRET", "AKIAKEYID"):
        assert secret not in proc.stderr

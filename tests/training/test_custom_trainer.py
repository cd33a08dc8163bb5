"""examples/custom_trainer/train.py, a user's own trainer on the public API, run for real as
`python examples/custom_trainer/train.py` on the digits version the real pipeline builds: a
SIGTERM mid-run saves and exits 75, the rerun with the same RUN_ID resumes from that checkpoint
and finishes bitwise equal to an uninterrupted run, with result.json and metrics.jsonl."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training.trainer_support import REPO, base_env, digits_home, read_result
from training.checkpoint import CheckpointManager

SCRIPT = "examples/custom_trainer/train.py"
# 20 epochs of 22 steps: long enough for a SIGTERM to land mid-run, a few seconds in all.
CFG = {"epochs": 20, "batch_size": 64, "lr": 0.003, "seed": 4, "checkpoint_every": 50}


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return digits_home(tmp_path_factory)


def start(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, SCRIPT],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def final_model(ckpt: Path, run_id: str) -> dict[str, torch.Tensor]:
    state = CheckpointManager(ckpt.as_uri(), run_id).load_latest()
    assert state is not None
    return state["model"]


def train_steps(ckpt: Path, run_id: str) -> list[int]:
    lines = (ckpt / run_id / "metrics.jsonl").read_text().splitlines()
    return [r["step"] for r in map(json.loads, lines) if r["kind"] == "train"]


@pytest.mark.slow
def test_the_example_trainer_is_preempted_resumes_and_matches_an_uninterrupted_run(
    digits: dict[str, Any], tmp_path: Path
) -> None:
    ckpt = tmp_path / "objects"
    ref = start(base_env(digits, ckpt, "reference", **CFG))
    out, err = ref.communicate(timeout=300)
    assert ref.returncode == 0, err[-3000:]
    total = 20 * (1413 // 64)

    env = base_env(digits, ckpt, "custom", **CFG)
    proc = start(env)
    deadline = time.monotonic() + 240
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith("step 30 "):
            break
        assert time.monotonic() < deadline
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-3000:]
    stopped = read_result(ckpt, "custom")
    assert stopped["status"] == "preempted" and stopped["exit_code"] == 75
    at = stopped["steps"]
    assert 30 <= at < total
    latest = CheckpointManager(ckpt.as_uri(), "custom").latest_pointer() or {}
    assert latest.get("step") == at  # the step in flight finished and was saved

    again = start(env)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    assert f"resumed from step {at} " in out
    result = read_result(ckpt, "custom")
    assert result["status"] == "succeeded" and result["steps"] == total
    assert result["epochs_done"] == 20 and result["metric_name"] == "val_accuracy"
    assert result["best_metric"] > 0.9
    assert result["checkpoint_url"].startswith(ckpt.as_uri() + "/custom/step-")
    # One metrics line per step across both attempts: none lost, none twice.
    assert train_steps(ckpt, "custom") == list(range(1, total + 1))
    ours, theirs = final_model(ckpt, "custom"), final_model(ckpt, "reference")
    assert ours.keys() == theirs.keys()
    for name, tensor in ours.items():
        assert torch.equal(tensor, theirs[name]), f"weights differ in {name}"


def test_the_example_image_builds_from_the_trainer_image_and_runs_the_script() -> None:
    """Checked without a Docker engine, as tests/docker does: FROM the image the launchers
    use by default, the script copied from the build context (this folder), run as PID 1."""
    from tests.docker.helpers import copy_sources, parse_dockerfile

    folder = REPO / "examples" / "custom_trainer"
    image = parse_dockerfile(folder / "Dockerfile")
    compose = (REPO / "docker-compose.yml").read_text()
    assert image.final.base == "laketrain-trainer:latest" and image.final.base in compose
    (copy,) = image.final.of("COPY")
    assert copy_sources(copy) == ["train.py"] and (folder / "train.py").is_file()
    (entry,) = image.final.of("ENTRYPOINT")
    assert entry.json_args() == ["python", "/home/trainer/custom_trainer/train.py"]
    assert copy.args.split()[-1] == entry.json_args()[1]


def test_the_example_refuses_a_missing_version_with_exit_3(
    digits: dict[str, Any], tmp_path: Path
) -> None:
    env = base_env(digits, tmp_path / "objects", "missing", **CFG)
    env["DATASET_VERSION"] = "digits_v19990101_deadbeef"
    proc = subprocess.run(
        [sys.executable, SCRIPT], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "digits_v19990101_deadbeef" in proc.stderr

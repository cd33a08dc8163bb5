"""End to end, with real data, real subprocesses and real signals: the digits version built by
the real pipeline from the sample lake trains to >= 97 % val accuracy; a run killed by SIGKILL
after a mid-epoch checkpoint, or stopped by SIGTERM, resumes and ends bitwise equal to an
uninterrupted run; a missing version exits 3."""

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

from tests.training.trainer_support import REPO, base_env, digits_home, read_result, run_trainer
from training.checkpoint import CheckpointManager

# Small and quick, but with every source of randomness in play: shuffling, dropout, augmentation.
RESUME_CFG = {
    "width": 8,
    "depth": 1,
    "epochs": 2,
    "batch_size": 64,
    "dropout": 0.2,
    "augment": "true",
    "checkpoint_every": 5,
    "seed": 11,
}


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return digits_home(tmp_path_factory)


@pytest.fixture(scope="module")
def reference(digits: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run every resumed run must match bitwise."""
    ckpt = tmp_path_factory.mktemp("ref_ckpt")
    proc = run_trainer(base_env(digits, ckpt, "reference", **RESUME_CFG))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {
        "dir": ckpt,
        "state": final_state(ckpt, "reference"),
        "metrics": losses(ckpt, "reference"),
    }


def final_state(ckpt: Path, run_id: str) -> dict[str, Any]:
    state = CheckpointManager(ckpt.as_uri(), run_id).load_latest()
    assert state is not None
    return state


def losses(ckpt: Path, run_id: str) -> list[tuple]:
    """The metric history without wall-clock fields."""
    rows = [json.loads(line) for line in (ckpt / run_id / "metrics.jsonl").read_text().splitlines()]
    skip = {"samples_per_s", "mem_mb", "peak_mem_mb"}
    return [tuple(sorted((k, v) for k, v in r.items() if k not in skip)) for r in rows]


def assert_bitwise_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["step"] == b["step"] and a["epoch"] == b["epoch"]
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), f"weights differ in {name}"
    for pid, st in a["optimizer"]["state"].items():
        for key, value in st.items():
            other = b["optimizer"]["state"][pid][key]
            assert (
                torch.equal(value, other) if isinstance(value, torch.Tensor) else value == other
            ), (pid, key)


def start(env: dict[str, str], *, torchrun: bool = False) -> subprocess.Popen:
    cmd = (
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "training",
        ]
        if torchrun
        else [sys.executable, "-m", "training"]
    )
    return subprocess.Popen(
        cmd,
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_paused_with_checkpoint(
    proc: subprocess.Popen, ckpt: Path, run_id: str, step: int, timeout: float = 240
) -> None:
    """Until the trainer holds still after ``step`` and (if one was due) its checkpoint is committed."""
    deadline = time.monotonic() + timeout
    for line in proc.stdout:  # type: ignore[union-attr]
        if f"TRAIN_TEST_PAUSED step={step}" in line:
            break
        assert time.monotonic() < deadline
    else:
        raise AssertionError(
            f"the trainer ended before pausing: {proc.wait()} {proc.stderr.read()[-3000:]}"
        )  # type: ignore[union-attr]
    manager = CheckpointManager(ckpt.as_uri(), run_id)
    while (manager.latest_pointer() or {}).get("step") != step:
        assert time.monotonic() < deadline, "no checkpoint committed at the pause step"
        time.sleep(0.05)


@pytest.mark.slow
def test_digits_trains_to_97_percent_and_writes_every_output(
    digits: dict[str, Any], tmp_path: Path
) -> None:
    ckpt = tmp_path / "objects"
    db_url = f"sqlite:///{Path(digits['env']['DATA_ROOT']) / 'metadata.db'}"
    env = base_env(digits, ckpt, "digits-acceptance", epochs=5, checkpoint_every=50)
    env["METADATA_DB_URL"] = db_url
    proc = run_trainer(env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = read_result(ckpt, "digits-acceptance")
    assert result["status"] == "succeeded" and result["metric_name"] == "val_accuracy"
    assert result["best_metric"] >= 0.97, result
    assert result["epochs_done"] == 5 and result["steps"] == 5 * (1413 // 64)
    assert result["checkpoint_url"].startswith(ckpt.as_uri() + "/digits-acceptance/step-")
    # The start log names the version, its manifest checksum, torch and the device.
    assert digits["version_id"] in proc.stderr and "manifest sha256" in proc.stderr
    assert f"torch {torch.__version__} on cpu" in proc.stderr
    # Every output lies beside the checkpoints.
    run_dir = ckpt / "digits-acceptance"
    assert (run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"
    diagnosis = json.loads((run_dir / "diagnosis.json").read_text())
    assert diagnosis["findings"] == [], diagnosis  # a healthy run raises no rule
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, result["steps"] + 1))
    assert {"step", "epoch", "loss", "lr", "grad_norm", "samples_per_s", "mem_mb"} <= set(train[0])
    epochs = [r for r in rows if r["kind"] == "epoch"]
    assert len(epochs) == 5 and {
        "val_loss",
        "val_accuracy",
        "train_accuracy",
        "peak_mem_mb",
    } <= set(epochs[0])
    # The checkpoint describes itself: config, dataset version, manifest checksum, torch, device.
    state = final_state(ckpt, "digits-acceptance")
    assert state["dataset"]["version_id"] == digits["version_id"]
    assert len(state["dataset"]["manifest_sha256"]) == 64
    assert (
        state["config"]["runtime"]["epochs"] == 5
        and state["torch_version"] == torch.__version__
        and state["device"] == "cpu"
    )
    # The run and its checkpoints are in the metadata store.
    from pipeline.metadata.store import MetadataStore
    from pipeline.runs import get_run

    store = MetadataStore(db_url)
    try:
        row = get_run("digits-acceptance", store=store)
    finally:
        store.dispose()
    assert row["status"] == "succeeded" and row["version_id"] == digits["version_id"]
    assert row["best_metric"] == pytest.approx(result["best_metric"])
    assert row["params"]["epochs"] == 5


@pytest.mark.slow
def test_sigkill_then_sigterm_resume_and_the_run_ends_bitwise_equal(
    digits: dict[str, Any], reference: dict[str, Any], tmp_path: Path
) -> None:
    """One run interrupted twice, as a node loss and then a preemption would: SIGKILL after the
    mid-epoch checkpoint at step 15 (nothing saved after it), then SIGTERM to the resumed trainer
    at step 29, mid epoch 1 where no periodic checkpoint is due (29 is no multiple of 5: the step
    29 checkpoint can only be the SIGTERM save). The last rerun ends bitwise equal to the
    uninterrupted reference, metric history included. (One run for both signals: each trainer
    start costs seconds of imports, the training itself well under one.)"""
    ckpt = tmp_path / "objects"
    env = base_env(digits, ckpt, "killed", **RESUME_CFG)
    proc = start({**env, "TRAIN_TEST_PAUSE_AFTER_STEP": "15"})  # epoch 0 has 22 steps
    try:
        wait_paused_with_checkpoint(proc, ckpt, "killed", 15)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    mid = final_state(ckpt, "killed")
    assert (mid["step"], mid["epoch"], mid["data"]["cursor"]) == (15, 0, 15 * 64)

    proc = start({**env, "TRAIN_TEST_PAUSE_AFTER_STEP": "29"})
    deadline = time.monotonic() + 240
    for line in proc.stdout:  # type: ignore[union-attr]
        if "TRAIN_TEST_PAUSED step=29" in line:
            break
        assert time.monotonic() < deadline
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75
    err = proc.stderr.read()  # type: ignore[union-attr]
    assert "resumed from step 15 (epoch 0, batch 15 of 22)" in err, err[-3000:]
    result = read_result(ckpt, "killed")
    assert result["status"] == "preempted" and result["steps"] == 29
    assert (CheckpointManager(ckpt.as_uri(), "killed").latest_pointer() or {})["step"] == 29

    again = run_trainer(env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from step 29 (epoch 1, batch 7 of 22)" in again.stderr
    assert read_result(ckpt, "killed")["status"] == "succeeded"
    assert_bitwise_equal(final_state(ckpt, "killed"), reference["state"])
    assert losses(ckpt, "killed") == reference["metrics"]


@pytest.mark.slow
def test_s3_checkpoints_preempt_and_resume_bitwise(
    digits: dict[str, Any], reference: dict[str, Any], moto_server: Any
) -> None:
    """The same run against a real moto_server over HTTP (boto3's AWS_* variables only)."""
    from tests.s3_fixtures import TEST_SECRET_ACCESS_KEY

    base = f"{moto_server.url}/checkpoints"
    env = base_env(digits, base, "on-s3", **RESUME_CFG)
    proc = start({**env, "TRAIN_TEST_PAUSE_AFTER_STEP": "10"})
    deadline = time.monotonic() + 240
    for line in proc.stdout:  # type: ignore[union-attr]
        if "TRAIN_TEST_PAUSED step=10" in line:
            break
        assert time.monotonic() < deadline
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75
    first_err = proc.stderr.read()  # type: ignore[union-attr]
    again = run_trainer(env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from step 10" in again.stderr
    manager = CheckpointManager(base, "on-s3")
    assert manager.read_result()["status"] == "succeeded"
    assert_bitwise_equal(manager.load_latest(), reference["state"])
    assert {
        "checkpoints/on-s3/metrics.jsonl",
        "checkpoints/on-s3/curves.png",
        "checkpoints/on-s3/diagnosis.json",
    } <= set(moto_server.keys())
    for text in (first_err, again.stderr, again.stdout):
        assert TEST_SECRET_ACCESS_KEY not in text


def test_divergence_on_real_data_stops_with_the_files_of_the_batch(
    digits: dict[str, Any], tmp_path: Path
) -> None:
    """An absurd LR blows the weights up in one step; the next loss is NaN."""
    env = base_env(
        digits,
        tmp_path / "objects",
        "diverged",
        model="mlp",
        width=16,
        depth=1,
        optimizer="sgd",
        lr="1e30",
        clip_norm=0,
        warmup_steps=0,
        momentum=0,
        detect_anomaly="true",
    )
    proc = run_trainer(env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "non-finite loss nan at step 1 (epoch 0)" in proc.stderr
    assert "anomaly trace" in proc.stderr
    result = read_result(tmp_path / "objects", "diverged")
    assert result["status"] == "failed" and result["exit_code"] == 1
    # 64 "index:lake path" pairs of the batch (20 shown), all real digits files
    shown = result["error"].split("source paths: ", 1)[1].split("\n")[0]
    pairs = shown.split(" (+")[0].split(", ")
    assert len(pairs) == 20 and all(p.split(":", 1)[1].startswith("digits/") for p in pairs)


def test_missing_version_exits_3(digits: dict[str, Any], tmp_path: Path) -> None:
    env = base_env(digits, tmp_path / "objects", "missing")
    env["DATASET_VERSION"] = "digits_v19990101_deadbeef"
    proc = run_trainer(env)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "no version of dataset 'digits' matches 'digits_v19990101_deadbeef'" in proc.stderr
    assert read_result(tmp_path / "objects", "missing")["status"] == "failed"


def wait_both_ranks_paused(proc: subprocess.Popen, step: int, timeout: float = 240) -> None:
    paused = 0
    deadline = time.monotonic() + timeout
    for line in proc.stdout:  # type: ignore[union-attr]
        # Workers run unbuffered (`python -u`): one print is two writes, so two ranks'
        # markers can share a line. Count markers, not lines.
        paused += line.count(f"TRAIN_TEST_PAUSED step={step}")
        if paused == 2:  # both ranks hold still after the step
            return
        assert time.monotonic() < deadline
    raise AssertionError(
        f"the trainer ended before pausing: {proc.wait()} {proc.stderr.read()[-3000:]}"
    )  # type: ignore[union-attr]


@pytest.mark.slow
def test_ddp_two_processes_on_gloo_kill_then_sigterm_and_resume_bitwise(
    digits: dict[str, Any], tmp_path: Path
) -> None:
    """Two gloo ranks, one run interrupted twice: SIGKILL to the launcher alone after the
    checkpoint at step 6 (an OOM kill: the workers must not outlive it), then SIGTERM to the
    resumed launcher at step 16 (a container stop sends it to PID 1, the launcher: torchrun
    passes it on, both workers save and exit 75, and the launcher exits 75 too, where torchrun
    alone would say 1, so the orchestrator retries). 16 is no multiple of the checkpoint period
    3, so the step 16 checkpoint is the SIGTERM save. The last rerun resumes and ends bitwise
    equal to an uninterrupted two-rank run. (One run for both signals: a start of the launcher
    and two workers costs far more than their 22 steps.)"""
    import os

    import psutil

    cfg = {**RESUME_CFG, "checkpoint_every": 3}  # 1413 / 2 ranks / 64 → 11 steps per epoch
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    ref = start(base_env(digits, ref_dir, "ddp-ref", **cfg), torchrun=True)
    out, err = ref.communicate(timeout=300)
    assert ref.returncode == 0, err[-3000:]
    assert "2 process(es)" in err
    # The run under test starts its own workers (TRAIN_NPROC=2: the trainer re-launches itself
    # under torchrun); the reference above went through an explicit torchrun command.
    env = {**base_env(digits, run_dir, "ddp", **cfg), "TRAIN_NPROC": "2"}
    proc = start({**env, "TRAIN_TEST_PAUSE_AFTER_STEP": "6"})
    try:
        wait_paused_with_checkpoint(proc, run_dir, "ddp", 6)
        workers = psutil.Process(proc.pid).children()
        assert len(workers) == 2, workers
        # SIGKILL to the launcher alone (an OOM kill): torchrun puts each worker in a session
        # of its own, so only their parent-death signal ends them; none may be left running.
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        gone, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, f"workers outlived their launcher: {alive}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    proc = start({**env, "TRAIN_TEST_PAUSE_AFTER_STEP": "16"})
    try:
        wait_both_ranks_paused(proc, 16)
        proc.send_signal(signal.SIGTERM)  # the launcher only, as `docker stop` does
        assert proc.wait(timeout=120) == 75, proc.stderr.read()[-3000:]  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err = proc.stderr.read()  # type: ignore[union-attr]
    assert "starting 2 training processes under torchrun" in err
    assert "resumed from step 6 (epoch 0, batch 6 of 11)" in err
    assert "workers exited with [75, 75]: exit 75" in err
    assert read_result(run_dir, "ddp")["status"] == "preempted"
    assert (CheckpointManager(run_dir.as_uri(), "ddp").latest_pointer() or {})["step"] == 16

    again = start(env)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    assert "resumed from step 16 (epoch 1, batch 5 of 11)" in err
    assert "starting 2 training processes under torchrun" in err
    assert read_result(run_dir, "ddp")["status"] == "succeeded"
    a, b = final_state(ref_dir, "ddp-ref"), final_state(run_dir, "ddp")
    assert a["world_size"] == b["world_size"] == 2 and len(a["rng"]) == 2
    assert_bitwise_equal(b, a)
    # Only rank 0 wrote: one metrics line per step, no duplicates.
    train_steps = [
        json.loads(line)["step"]
        for line in (run_dir / "ddp" / "metrics.jsonl").read_text().splitlines()
        if '"train"' in line
    ]
    assert train_steps == list(range(1, 23))


def test_several_processes_keep_the_exit_code_contract(
    digits: dict[str, Any], tmp_path: Path
) -> None:
    """Under the launcher a refused version still exits 3 (no retry), not torchrun's 1."""
    env = {**base_env(digits, tmp_path / "objects", "missing-ddp"), "TRAIN_NPROC": "2"}
    env["DATASET_VERSION"] = "digits_v19990101_deadbeef"
    proc = run_trainer(env)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "workers exited with [3, 3]: exit 3" in proc.stderr

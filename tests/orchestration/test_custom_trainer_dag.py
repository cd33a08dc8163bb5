"""Test 1 of the custom-trainer example (issue 14): ``examples/custom_trainer/train.py``
launched through the ``train`` DAG's ``command`` field with the local launcher, on a real
Airflow (``dag.test()`` in a process of its own, tests/orchestration/run_dags.py). The test
finds the trainer process the launch task started, sends it SIGTERM mid-run (it finishes the
step, saves and exits 75), Airflow retries the launch task with the same RUN_ID, the example
resumes from that checkpoint, and the run row ends succeeded after 2 attempts, every step
logged exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.orchestration.test_dag_runs import REPO, write_digits_subset

pytestmark = pytest.mark.slow

SCRIPT = REPO / "examples" / "custom_trainer" / "train.py"
# 30 steps an epoch: the SIGTERM lands at step 10-15, and 6 epochs leave the first attempt
# ~165 steps (seconds of work, checkpointing every 5) to be caught mid-run, and the retry a
# resume with steps to do. 40 epochs spent a minute on steps that nothing checked.
EPOCHS, BATCH, PER_CLASS = 6, 8, 30


def _proc_env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(p.split("=", 1) for p in raw.decode(errors="replace").split("\0") if "=" in p)


def _trainers(mark: str) -> list[tuple[int, dict[str, str]]]:
    """The example's processes started for this test (found by a variable of its own)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(part.endswith(b"custom_trainer/train.py") for part in cmdline):
            continue
        env = _proc_env(int(entry))
        if env.get("LT_TEST_MARK") == mark:
            out.append((int(entry), env))
    return out


def _latest_step(checkpoint_dir: Path, run_id: str) -> int:
    try:
        return int(json.loads((checkpoint_dir / run_id / "latest").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return 0


def test_the_example_via_the_train_dag_is_killed_retried_resumed_and_recorded(
    tmp_path: Path,
) -> None:
    home = tmp_path
    lake = home / "lake"
    write_digits_subset(lake, per_class=PER_CLASS)
    objects = home / "objects"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_"))},
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(lake),
        "DATA_ROOT": str(home / "data"),
        "CHECKPOINT_URL": objects.as_uri(),
        "METADATA_DB_URL": f"sqlite:///{home / 'metadata.db'}",
        "RECIPES_DIR": str(REPO / "recipes"),
        "SETTLE_SECONDS": "0",
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
    }
    mark = uuid.uuid4().hex
    conf = {
        "dataset": "digits",
        "dataset_version": "latest",
        "epochs": EPOCHS,
        "batch_size": BATCH,
        "gpus": 0,
        "seed": 3,
        "command": f"python {SCRIPT}",
        # A checkpoint every 5 steps, so the SIGTERM lands well after one; the mark finds
        # this test's trainer among the machine's processes.
        "env": {"TRAIN_CHECKPOINT_EVERY": "5", "LT_TEST_MARK": mark},
    }
    spec = {
        "home": str(home),
        "runs": [["lake_ingest", None, "ingest"], ["train", conf, "custom"]],
    }
    runner = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("run_dags.py")), json.dumps(spec)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=home,
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(runner.stdout), daemon=True)
    reader.start()

    # The first attempt's trainer: wait for it and for a checkpoint past step 10, then SIGTERM.
    killed: tuple[int, str, int] | None = None
    deadline = time.monotonic() + 600
    while killed is None:
        assert runner.poll() is None, (
            "the DAG run ended before its trainer was seen:\n" + "".join(output)[-5000:]
        )
        assert time.monotonic() < deadline, "no trainer process appeared"
        for pid, penv in _trainers(mark):
            run_id = penv["RUN_ID"]
            step = _latest_step(objects, run_id)
            if step >= 10:
                os.kill(pid, signal.SIGTERM)
                killed = (pid, run_id, step)
                break
        time.sleep(0.02)
    pid, run_id, _ = killed
    try:
        runner.wait(timeout=600)
    finally:
        if runner.poll() is None:
            runner.kill()
    reader.join(timeout=10)
    text = "".join(output)
    lines = [line for line in text.splitlines() if line.startswith("RESULT ")]
    assert lines, text[-5000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    run = {r["label"]: r for r in result["runs"]}["custom"]
    assert run["state"] == "success", (run, text[-5000:])
    assert run["tasks"]["launch[-1]"] == "success"

    # The first attempt stopped by the SIGTERM at a checkpoint and said so (exit 75).
    assert "exit 75" in text, text[-5000:]
    # The retry resumed from that checkpoint: the example says so in the task log.
    resumed = [line for line in text.splitlines() if "resumed from step " in line]
    assert resumed, text[-5000:]
    at = int(resumed[0].split("resumed from step ")[1].split()[0])
    assert at >= 10

    # Every step exactly once across both attempts, and the last one is the run's end.
    run_dir = objects / run_id
    final = json.loads((run_dir / "result.json").read_text())
    steps_per_epoch = final["steps"] // EPOCHS
    assert final["status"] == "succeeded" and final["epochs_done"] == EPOCHS
    assert final["steps"] == EPOCHS * steps_per_epoch > at
    train_steps = [
        r["step"]
        for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        if r["kind"] == "train"
    ]
    assert train_steps == list(range(1, final["steps"] + 1))

    # The run row: one run, two attempts, succeeded, on the version the DAG resolved.
    from pipeline.metadata.store import MetadataStore
    from pipeline.runs import get_run

    store = MetadataStore(env["METADATA_DB_URL"])
    try:
        row = get_run(run_id, store=store)
    finally:
        store.dispose()
    assert row is not None
    assert row["status"] == "succeeded" and row["attempts"] == 2, row
    assert row["dag_id"] == "train" and row["params"]["epochs"] == EPOCHS

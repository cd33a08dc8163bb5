"""The public API for training code (training.api), on the digits version the real pipeline
builds: the version from the environment, the dataset adapter's exact resume across a change
of world size with real gloo processes, the run report (metrics.jsonl, result.json, the store)
and the preemption flag under a real SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training.trainer_support import REPO, digits_home
from training import api


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return digits_home(tmp_path_factory)


@pytest.fixture
def contract(
    digits: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """The environment a launcher gives a trainer (no store)."""
    ckpt = tmp_path / "objects"
    for key, value in {
        **digits["env"],
        "DATASET_NAME": "digits",
        "DATASET_VERSION": digits["tag"],
        "CHECKPOINT_URL": ckpt.as_uri(),
        "RUN_ID": "api-run",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("METADATA_DB_URL", raising=False)
    from pipeline.settings import get_settings

    get_settings.cache_clear()
    yield ckpt
    get_settings.cache_clear()


def test_the_api_imports_without_airflow() -> None:
    code = (
        "import sys; from training import api; "
        "assert 'airflow' not in sys.modules, 'airflow imported'; print(sorted(api.__all__))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "VersionDataset" in proc.stdout and "open_version" in proc.stdout


def test_open_version_with_no_arguments_reads_the_contract(
    digits: dict[str, Any], contract: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = api.open_version()
    assert version.version_id == digits["version_id"] and version.dataset == "digits"
    assert len(version.split("train")) == 1413
    monkeypatch.delenv("DATASET_VERSION")  # latest by default
    assert api.open_version().version_id == digits["version_id"]
    monkeypatch.setenv("DATASET_VERSION", "digits_v19990101_deadbeef")
    with pytest.raises(LookupError, match="digits_v19990101_deadbeef"):
        api.open_version()
    monkeypatch.delenv("DATASET_NAME")
    with pytest.raises(api.ContractError, match="DATASET_NAME is not set"):
        api.open_version()


def test_the_adapter_yields_uint8_batches_and_labels_from_the_version(contract: Path) -> None:
    train = api.VersionDataset(api.open_version().split("train"), batch_size=64, seed=3)
    x, y = next(iter(train))
    assert x.dtype == torch.uint8 and tuple(x.shape) == (64, 1, 8, 8)
    assert y.dtype == torch.int64 and tuple(y.shape) == (64,)
    assert train.state_dict() == {
        "version_id": train.version_id,
        "seed": 3,
        "epoch": 0,
        "cursor": 64,
        "n": 1413,
        "world_size": 1,
        "batch_size": 64,
    }


# ----------------------------------------------------------- resume across world sizes (gloo)
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORKER = r"""
import json, os, sys
import torch.distributed as dist
from training import api

out, steps, state_in = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo")  # from torchrun-style RANK/WORLD_SIZE/MASTER_* variables
train = api.VersionDataset(api.open_version().split("train"), batch_size=int(os.environ["BS"]), seed=5)
if state_in != "-":
    train.load_state_dict(json.load(open(state_in)))
taken = []
for i, (x, y) in enumerate(train):
    taken.append(train.last_indices.tolist())
    if i + 1 == steps:
        break
rank = dist.get_rank()
json.dump({"taken": taken, "state": train.state_dict()}, open(f"{out}.{rank}", "w"))
dist.destroy_process_group()
"""


def run_ranks(
    world: int, out: Path, steps: int, state_in: str, batch: int, script: str = WORKER
) -> list[dict]:
    """``world`` real processes in one gloo group (the variables torchrun would set)."""
    port = str(_free_port())
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "BS": str(batch),
            "OMP_NUM_THREADS": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", script, str(out), str(steps), state_in],
                env=env,
                cwd=REPO,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
    return [json.loads(Path(f"{out}.{r}").read_text()) for r in range(world)]


@pytest.mark.parametrize(("before", "after"), [(1, 2), (2, 1)])
def test_resume_mid_epoch_with_another_world_size_repeats_and_skips_no_sample(
    contract: Path, tmp_path: Path, before: int, after: int
) -> None:
    batch = 32
    first = run_ranks(before, tmp_path / "a", 7, "-", batch)
    state = first[0]["state"]  # what rank 0 puts in its checkpoint
    assert state["cursor"] == 7 * batch * before and state["epoch"] == 0
    saved = tmp_path / "state.json"
    saved.write_text(json.dumps(state))
    second = run_ranks(after, tmp_path / "b", 10_000, str(saved), batch)
    # The epoch ran to its end on the new world size: the next state is epoch 1 from 0.
    assert all(r["state"]["epoch"] == 1 and r["state"]["cursor"] == 0 for r in second)
    seen = [i for r in first + second for b in r["taken"] for i in b]
    assert len(seen) == len(set(seen)), "a sample was repeated within the epoch"
    # Exactly the epoch's order up to the last full step, every rank its share of each step.
    from training.data import epoch_permutation

    n = 1413
    perm = epoch_permutation(n, 5, 0)
    g = batch * after
    end = state["cursor"] + (n - state["cursor"]) // g * g
    assert sorted(seen) == sorted(perm[:end].tolist()), "a sample was skipped within the epoch"
    assert n - end < g  # only a final partial step is left out, as without the resume
    steps_after = [len(r["taken"]) for r in second]
    assert len(set(steps_after)) == 1  # every rank takes the same number of steps


TRAINER_WORKER = r"""
import json, os, sys
import torch
from training.config import build_config
from training.distributed import init_distributed
from training.loop import Trainer
from training import api

out, steps, state_in = sys.argv[1], int(sys.argv[2]), sys.argv[3]
info = init_distributed("cpu")
version = api.open_version()
cfg = build_config({"batch_size": int(os.environ["BS"]), "width": 4, "depth": 1, "epochs": 1})
t = Trainer(cfg, version.split("train"), version.split("val"), device=torch.device("cpu"), dist=info)
if state_in != "-":
    t.load_state_dict(torch.load(state_in, weights_only=True))
else:
    it = iter(t.data)
    for _ in range(steps):
        t.train_step(*next(it))
state = t.state_dict()  # collective
if info.is_main and state_in == "-":
    torch.save(state, out + ".pt")
json.dump({"local_seen": t.sums.seen, "saved": state["epoch_sums"]}, open(f"{out}.{info.rank}", "w"))
torch.distributed.destroy_process_group()
"""


@pytest.mark.slow
def test_a_ddp_checkpoint_carries_every_ranks_epoch_sums_and_a_resume_counts_them_once(
    contract: Path, tmp_path: Path
) -> None:
    """The epoch's running train loss/accuracy sums: rank 0's checkpoint holds all ranks'
    (not rank 0's alone), and a resume on any world size counts them on rank 0 only."""
    ranks = run_ranks(2, tmp_path / "a", 3, "-", 32, script=TRAINER_WORKER)
    assert [r["local_seen"] for r in ranks] == [96, 96]
    assert ranks[0]["saved"]["seen"] == 192  # 3 steps x 2 ranks x 32
    again = run_ranks(2, tmp_path / "b", 0, str(tmp_path / "a.pt"), 32, script=TRAINER_WORKER)
    assert [r["local_seen"] for r in again] == [192, 0]


# ------------------------------------------------------------------------------- reporting
def test_the_report_writes_metrics_result_and_the_store_rows(
    digits: dict[str, Any], contract: Path, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.runs import get_run

    ckpt = api.checkpoints(keep_last=1)
    report = api.RunReport.from_env(ckpt, metric_name="val_accuracy")
    assert report.store.enabled  # METADATA_DB_URL is set by the store fixture
    report.start(digits["version_id"], {"lr": 0.1})
    for step in (1, 2, 3):
        report.log(kind="train", step=step, epoch=0, loss=1.0 / step)
    ckpt.save(3, {"w": torch.zeros(2), **report.state_dict()}, metric=0.5)
    report.log(kind="train", step=4, epoch=0, loss=0.2)
    code = report.finish("preempted", steps=4, epochs_done=0)
    assert code == api.EXIT_PREEMPTED
    run_dir = Path(ckpt.run_url.removeprefix("file://"))  # the store's lt_env moved CHECKPOINT_URL
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "preempted" and result["exit_code"] == 75 and result["steps"] == 4
    assert result["checkpoint_url"] == ckpt.step_url(3)
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3, 4]
    row = get_run("api-run")
    assert row["status"] == "preempted" and row["version_id"] == digits["version_id"]
    assert [c["step"] for c in row["checkpoints"]] == [3]
    # A retry resumes the metric history at the checkpoint's step: no duplicate lines.
    again = api.checkpoints()
    state = again.load_latest()
    report2 = api.RunReport.from_env(again)
    report2.start(digits["version_id"], {"lr": 0.1})  # every attempt: the store counts it
    report2.load_state_dict(state, up_to_step=state["step"])
    report2.log(kind="train", step=4, epoch=0, loss=0.1)
    assert report2.finish("succeeded", steps=4, best_metric=0.5) == api.EXIT_OK
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3, 4] and lines[-1]["loss"] == 0.1
    row = get_run("api-run")
    assert row["status"] == "succeeded" and row["attempts"] == 2


def test_preemption_turns_a_real_sigterm_into_a_flag_and_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with api.Preemption() as stop:
        assert not stop.should_stop()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.should_stop()
    assert signal.getsignal(signal.SIGTERM) == before


def test_the_adapter_evaluation_mode_gives_every_sample_once_across_ranks() -> None:
    from tests.training.trainer_support import digits_reader

    val = digits_reader(200).split("val")  # 40 samples
    parts = [
        api.VersionDataset(
            val, batch_size=16, shuffle=False, drop_last=False, rank=r, world_size=3
        ).plan(0)
        for r in range(3)
    ]
    seen = [i for p in parts for b in p for i in b]
    assert sorted(seen) == list(range(40)) and len(seen) == 40
    assert parts[1] == [list(range(1, 40, 3))]  # 40 < 3 x 16: one batch, every third sample

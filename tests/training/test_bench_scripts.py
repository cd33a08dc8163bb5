"""The trainer benchmarks run: bench/train_gpu.py says "no CUDA" and exits 0 on a CPU machine,
and its --cpu-smoke mode drives every variant's code path (model, AMP, checkpointing,
channels_last) for real on CPU, so the GPU run does not fail on a typo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.training.trainer_support import REPO


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_train_gpu_without_cuda_exits_0() -> None:
    proc = subprocess.run(
        [sys.executable, "bench/train_gpu.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA" in proc.stdout


@pytest.mark.slow
def test_train_gpu_cpu_smoke_runs_every_variant(tmp_path) -> None:
    out = tmp_path / "gpu.md"
    proc = subprocess.run(
        [sys.executable, "bench/train_gpu.py", "--cpu-smoke", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.with_name("gpu.md.json").read_text())
    names = [r["variant"] for r in data["rows"]]
    assert "fp32 (baseline, TF32 off)" in names and "AMP bf16 + grad checkpointing" in names
    assert all(r["final_loss"] == r["final_loss"] for r in data["rows"])  # finite, not NaN
    assert out.read_text().startswith("## bench/train_gpu.py")


@pytest.mark.slow
def test_train_bench_api_figures_run_and_report_both_ratios() -> None:
    """bench/train.py --api: the adapter against the earlier loader, and the checkpoint
    cost, each with its target (a smoke run: tiny sizes, the figures themselves not checked)."""
    proc = subprocess.run(
        [
            sys.executable,
            "bench/train.py",
            "--api",
            "--rounds",
            "1",
            "--ckpt-steps",
            "55",
            "--api-epochs",
            "1",
            # ResNet steps at batch 8: the smoke run checks the figures are made, not their size
            "--batch",
            "8",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "**adapter / baseline**" in proc.stdout and "(target >= 0.95x)" in proc.stdout
    assert "**blocked / the 50 steps between checkpoints**" in proc.stdout
    assert "(ResNet width 32, batch 8)" in proc.stdout

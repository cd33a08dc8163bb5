"""metrics.jsonl: one JSON line per logged train step ("kind": "train": step, epoch, loss, lr,
grad_norm, samples_per_s, mem_mb) and per epoch end ("kind": "epoch": train/val loss and accuracy,
peak memory). The records also travel in every checkpoint, so after a resume the file is rewritten
with exactly the history up to the checkpoint and continues from there: no gap, no duplicates."""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path
from typing import Any

import torch


class MetricsLog:
    def __init__(self, path: Path | None, records: list[dict[str, Any]] | None = None) -> None:
        self.path = path  # None on ranks other than 0: only rank 0 writes
        self.records: list[dict[str, Any]] = list(records or [])
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            with tmp.open("w") as fh:
                for rec in self.records:
                    fh.write(json.dumps(rec) + "\n")
            os.replace(tmp, self.path)
            self._fh = self.path.open("a", buffering=1)
        else:
            self._fh = None

    def write(self, record: dict[str, Any]) -> None:
        clean = {k: (round(v, 7) if isinstance(v, float) else v) for k, v in record.items()}
        self.records.append(clean)
        if self._fh is not None:
            self._fh.write(json.dumps(clean) + "\n")

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def memory_mb(device: torch.device) -> float:
    """Memory in use now: the CUDA allocator's, or this process's resident set on CPU."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device) / 2**20
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def peak_memory_mb(device: torch.device) -> float:
    """Peak since the last reset (CUDA), or the process's peak resident set (CPU)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def regression_sums(loss_fn: Any, target: Any, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One val batch of a regressor: [loss sum, n, squared-error sum, absolute-error sum]
    in the target's own unit (``target.to_target`` inverts the training transform), plus a
    zero slot so the sums line up with evaluate()'s five."""
    n = int(y.numel())
    err = target.to_target(pred).double() - y.double().reshape(-1)
    loss = float(loss_fn(pred, y)) * n
    return torch.tensor(
        [loss, float(n), float((err * err).sum()), float(err.abs().sum()), 0.0],
        dtype=torch.float64,
    )


def regression_metrics(sums: torch.Tensor) -> dict[str, Any]:
    """val_loss (the training loss on the encoded target), val_rmse and val_mae (in the
    target's unit; lower is better: the loop hands them to the checkpoint manager negated)."""
    n = float(sums[1])
    if n == 0:
        return {}
    return {
        "val_loss": float(sums[0]) / n,
        "val_rmse": (float(sums[2]) / n) ** 0.5,
        "val_mae": float(sums[3]) / n,
        "val_samples": int(n),
    }

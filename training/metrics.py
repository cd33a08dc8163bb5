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

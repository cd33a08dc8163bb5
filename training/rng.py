"""Every RNG a run uses (torch, CUDA, numpy, Python): seeded once, and captured/restored in a
form ``torch.load(weights_only=True)`` accepts, so a resumed run draws the same numbers."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture_rng(device: torch.device) -> dict[str, Any]:
    """All RNG states in types torch.load(weights_only=True) accepts (no numpy arrays, no tuples
    of odd types)."""
    np_state = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "algo": str(np_state[0]),
            "keys": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": {
            "version": int(py_version),
            "internal": torch.tensor(py_internal, dtype=torch.int64),
            "gauss": py_gauss,
        },
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"].cpu())
    n = state["numpy"]
    np.random.set_state(
        (
            n["algo"],
            n["keys"].numpy().astype(np.uint32),
            n["pos"],
            n["has_gauss"],
            n["cached_gaussian"],
        )
    )
    p = state["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["internal"].tolist()), p["gauss"]))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state_all([t.cpu() for t in state["cuda"]])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)

"""The process around the loop: device and backend settings, SIGTERM as a flag, optimizer
parameter groups, and every RNG state in a form ``torch.load(weights_only=True)`` accepts."""

from __future__ import annotations

import logging
import os
import random
import signal
from typing import Any, Self

import numpy as np
import torch
from torch import nn

from training.config import ConfigError, TrainConfig

log = logging.getLogger("training")


class StopRequested(Exception):
    """SIGTERM arrived; a checkpoint of the finished step has been saved (exit code 75)."""


class _SigtermHandler:
    """Installs ``_handle`` for SIGTERM and puts the previous handler back on ``uninstall``."""

    _previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        raise NotImplementedError

    def install(self) -> Self:
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None


class Preemption(_SigtermHandler):
    """Turns SIGTERM into a flag the loop checks between steps: the step in flight finishes,
    then the loop saves and stops with exit 75 (the public API's preemption helper; the
    built-in loop checks it the same way). A second SIGTERM does the same (no hard exit
    mid-save). ``install()``/``uninstall()``, or use it as a context manager.

    Under DDP the signal may reach one rank only, or the ranks at different steps:
    ``should_stop()`` is the flag OR-ed over all ranks (one tiny collective), so every rank
    stops after the same step and takes part in the same last checkpoint."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        log.warning("SIGTERM received: finishing the current step, then saving a checkpoint")

    def __enter__(self) -> Preemption:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def should_stop(self) -> bool:
        """True on every rank once any rank got SIGTERM (call it at the same step on all)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return self.requested
        flag = torch.tensor([float(self.requested)])
        if dist.get_backend() == "nccl":
            flag = flag.cuda()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


SignalFlag = Preemption  # the loop's earlier name


class TermSignal(BaseException):
    """SIGTERM outside the training loop (exit code 75, like StopRequested). A BaseException on
    purpose: library code that wraps any Exception (botocore turns one raised inside its HTTP
    call into an HTTPClientError) must not turn the stop into an ordinary failure."""


class RaiseOnTerm(_SigtermHandler):
    """Outside the training loop a SIGTERM has no step to finish: while armed it raises
    TermSignal at once, so the run unwinds (its temp folder removed, result.json written)
    instead of dying where it stands. Disarmed while the run writes its outputs: those are
    short, and the orchestrator's kill after its grace period still ends the process."""

    def __init__(self) -> None:
        self.armed = True
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.armed:
            self.armed = False  # one exception; a second SIGTERM must not hit the cleanup
            raise TermSignal("stopped by SIGTERM outside the training loop (setting up or loading)")
        log.warning("SIGTERM received while writing the run's outputs: finishing them first")


def resolve_device(kind: str, local_rank: int = 0) -> torch.device:
    if kind == "cuda" or (kind == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError(
                "TRAIN_DEVICE / device: cuda was asked for but no CUDA device is available"
            )
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def deterministic_on(cfg: TrainConfig, device: torch.device) -> bool:
    mode = cfg.runtime.deterministic
    return mode == "on" or (mode == "auto" and device.type == "cpu")


def configure_backends(cfg: TrainConfig, device: torch.device) -> None:
    det = deterministic_on(cfg, device)
    if det and device.type == "cuda":
        # cuBLAS needs a fixed workspace for reproducible matmuls; must be set before its init.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(det, warn_only=device.type == "cuda")
    if device.type == "cuda":
        # Fixed shapes (drop_last, fixed batch) let cudnn pick the fastest kernels once.
        torch.backends.cudnn.benchmark = bool(cfg.runtime.cudnn_benchmark and not det)
        torch.backends.cudnn.deterministic = det
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on weight matrices and conv kernels only: decaying norm gains and biases
    pulls them to 0, which only hurts (they don't cause overfitting)."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay, "name": "decay"},
        {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"},
    ]


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    o = cfg.optim
    groups = param_groups(model, o.weight_decay)
    if o.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=o.lr, momentum=o.momentum)
    return torch.optim.AdamW(groups, lr=o.lr)


# ---------------------------------------------------------------------------------- RNG state
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


def release_cached_memory(device: torch.device, enabled: bool = True) -> bool:
    """Hand the CUDA caching allocator's free blocks back at an epoch end (never per step: that
    forces a cudaMalloc per step). A no-op on CPU. Returns whether it ran."""
    if enabled and device.type == "cuda":
        torch.cuda.empty_cache()
        return True
    return False

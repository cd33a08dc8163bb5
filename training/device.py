"""The device a run trains on and the backend switches that go with it: determinism, cudnn,
TF32, and handing cached CUDA memory back."""

from __future__ import annotations

import os

import torch

from training.config import ConfigError, TrainConfig


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


def release_cached_memory(device: torch.device, enabled: bool = True) -> bool:
    """Hand the CUDA caching allocator's free blocks back at an epoch end (never per step: that
    forces a cudaMalloc per step). A no-op on CPU. Returns whether it ran."""
    if enabled and device.type == "cuda":
        torch.cuda.empty_cache()
        return True
    return False

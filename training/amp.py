"""Mixed precision in one place: which dtype autocast uses, and whether a GradScaler runs.

The loop uses exactly two things from here (nanoGPT's "AMP in two lines"): the `autocast()`
context around the forward pass, and `plan.scaler` (a GradScaler that is a no-op unless fp16).
The model's parameters are never cast, so BatchNorm weights and running statistics stay fp32;
autocast itself keeps batch_norm in fp32 and runs convolutions and matmuls in the low dtype.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from training.config import ConfigError


@dataclass(frozen=True)
class AmpPlan:
    mode: str  # the resolved mode: fp16, bf16 or off
    device_type: str
    dtype: torch.dtype | None

    @property
    def enabled(self) -> bool:
        return self.dtype is not None

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def make_scaler(self) -> torch.amp.GradScaler:
        # Only fp16 needs loss scaling: its 5-bit exponent underflows small gradients; bf16
        # has fp32's range.
        return torch.amp.GradScaler(self.device_type, enabled=self.mode == "fp16")


def resolve_amp(mode: str, device: torch.device) -> AmpPlan:
    """auto → bf16 on GPUs that support it (Ampere+), fp16 on older ones, off on CPU (CPU
    bf16 autocast only pays on CPUs with AMX/AVX512-BF16; ask for it with ``bf16``)."""
    kind = device.type
    if mode == "auto":
        if kind == "cuda":
            mode = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        else:
            mode = "off"
    if mode == "off":
        return AmpPlan("off", kind, None)
    if mode == "fp16" and kind == "cpu":
        # fp16 autocast on CPU exists but is slow and its GradScaler path is not worth it;
        # refusing beats a silently slow run.
        raise ConfigError("TRAIN_AMP / amp: fp16 needs a CUDA device; use bf16 or off on CPU")
    if mode == "bf16" and kind == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("TRAIN_AMP / amp: this GPU does not support bf16; use fp16 or auto")
    return AmpPlan(mode, kind, torch.float16 if mode == "fp16" else torch.bfloat16)

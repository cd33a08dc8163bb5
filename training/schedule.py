"""The learning-rate schedule: linear warmup, then cosine decay to a floor.

A pure function of the step (`lr_factor`), wrapped in `torch.optim.lr_scheduler.LambdaLR` so
its state (just the step count) travels in the checkpoint like any scheduler's.
"""

from __future__ import annotations

import math

import torch


def default_warmup(total_steps: int, requested: int = -1) -> int:
    """-1 → max(100, 10 % of the run), capped at 20 % of the run so a tiny run still decays."""
    if requested >= 0:
        return min(requested, max(total_steps - 1, 0))
    warm = max(100, math.ceil(0.1 * total_steps))
    return max(1, min(warm, total_steps // 5)) if total_steps > 1 else 0


def lr_factor(step: int, *, warmup: int, total: int, floor: float) -> float:
    """Multiplier of the peak LR for the update made at ``step`` (0-based).

    Step 0 of a warmup already gets 1/(warmup) of the LR (never 0: a zero-LR step is wasted);
    the last warmup step reaches the peak; the cosine then runs from 1 to ``floor`` at the last
    step ``total - 1``.
    """
    if total <= 0:
        return 1.0
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    decay_steps = max(total - 1 - warmup, 0)
    if decay_steps == 0:
        return 1.0
    progress = min(max((step - warmup) / decay_steps, 0.0), 1.0)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_scheduler(
    optimizer: torch.optim.Optimizer, *, warmup: int, total: int, floor: float
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, warmup=warmup, total=total, floor=floor)
    )

"""The optimizer of a run, with weight decay on weight matrices and conv kernels only."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from training.config import TrainConfig


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

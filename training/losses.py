"""The training loss: cross-entropy (optionally label-smoothed), or focal loss; optional class
weights, from the train split's label counts or given explicitly."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from training.config import ConfigError


class FocalLoss(nn.Module):
    """Lin et al.'s focal loss: cross-entropy scaled by (1 - p_t)^gamma, so confidently right
    samples count less. gamma = 0 is exactly (weighted) cross-entropy."""

    def __init__(
        self, gamma: float = 2.0, weight: torch.Tensor | None = None, label_smoothing: float = 0.0
    ) -> None:
        super().__init__()
        self.gamma = gamma
        self.label_smoothing = label_smoothing
        self.register_buffer("weight", weight if weight is not None else None, persistent=False)

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logp = F.log_softmax(logits.float(), dim=-1)
        ce = F.nll_loss(logp, target, reduction="none")
        if self.label_smoothing:
            ce = (1 - self.label_smoothing) * ce - self.label_smoothing * logp.mean(dim=-1)
        pt = logp.gather(1, target[:, None]).squeeze(1).exp()
        loss = (1 - pt).clamp(min=0).pow(self.gamma) * ce
        if self.weight is not None:
            w = self.weight[target]
            return (loss * w).sum() / w.sum()
        return loss.mean()


def class_weights(spec: str, counts: Sequence[int], num_classes: int) -> torch.Tensor | None:
    """none → None; balanced → n / (k · count_c) (absent classes get 0); else the listed numbers."""
    if spec == "none":
        return None
    if spec == "balanced":
        counts_t = torch.tensor([float(c) for c in counts], dtype=torch.float32)
        total, present = counts_t.sum(), (counts_t > 0).sum()
        return torch.where(
            counts_t > 0, total / (present * counts_t.clamp(min=1)), torch.zeros_like(counts_t)
        )
    weights = [float(p) for p in spec.split(",")]
    if len(weights) != num_classes:
        raise ConfigError(
            f"TRAIN_CLASS_WEIGHTS / class_weights: {len(weights)} weights given for {num_classes} classes"
        )
    return torch.tensor(weights, dtype=torch.float32)


def build_loss(
    kind: str, *, label_smoothing: float, focal_gamma: float, weight: torch.Tensor | None
) -> nn.Module:
    if kind == "focal":
        return FocalLoss(focal_gamma, weight=weight, label_smoothing=label_smoothing)
    return nn.CrossEntropyLoss(weight=weight, label_smoothing=label_smoothing)

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


# ------------------------------------------------------------------------------ regression
LOWER_IS_BETTER = frozenset({"val_loss", "val_rmse", "val_mae"})


class RegressionTarget(nn.Module):
    """A regression head's view of the target: the optional ``log1p`` transform, then
    standardisation by the train split's mean and std (so one learning rate fits targets in
    any unit). The model predicts the standardised value; ``to_target`` inverts both, so
    metrics are in the target's own unit. Mean and std are recomputed from the version's train
    targets on every start (a pure function of the version: a resume gets the same ones)."""

    def __init__(self, train_targets: Sequence[float] | torch.Tensor, transform: str = "none"):
        super().__init__()
        if transform not in ("none", "log1p"):
            raise ConfigError(f"TRAIN_TARGET_TRANSFORM: must be none or log1p (got {transform!r})")
        self.transform = transform
        y = torch.as_tensor(train_targets, dtype=torch.float64)
        if transform == "log1p" and bool((y <= -1).any()):
            raise ConfigError(
                "TRAIN_TARGET_TRANSFORM=log1p: the train split has targets <= -1 "
                f"(min {float(y.min()):g}); log1p is undefined there"
            )
        t = self._forward_transform(y)
        self.register_buffer("center", t.mean().float() if t.numel() else torch.tensor(0.0))
        scale = t.std(unbiased=False).float() if t.numel() > 1 else torch.tensor(1.0)
        self.register_buffer("scale", scale if float(scale) > 0 else torch.tensor(1.0))

    def _forward_transform(self, y: torch.Tensor) -> torch.Tensor:
        return torch.log1p(y) if self.transform == "log1p" else y

    def encode(self, y: torch.Tensor) -> torch.Tensor:
        """Target → what the model is trained to predict."""
        return (self._forward_transform(y.float()) - self.center) / self.scale

    def to_target(self, pred: torch.Tensor) -> torch.Tensor:
        """The model's output (B, 1) or (B,) → a prediction in the target's unit."""
        t = pred.float().reshape(-1) * self.scale + self.center
        return torch.expm1(t) if self.transform == "log1p" else t


class RegressionLoss(nn.Module):
    """MSE or Huber loss between the model's (B, 1) output and the encoded target."""

    def __init__(self, target: RegressionTarget, kind: str = "mse", delta: float = 1.0) -> None:
        super().__init__()
        if kind not in ("mse", "huber"):
            raise ConfigError(f"TRAIN_REGRESSION_LOSS: must be mse or huber (got {kind!r})")
        self.target = target
        self.kind, self.delta = kind, delta

    def forward(self, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        p, t = pred.float().reshape(-1), self.target.encode(y)
        if self.kind == "huber":
            return F.huber_loss(p, t, delta=self.delta)
        return F.mse_loss(p, t)

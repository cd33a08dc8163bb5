"""Weight initialisation that follows the activation.

He (Kaiming) for ReLU, Xavier for SiLU/GELU (smooth, roughly linear near 0), BN gamma 1 / beta 0,
and gamma 0 for the last BN of each residual branch, so every block starts as the identity and a
deep net trains from step one (Goyal et al., "Accurate, large minibatch SGD"). Called only on a
fresh model: weights loaded from a checkpoint are never re-initialised.
"""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def init_weights(model: nn.Module, activation: str) -> None:
    for m in model.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            if activation == "relu":
                nn.init.kaiming_normal_(
                    m.weight,
                    mode="fan_out" if isinstance(m, nn.Conv2d) else "fan_in",
                    nonlinearity="relu",
                )
            else:
                nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.modules.batchnorm._BatchNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    for m in model.modules():
        if getattr(m, "is_last_in_branch", False):
            nn.init.zeros_(m.weight)
    # The classifier starts small so the first logits are near-uniform (loss ≈ log(classes)).
    last = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if last:
        nn.init.normal_(last[-1].weight, std=0.01)
        if last[-1].bias is not None:
            nn.init.zeros_(last[-1].bias)

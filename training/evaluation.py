"""The validation pass: a Trainer's model over its val split, under eval() and no_grad(), summed
over the ranks into the val metrics (classification: loss and accuracy; regression: loss, RMSE
and MAE in the target's own unit).

`Trainer.evaluate` (training/loop.py) is `evaluate_val`; what the metrics mean is
training/metrics.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from training.distributed import all_reduce_sum
from training.metrics import regression_metrics, regression_sums

if TYPE_CHECKING:
    from training.loop import Trainer


@torch.no_grad()
def evaluate_val(t: Trainer) -> dict[str, Any]:
    """Loss and accuracy on the val split, under eval() and no_grad(); the model is back in
    train mode afterwards (asserted: BN in eval mode for the next step would silently train
    on running statistics)."""
    was_training = t.model.training
    t.model.eval()
    # Classification: CE sum, correct, n. Regression: loss sum, n, squared and absolute
    # errors in the target's own unit (after the inverse of the target transform).
    sums = torch.zeros(5 if t.regression else 3, dtype=torch.float64)
    try:
        t.val_data.set_epoch(0)
        for xb, yb in t.val_data:
            x = t.transform(xb.to(t.device))
            y = yb.to(t.device)
            with t.plan.autocast():
                logits = t.model(x)
            if t.regression:
                sums += regression_sums(t.loss_fn, t.target, logits, y)
                continue
            # Plain cross-entropy: comparable across loss options and label smoothing.
            sums[0] += float(F.cross_entropy(logits.float(), y, reduction="sum"))
            sums[1] += float((logits.argmax(-1) == y).sum())
            sums[2] += y.numel()
    finally:
        t.model.train(was_training)
    if t.model.training != was_training:
        raise AssertionError("evaluate() did not restore the model's training mode")
    all_reduce_sum(sums, t.dist)
    if t.regression:
        return regression_metrics(sums)
    if sums[2] == 0:
        return {}
    return {
        "val_loss": float(sums[0] / sums[2]),
        "val_accuracy": float(sums[1] / sums[2]),
        "val_samples": int(sums[2]),
    }

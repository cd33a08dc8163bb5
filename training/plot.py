"""A PNG of the run's curves: train/val loss, learning rate, accuracy (matplotlib, Agg backend:
no display in a container)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def plot_metrics(records: Sequence[dict[str, Any]], dest: Path, *, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    train = [r for r in records if r.get("kind") == "train"]
    epochs = [r for r in records if r.get("kind") == "epoch"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[0]
    ax.plot(
        [r["step"] for r in train], [r["loss"] for r in train], lw=0.8, label="train loss (step)"
    )
    if epochs:
        ax.plot(
            [r["step"] for r in epochs], [r.get("val_loss") for r in epochs], "o-", label="val loss"
        )
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log") if all(
        r["loss"] > 0 for r in train if r["loss"] == r["loss"]
    ) and train else None
    ax.legend()
    ax = axes[1]
    ax.plot([r["step"] for r in train], [r["lr"] for r in train])
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax = axes[2]
    if epochs:
        ax.plot(
            [r["epoch"] for r in epochs],
            [r.get("train_accuracy") for r in epochs],
            "o-",
            label="train",
        )
        ax.plot(
            [r["epoch"] for r in epochs], [r.get("val_accuracy") for r in epochs], "o-", label="val"
        )
        ax.legend()
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, dest)
    return dest

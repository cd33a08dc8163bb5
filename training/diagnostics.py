"""A loss-curve diagnosis from metrics.jsonl records. Each finding names the rule that fired:

- ``divergence``: the loss went non-finite, or its late smoothed level is well above its best;
- ``plateau``: the train loss stopped improving while still far from its start;
- ``oscillation``: the train loss zig-zags (most consecutive changes flip sign, with large swings);
- ``train_val_gap``: train accuracy far above val accuracy (overfitting), or val loss far above train loss;
- ``sudden_val_drop``: val loss fell sharply in one epoch while train loss barely moved, or val
  beats train by a wide margin: the pattern of validation samples leaking into training.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # "warning" or "error"
    message: str
    step: int | None = None
    epoch: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _smooth(values: Sequence[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def diagnose(records: Sequence[dict[str, Any]], *, min_steps: int = 20) -> list[Finding]:
    train = [r for r in records if r.get("kind") == "train" and "loss" in r]
    epochs = [r for r in records if r.get("kind") == "epoch"]
    findings: list[Finding] = []
    findings += _divergence(train, min_steps)
    if not any(f.rule == "divergence" for f in findings):
        findings += _plateau(train, min_steps)
        findings += _oscillation(train, min_steps)
    findings += _gap(epochs)
    findings += _sudden_val_drop(epochs)
    return findings


def _divergence(train: list[dict], min_steps: int) -> list[Finding]:
    for r in train:
        if not math.isfinite(float(r["loss"])):
            return [
                Finding(
                    "divergence",
                    "error",
                    f"loss became {r['loss']} at step {r['step']}",
                    r["step"],
                    r.get("epoch"),
                )
            ]
    if len(train) < min_steps:
        return []
    losses = [float(r["loss"]) for r in train]
    w = max(3, len(losses) // 10)
    sm = _smooth(losses, w)
    best_i = min(range(len(sm)), key=sm.__getitem__)
    last = sm[-1]
    if best_i < len(sm) - w and last > 1.5 * sm[best_i] + 1e-3 and last > sm[w - 1] * 0.9:
        return [
            Finding(
                "divergence",
                "error",
                f"smoothed train loss rose from its best {sm[best_i]:.4g} (step {train[best_i]['step']}) to {last:.4g}; lower the LR or clip gradients",
                train[-1]["step"],
                train[-1].get("epoch"),
            )
        ]
    return []


def _plateau(train: list[dict], min_steps: int) -> list[Finding]:
    if len(train) < min_steps:
        return []
    losses = [float(r["loss"]) for r in train]
    w = max(3, len(losses) // 10)
    sm = _smooth(losses, w)
    start = sm[w - 1]
    half = len(sm) // 2
    early_best = min(sm[: half + 1])
    late_best = min(sm[half:])
    still_high = late_best > 0.5 * start
    if still_high and late_best > early_best * 0.99:
        return [
            Finding(
                "plateau",
                "warning",
                f"train loss stopped improving over the second half of the run at {late_best:.4g} "
                f"(start {start:.4g}); raise the LR, check the data, or use a bigger model",
                train[half]["step"],
                train[half].get("epoch"),
            )
        ]
    return []


def _oscillation(train: list[dict], min_steps: int) -> list[Finding]:
    if len(train) < min_steps:
        return []
    tail = [float(r["loss"]) for r in train[len(train) // 2 :]]
    diffs = [b - a for a, b in zip(tail[:-1], tail[1:], strict=True)]
    if len(diffs) < 8:
        return []
    flips = sum(1 for a, b in zip(diffs[:-1], diffs[1:], strict=True) if a * b < 0) / (
        len(diffs) - 1
    )
    mean = sum(tail) / len(tail)
    swing = (sum(abs(d) for d in diffs) / len(diffs)) / max(abs(mean), 1e-8)
    if flips > 0.7 and swing > 0.5:
        return [
            Finding(
                "oscillation",
                "warning",
                f"train loss zig-zags: {flips:.0%} of consecutive changes flip sign with mean swing {swing:.0%} of its level; lower the LR",
                train[-1]["step"],
                train[-1].get("epoch"),
            )
        ]
    return []


def _gap(epochs: list[dict]) -> list[Finding]:
    if not epochs:
        return []
    last = epochs[-1]
    ta, va = last.get("train_accuracy"), last.get("val_accuracy")
    if ta is not None and va is not None and ta - va > 0.15:
        return [
            Finding(
                "train_val_gap",
                "warning",
                f"train accuracy {ta:.3f} vs val accuracy {va:.3f} at epoch {last['epoch']}: overfitting; add data, augmentation or weight decay",
                last.get("step"),
                last.get("epoch"),
            )
        ]
    tl, vl = last.get("train_loss"), last.get("val_loss")
    if (
        tl is not None
        and vl is not None
        and math.isfinite(vl)
        and tl > 0
        and vl > 2.0 * tl
        and vl - tl > 0.2
    ):
        return [
            Finding(
                "train_val_gap",
                "warning",
                f"val loss {vl:.4g} is more than twice the train loss {tl:.4g} at epoch {last['epoch']}: overfitting",
                last.get("step"),
                last.get("epoch"),
            )
        ]
    return []


def _sudden_val_drop(epochs: list[dict]) -> list[Finding]:
    # The first epoch is skipped: its train figures are averages over a run that started from
    # random weights, so anything measured at its end looks "better than train".
    out: list[Finding] = []
    for prev, cur in zip(epochs[1:-1], epochs[2:], strict=True):
        pv, cv = prev.get("val_loss"), cur.get("val_loss")
        pt, ct = prev.get("train_loss"), cur.get("train_loss")
        if None in (pv, cv, pt, ct) or pv <= 0 or pt <= 0:
            continue
        val_drop = (pv - cv) / pv
        train_drop = (pt - ct) / pt
        if val_drop > 0.5 and train_drop < 0.2:
            out.append(
                Finding(
                    "sudden_val_drop",
                    "warning",
                    f"val loss fell {val_drop:.0%} in epoch {cur['epoch']} while train loss moved {train_drop:.0%}: "
                    "check for validation samples leaking into training",
                    cur.get("step"),
                    cur.get("epoch"),
                )
            )
    late = epochs[1:][-2:]
    if len(late) == 2 and all(
        e.get("train_accuracy") is not None
        and e.get("val_accuracy") is not None
        and e["val_accuracy"] - e["train_accuracy"] > 0.1
        and e["val_accuracy"] > 0.5
        for e in late
    ):
        last = late[-1]
        out.append(
            Finding(
                "sudden_val_drop",
                "warning",
                f"val accuracy {last['val_accuracy']:.3f} beats train accuracy {last['train_accuracy']:.3f} by a wide margin "
                "for two epochs: check for leakage or a mislabelled train split",
                last.get("step"),
                last.get("epoch"),
            )
        )
    return out


def render(findings: Sequence[Finding]) -> str:
    if not findings:
        return "no findings: the loss curve looks healthy\n"
    return "".join(f"[{f.severity}] {f.rule}: {f.message}\n" for f in findings)

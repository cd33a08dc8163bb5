"""The loss-curve diagnosis: each rule fires on the curve it describes (and names itself), and a
healthy curve raises none. The plot is a real PNG of the records."""

from __future__ import annotations

import math

from training.diagnostics import diagnose, render
from training.plot import plot_metrics


def train_records(losses: list[float]) -> list[dict]:
    return [
        {"kind": "train", "step": i + 1, "epoch": 0, "loss": v, "lr": 0.01}
        for i, v in enumerate(losses)
    ]


def epoch_records(rows: list[tuple[float, float, float, float]]) -> list[dict]:
    return [
        {
            "kind": "epoch",
            "step": (e + 1) * 10,
            "epoch": e,
            "train_loss": tl,
            "val_loss": vl,
            "train_accuracy": ta,
            "val_accuracy": va,
        }
        for e, (tl, vl, ta, va) in enumerate(rows)
    ]


def rules(records: list[dict]) -> set[str]:
    return {f.rule for f in diagnose(records)}


HEALTHY = [2.3 * math.exp(-i / 25) + 0.05 for i in range(100)]


def test_healthy_run_has_no_findings() -> None:
    recs = train_records(HEALTHY) + epoch_records(
        [(1.0, 1.05, 0.7, 0.68), (0.4, 0.45, 0.9, 0.88), (0.1, 0.12, 0.97, 0.96)]
    )
    assert diagnose(recs) == []
    assert "healthy" in render([])


def test_divergence_on_rising_or_non_finite_loss() -> None:
    rising = [2.0 - i * 0.01 for i in range(50)] + [1.5 + i * 0.2 for i in range(50)]
    assert "divergence" in rules(train_records(rising))
    nan = HEALTHY[:30] + [float("nan")]
    found = diagnose(train_records(nan))
    assert found[0].rule == "divergence" and found[0].step == 31


def test_plateau_when_loss_stops_improving_early() -> None:
    flat = [2.3 - 0.02 * i for i in range(10)] + [2.1] * 90
    assert rules(train_records(flat)) == {"plateau"}
    assert "plateau" not in rules(train_records(HEALTHY))


def test_oscillation_when_loss_zigzags() -> None:
    zigzag = HEALTHY[:50] + [0.3 if i % 2 else 1.2 for i in range(50)]
    assert "oscillation" in rules(train_records(zigzag))


def test_train_val_gap_on_overfitting() -> None:
    assert rules(epoch_records([(0.5, 0.6, 0.8, 0.78), (0.05, 0.9, 0.99, 0.75)])) == {
        "train_val_gap"
    }


def test_sudden_val_drop_suggests_leakage() -> None:
    recs = epoch_records([(2.0, 1.2, 0.4, 0.6), (1.0, 1.1, 0.6, 0.58), (0.95, 0.3, 0.62, 0.93)])
    found = [f for f in diagnose(recs) if f.rule == "sudden_val_drop"]
    assert found and "leak" in found[0].message and found[0].epoch == 2
    # val beating train for two epochs in a row fires too
    recs = epoch_records([(2.0, 1.2, 0.4, 0.6), (1.0, 0.5, 0.6, 0.9), (0.9, 0.45, 0.62, 0.93)])
    assert "sudden_val_drop" in rules(recs)


def test_first_epoch_averages_do_not_raise_false_alarms() -> None:
    # After epoch 0 the epoch-averaged train accuracy lags the model's end-of-epoch val accuracy.
    assert diagnose(epoch_records([(2.0, 0.9, 0.6, 0.77)])) == []
    assert diagnose(epoch_records([(2.0, 0.9, 0.6, 0.77), (0.5, 0.2, 0.93, 0.96)])) == []


def test_plot_writes_a_png(tmp_path) -> None:
    recs = train_records(HEALTHY) + epoch_records([(1.0, 1.05, 0.7, 0.68), (0.4, 0.45, 0.9, 0.88)])
    out = plot_metrics(recs, tmp_path / "curves.png", title="t")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert not list(tmp_path.glob("*.tmp*"))

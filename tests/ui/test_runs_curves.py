"""The run page's charts from metrics.jsonl records (pipeline/ui/run_curves.py): which series
each chart gets, RMSE instead of accuracy for a regression run, long runs thinned without
losing a divergence."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from pipeline.ui.run_curves import MAX_POINTS, compare_charts, run_charts, thin

NS = {"s": "http://www.w3.org/2000/svg"}


def _series(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    return [g.get("data-series") for g in root.findall("s:g[@class='series']", NS)]


def _train(n: int) -> list[dict]:
    return [
        {"kind": "train", "step": i, "epoch": i // 10, "loss": 2.0 / (i + 1), "lr": 0.1}
        for i in range(n)
    ]


def test_a_regression_run_gets_an_rmse_chart_not_accuracy():
    epochs = [
        {
            "kind": "epoch",
            "step": 10 * e,
            "epoch": e,
            "train_loss": 1.0,
            "val_loss": 1.2,
            "val_rmse": 50.0 - e,
            "val_mae": 40.0 - e,
        }
        for e in range(3)
    ]
    charts = run_charts(_train(30) + epochs)
    assert [c["title"] for c in charts] == ["loss", "learning rate", "RMSE"]
    assert _series(charts[2]["svg"]) == ["val rmse"]
    both = compare_charts("A x", epochs, "B y", epochs)
    assert both[1]["title"] == "RMSE"
    assert _series(both[1]["svg"]) == ["A x val rmse", "B y val rmse"]


def test_a_classification_run_gets_accuracy_and_lines_without_kind_count_as_steps():
    epochs = [
        {
            "kind": "epoch",
            "step": 10,
            "epoch": 0,
            "train_accuracy": 0.5,
            "val_accuracy": 0.6,
            "val_loss": 1.0,
        }
    ]
    own = [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}]  # a user's own trainer
    charts = run_charts(own + epochs)
    assert charts[2]["title"] == "accuracy"
    assert _series(charts[2]["svg"]) == ["train accuracy", "val accuracy"]
    assert _series(charts[0]["svg"]) == ["train loss (step)", "val loss"]


def test_long_runs_are_thinned_but_keep_their_last_point_and_every_nan():
    pts = [(float(i), 1.0) for i in range(10 * MAX_POINTS)]
    pts[4321] = (4321.0, math.nan)
    out = thin(pts)
    assert len(out) <= MAX_POINTS + 2
    assert out[-1] == pts[-1] and any(math.isnan(y) for _x, y in out)
    assert thin(pts[:10]) == pts[:10]

"""A run's curves from its metrics.jsonl records, as SVG charts (``pipeline.ui.charts``).

Records (training/metrics.py): ``kind: "train"`` per logged step (step, epoch, loss, lr, ...)
and ``kind: "epoch"`` per epoch end (train_loss, train_accuracy, val_loss, val_accuracy, ...).
A regression run logs RMSE instead of accuracy (any ``*rmse`` key of an epoch record): its
third chart is RMSE. A user's own trainer may log lines without ``kind``; a line with ``loss``
counts as a train step then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pipeline.ui.charts import PALETTE, Series, line_chart

# A chart is ~500 px wide: more points than this cannot be seen, only paid for in page bytes.
MAX_POINTS = 1000


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def thin(points: list[tuple[float, float]], most: int = MAX_POINTS) -> list[tuple[float, float]]:
    """Every k-th point (and the last), so a long run still draws its whole shape; a
    non-finite point is always kept so a divergence is never thinned away."""
    if len(points) <= most:
        return points
    k = math.ceil(len(points) / most)
    return [
        p
        for i, p in enumerate(points)
        if i % k == 0 or i == len(points) - 1 or not math.isfinite(p[1])
    ]


def split(records: Sequence[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    train = [r for r in records if r.get("kind") == "train" or ("kind" not in r and "loss" in r)]
    epochs = [r for r in records if r.get("kind") == "epoch"]
    return train, epochs


def points(rows: Sequence[dict[str, Any]], x: str, y: str) -> list[tuple[float, float]]:
    out = []
    for r in rows:
        xv, yv = _num(r.get(x)), _num(r.get(y))
        if xv is not None and yv is not None:
            out.append((xv, yv))
    return thin(out)


def third_metric(epochs: Sequence[dict[str, Any]]) -> tuple[str, list[str]]:
    """("RMSE", its keys) for a regression run, else ("accuracy", its keys)."""
    keys = sorted({k for r in epochs for k in r})
    rmse = [k for k in keys if k.endswith("rmse")]
    if rmse:
        return "RMSE", rmse
    return "accuracy", [k for k in keys if k.endswith("accuracy")]


def _label(key: str) -> str:
    return key.replace("_", " ")


def run_charts(records: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The run page's charts: loss (log scale), learning rate, accuracy or RMSE."""
    train, epochs = split(records)
    loss = [Series("train loss (step)", points(train, "step", "loss"))]
    for key in ("train_loss", "val_loss"):
        if any(key in e for e in epochs):
            loss.append(Series(_label(key), points(epochs, "step", key), markers=True))
    name, keys = third_metric(epochs)
    return [
        _chart("loss", loss, "step", "loss", log_y=True),
        _chart("learning rate", [Series("lr", points(train, "step", "lr"))], "step", "lr"),
        _chart(
            name,
            [Series(_label(k), points(epochs, "epoch", k), markers=True) for k in keys],
            "epoch",
            name,
        ),
    ]


def compare_charts(
    a_name: str, a_records: Sequence[dict[str, Any]], b_name: str, b_records: Sequence[dict]
) -> list[dict[str, str]]:
    """Both runs on one chart each: loss (train per step, val per epoch) and accuracy/RMSE.
    A run keeps one colour; val is dashed, so the pairs read apart in print too."""
    (at, ae), (bt, be) = split(a_records), split(b_records)
    ca, cb = PALETTE[0], PALETTE[1]
    loss = [
        Series(f"{a_name} train loss", points(at, "step", "loss"), color=ca),
        Series(f"{b_name} train loss", points(bt, "step", "loss"), color=cb),
        Series(f"{a_name} val loss", points(ae, "step", "val_loss"), ca, True, True),
        Series(f"{b_name} val loss", points(be, "step", "val_loss"), cb, True, True),
    ]
    name, keys = third_metric([*ae, *be])
    val = [k for k in keys if k.startswith("val")] or keys[:1]
    metric = [
        Series(f"{n} {_label(k)}", points(e, "epoch", k), c, k.startswith("val"), True)
        for n, e, c in ((a_name, ae, ca), (b_name, be, cb))
        for k in val
    ]
    return [
        _chart("loss", [s for s in loss if s.points], "step", "loss", log_y=True, width=720),
        _chart(name, metric, "epoch", name, width=720),
    ]


def _chart(title: str, series: list[Series], x: str, y: str, **kw: Any) -> dict[str, str]:
    return {
        "title": title,
        "svg": line_chart(series, title=title, x_label=x, y_label=y, css_class=_slug(title), **kw),
    }


def _slug(title: str) -> str:
    return "chart-" + "".join(c if c.isalnum() else "-" for c in title.lower())


def epoch_table(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The per-epoch figures as a table: the columns every epoch record may have."""
    _train, epochs = split(records)
    skip = {"kind"}
    cols: list[str] = []
    for r in epochs:
        cols += [k for k in r if k not in skip and k not in cols]
    first = [c for c in ("epoch", "step") if c in cols]
    return {"columns": first + [c for c in cols if c not in first], "rows": epochs}

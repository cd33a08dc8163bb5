"""The run pages' SVG line charts (pipeline/ui/charts.py), checked on their output: the string
parses as SVG, every series is drawn and named in the legend, ticks are readable numbers, a log
axis gets decades, names are escaped, and a diverged (NaN) loss breaks its line."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from pipeline.ui.charts import Series, line_chart, log_ticks, nice_ticks

NS = {"s": "http://www.w3.org/2000/svg"}


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def _texts(root: ET.Element, group: str) -> list[str]:
    g = root.find(f"s:g[@class='{group}']", NS)
    assert g is not None, group
    return [t.text or "" for t in g.findall("s:text", NS)]


def test_two_series_are_drawn_with_legend_axes_and_labels():
    svg = line_chart(
        [
            Series("train loss", [(0, 2.3), (10, 1.2), (20, 0.6)]),
            Series("val loss", [(10, 1.4), (20, 0.9)], markers=True),
        ],
        title="loss",
        x_label="step",
        y_label="loss",
    )
    root = _parse(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    groups = root.findall("s:g[@class='series']", NS)
    assert [g.get("data-series") for g in groups] == ["train loss", "val loss"]
    paths = [g.find("s:path", NS).get("d") for g in groups]
    assert paths[0].startswith("M") and paths[0].count("L") == 2
    assert paths[1].count("L") == 1
    assert len(groups[1].findall("s:circle", NS)) == 2  # markers on the epoch series
    assert _texts(root, "legend") == ["train loss", "val loss"]
    assert _texts(root, "ticks x") == ["0", "5", "10", "15", "20"]
    assert _texts(root, "ticks y")[0] == "0.5" and _texts(root, "ticks y")[-1] == "2.5"
    assert root.find("s:text[@class='x-label']", NS).text == "step"
    assert root.find("s:text[@class='y-label']", NS).text == "loss"


def test_points_are_placed_inside_the_frame_highest_value_on_top():
    root = _parse(line_chart([Series("a", [(0, 0.0), (1, 1.0)])]))
    frame = root.find("s:rect[@class='frame']", NS)
    x0, y0 = float(frame.get("x")), float(frame.get("y"))
    x1, y1 = x0 + float(frame.get("width")), y0 + float(frame.get("height"))
    d = root.find("s:g[@class='series']/s:path", NS).get("d")
    (ax, ay), (bx, by) = [tuple(map(float, p[1:].split(","))) for p in d.split()]
    assert x0 <= ax < bx <= x1 and y0 <= by < ay <= y1  # SVG y grows downwards


def test_log_scale_ticks_are_decades_and_fall_back_to_linear_for_zero():
    root = _parse(line_chart([Series("loss", [(0, 5.0), (1, 0.5), (2, 0.004)])], log_y=True))
    assert _texts(root, "ticks y") == ["0.001", "0.01", "0.1", "1", "10"]
    assert root.find("s:text[@class='note']", NS) is None
    zero = _parse(line_chart([Series("loss", [(0, 1.0), (1, 0.0)])], log_y=True))
    assert "linear scale" in zero.find("s:text[@class='note']", NS).text
    assert _texts(zero, "ticks y")[0] == "0"


def test_a_nan_loss_breaks_the_line_instead_of_vanishing():
    pts = [(0, 1.0), (1, 0.8), (2, math.nan), (3, math.inf), (4, 0.5), (5, 0.4)]
    root = _parse(line_chart([Series("loss", pts)]))
    paths = root.findall("s:g[@class='series']/s:path", NS)
    assert [p.get("d").count("L") for p in paths] == [1, 1]


def test_names_are_escaped_and_empty_data_says_so():
    evil = '<script>alert(1)</script>"'
    svg = line_chart([Series(evil, [(0, 1.0), (1, 2.0)])], title=evil)
    assert "<script>" not in svg
    root = _parse(svg)
    assert _texts(root, "legend") == [evil]
    assert root.find("s:g[@class='series']", NS).get("data-series") == evil
    empty = _parse(line_chart([Series("lr", [])], title="learning rate"))
    assert empty.find("s:text[@class='empty']", NS).text == "no data"
    assert _parse(line_chart([])).find("s:text[@class='empty']", NS) is not None


def test_a_single_value_sits_inside_a_widened_axis():
    ticks = nice_ticks(0.001, 0.001)
    assert ticks[0] < 0.001 < ticks[-1]
    root = _parse(line_chart([Series("lr", [(0, 0.001), (10, 0.001)])]))
    assert len(_texts(root, "ticks y")) >= 2


def test_tick_helpers_cover_their_range():
    assert nice_ticks(0, 97) == [0, 20, 40, 60, 80, 100]
    assert nice_ticks(0.13, 0.87)[0] <= 0.13 and nice_ticks(0.13, 0.87)[-1] >= 0.87
    assert log_ticks(0.3, 4) == [0.2, 0.5, 1, 2, 5]
    assert log_ticks(1.1, 2.4) == [1, 2, 5]  # the loss is not squashed into 1..10
    with pytest.raises(ValueError, match="log axis"):
        log_ticks(0, 1)
    with pytest.raises(ValueError, match="200x120"):
        line_chart([], width=10)

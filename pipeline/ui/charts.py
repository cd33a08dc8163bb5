"""Line charts as inline SVG strings, drawn on the server: the run pages must work offline, so
no chart library and no CDN. One pure function, ``line_chart(series) -> str``: axes with
"nice" ticks (1-2-5 steps, decades on a log axis), several series with a legend, an optional
log scale for loss curves. Every string that reaches the SVG (series names, labels) is escaped.

A non-finite point (a diverged loss: NaN, inf) breaks its line rather than vanishing silently:
the gap shows where it happened. On a log axis a value <= 0 cannot be drawn either, so the
chart falls back to a linear axis and says so in its subtitle (a loss of 0 is legitimate).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

# Colour-blind-safe (Okabe-Ito), distinct in print too; series beyond them get dashes as well.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#000000")

Point = tuple[float, float]


@dataclass(frozen=True)
class Series:
    """One line: ``points`` as (x, y); ``markers`` draws a dot per point (epoch figures)."""

    name: str
    points: Sequence[Point]
    color: str | None = None
    dashed: bool = False
    markers: bool = False


@dataclass(frozen=True)
class _Axis:
    lo: float
    hi: float
    log: bool
    ticks: list[float] = field(default_factory=list)

    def frac(self, v: float) -> float:
        if self.log:
            return (math.log10(v) - math.log10(self.lo)) / (
                math.log10(self.hi) - math.log10(self.lo)
            )
        return (v - self.lo) / (self.hi - self.lo)


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Ticks at 1, 2 or 5 × 10^k covering [lo, hi], about ``target`` of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"tick range must be finite, got {lo!r}..{hi!r}")
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        # One value: widen around it so it sits mid-chart instead of on an edge.
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    # Counted from integer multiples, not accumulated: adding 0.1 five times is not 0.5.
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Decades bracketing [lo, hi] (both > 0); 1-2-5 steps when it spans at most two decades."""
    if lo <= 0 or hi <= 0:
        raise ValueError(f"a log axis needs values > 0, got {lo!r}..{hi!r}")
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if b == a:
        b += 1
    mults = (1, 2, 5) if b - a <= 2 else (1,)
    every = [m * 10.0**e for e in range(a, b + 1) for m in mults if m * 10.0**e <= 10.0**b]
    # Only the ticks that bracket the data: a loss between 1.1 and 2.4 gets 1-2-5, not 1-10
    # with the curve squashed into the lower third.
    start = max(i for i, t in enumerate(every) if t <= lo * (1 + 1e-9))
    end = min(i for i, t in enumerate(every) if t >= hi * (1 - 1e-9))
    return [float(f"{t:.12g}") for t in every[start : end + 1]]


def fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        return f"{v:.0e}".replace("e-0", "e-").replace("e+0", "e")
    return f"{v:.6g}"


def _axis(values: list[float], *, log: bool, target: int) -> _Axis:
    lo, hi = min(values), max(values)
    if log:
        ticks = log_ticks(lo, hi)
        return _Axis(ticks[0], ticks[-1], True, ticks)
    ticks = nice_ticks(lo, hi, target)
    return _Axis(ticks[0], ticks[-1], False, ticks)


def _runs(points: Iterable[Point]) -> list[list[Point]]:
    """The drawable stretches of a line: a non-finite y ends one stretch."""
    out: list[list[Point]] = [[]]
    for x, y in points:
        if math.isfinite(x) and math.isfinite(y):
            out[-1].append((float(x), float(y)))
        elif out[-1]:
            out.append([])
    return [r for r in out if r]


def line_chart(
    series: Sequence[Series],
    *,
    title: str = "",
    x_label: str = "",
    y_label: str = "",
    log_y: bool = False,
    width: int = 560,
    height: int = 260,
    css_class: str = "",
) -> str:
    """An ``<svg>`` element (a string) plotting every series on shared axes, legend on top."""
    if width < 200 or height < 120:
        raise ValueError(f"a chart needs at least 200x120 pixels, got {width}x{height}")
    stretches = [(i, s, _runs(s.points)) for i, s in enumerate(series)]
    finite = [p for _i, _s, runs in stretches for run in runs for p in run]
    note = ""
    if log_y and any(y <= 0 for _x, y in finite):
        log_y, note = False, "linear scale: some values are <= 0"
    legend_rows = math.ceil(len(series) / 3) if series else 0
    left, right, top = 64, 16, 28 + 16 * legend_rows + (14 if note else 0)
    bottom = 42 if x_label else 28
    pw, ph = width - left - right, height - top - bottom
    name = " ".join(w for w in ["chart", "line-chart", css_class] if w)
    label = title or y_label or "chart"
    out = [
        f'<svg class="{escape(name)}" role="img" aria-label="{escape(label, _ATTR)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="11">',
        f"<title>{escape(label)}</title>",
    ]
    if title:
        out.append(
            f'<text class="title" x="{left}" y="14" font-weight="bold">{escape(title)}</text>'
        )
    if note:
        out.append(
            f'<text class="note" x="{left}" y="{28 + 16 * legend_rows + 8}" fill="#666">'
            f"{escape(note)}</text>"
        )
    if not finite:
        out.append(
            f'<text class="empty" x="{left + pw / 2:.1f}" y="{top + ph / 2:.1f}" '
            f'text-anchor="middle" fill="#666">no data</text></svg>'
        )
        return "".join(out)
    xa = _axis([x for x, _y in finite], log=False, target=6)
    ya = _axis([y for _x, y in finite], log=log_y, target=5)

    def px(x: float) -> float:
        return left + xa.frac(x) * pw

    def py(y: float) -> float:
        return top + (1 - ya.frac(y)) * ph

    # Grid and ticks.
    out.append('<g class="axis y" stroke="#ddd">')
    for t in ya.ticks:
        y = py(t)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}"/>')
    out.append('</g><g class="ticks y" text-anchor="end" fill="#333">')
    for t in ya.ticks:
        out.append(f'<text x="{left - 6}" y="{py(t) + 4:.1f}">{escape(fmt_tick(t))}</text>')
    out.append('</g><g class="axis x" stroke="#ddd">')
    for t in xa.ticks:
        x = px(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}"/>')
    out.append('</g><g class="ticks x" text-anchor="middle" fill="#333">')
    for t in xa.ticks:
        out.append(f'<text x="{px(t):.1f}" y="{top + ph + 16}">{escape(fmt_tick(t))}</text>')
    out.append("</g>")
    out.append(
        f'<rect class="frame" x="{left}" y="{top}" width="{pw}" height="{ph}" '
        'fill="none" stroke="#999"/>'
    )
    if x_label:
        out.append(
            f'<text class="x-label" x="{left + pw / 2:.1f}" y="{height - 6}" '
            f'text-anchor="middle">{escape(x_label)}</text>'
        )
    if y_label:
        cy = top + ph / 2
        out.append(
            f'<text class="y-label" x="12" y="{cy:.1f}" text-anchor="middle" '
            f'transform="rotate(-90 12 {cy:.1f})">{escape(y_label)}</text>'
        )
    # Lines, then the legend (drawn last so a line never hides it).
    for i, s, runs in stretches:
        color = s.color or PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="6 3"' if s.dashed or i >= len(PALETTE) else ""
        out.append(f'<g class="series" data-series="{escape(s.name, _ATTR)}">')
        for run in runs:
            d = " ".join(
                f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for j, (x, y) in enumerate(run)
            )
            out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>')
            if s.markers or len(run) == 1:
                out.extend(
                    f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.6" fill="{color}">'
                    f"<title>{escape(s.name)}: {escape(fmt_tick(x))}, {y:.4g}</title></circle>"
                    for x, y in run
                )
        out.append("</g>")
    out.append('<g class="legend">')
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="6 3"' if s.dashed or i >= len(PALETTE) else ""
        lx, ly = left + (i % 3) * (pw / 3), 28 + (i // 3) * 16
        out.append(
            f'<line x1="{lx:.1f}" x2="{lx + 18:.1f}" y1="{ly - 4}" y2="{ly - 4}" '
            f'stroke="{color}" stroke-width="2"{dash}/>'
            f'<text x="{lx + 24:.1f}" y="{ly}">{escape(s.name)}</text>'
        )
    out.append("</g></svg>")
    return "".join(out)


_ATTR = {'"': "&quot;"}

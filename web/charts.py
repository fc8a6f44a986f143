"""Charts drawn on the server as inline SVG: no script, no CDN, readable without colour (every
series also has a marker shape and a legend entry) and described for screen readers.

``line_chart`` plots numeric series against a numeric x (a step, a seq id); ``bar_chart`` plots
stacked bars per category (a day), one stack part per series (a meter)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

PALETTE = ("#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2", "#4b5563")
WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 36


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]  # (x, y), or (category index, y) for bars


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0]
    if hi - lo <= max(abs(lo), abs(hi)) * 1e-9:
        # flat, or flat but for float noise: a step below the values' precision would never
        # move ``t`` forward
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9 and len(ticks) <= 4 * count:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 12))
    return ticks


def fmt(v: float) -> str:
    """Short, for ticks and tooltips: 0.25, 9999, 12.3k, 1M. Values are rounded before the unit
    is chosen, so 999,999 is 1M (not "1e+03k")."""
    if v == 0:
        return "0"
    if abs(v) < 1:
        return f"{v:.3g}"
    v = float(f"{v:.4g}")
    if abs(v) < 1e4:
        return f"{v:.4g}"
    v = float(f"{v:.3g}")
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v / 1e3:.3g}k"


def _frame(
    title: str, yticks: list[float], y_of, x_labels: list[tuple[float, str]], log_y: bool = False
) -> list[str]:
    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" preserveAspectRatio="xMidYMid meet">',
        f"<title>{escape(title)}</title>",
    ]
    for t in yticks:
        y = y_of(t)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{fmt(10**t if log_y else t)}</text>"
        )
    for x, label in x_labels:
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
            f"{escape(label)}</text>"
        )
    return out


def _legend(series: Sequence[Series]) -> str:
    items = "".join(
        # an SVG square, not a style attribute: the pages' CSP allows no inline style
        f'<li><svg class="swatch" viewBox="0 0 1 1" aria-hidden="true">'
        f'<rect width="1" height="1" fill="{PALETTE[i % len(PALETTE)]}"/></svg>'
        f"{escape(s.name)}</li>"
        for i, s in enumerate(series)
    )
    return f'<ul class="legend">{items}</ul>'


def ema(values: Sequence[float], weight: float) -> list[float]:
    """Exponential moving average with the start debiased (as TensorBoard smooths): ``weight``
    0 is the values themselves, 0.99 nearly flat."""
    if weight <= 0:
        return list(values)
    out, last = [], 0.0
    for n, v in enumerate(values, start=1):
        last = last * weight + (1 - weight) * v
        out.append(last / (1 - weight**n))
    return out


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values (in log10 units) for a log axis over [lo, hi] (log10 units): whole decades
    over a wide range, else 1, 2 and 5 times each decade, always covering the range."""
    first, last = math.floor(lo), math.ceil(hi)
    if last - first >= 3:
        return [float(t) for t in range(first, last + 1)]
    marks = sorted(math.log10(m * 10.0**k) for k in range(first - 1, last + 1) for m in (1, 2, 5))
    below = max((t for t in marks if t <= lo + 1e-9), default=float(first))
    above = min((t for t in marks if t >= hi - 1e-9), default=float(last))
    return [t for t in marks if below - 1e-9 <= t <= above + 1e-9]


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    x_label: str = "",
    log_y: bool = False,
    smooth: float = 0.0,
) -> SafeString:
    """Series against a numeric x, with a hover band per x that names every series' value there
    (a tooltip without script; the page's script shows it at once). ``smooth``: an exponential
    moving average drawn over the faint raw line; ``log_y``: a logarithmic y axis (values ≤ 0 are
    left out)."""
    keep = (lambda y: math.isfinite(y) and y > 0) if log_y else math.isfinite
    drawn = []
    for s in series:
        pts = sorted((x, y) for x, y in s.points if keep(y))
        ys = ema([y for _, y in pts], smooth)
        drawn.append((s, pts, [(x, y) for (x, _), y in zip(pts, ys, strict=True)]))
    points = [p for _, raw, smoothed in drawn for p in (*raw, *smoothed)]
    if not points:
        why = " above zero (a log scale shows only those)" if log_y else ""
        return mark_safe(f'<p class="empty">No data{why} for “{escape(title)}” yet.</p>')  # noqa: S308 — built from escaped text and numbers only
    tf = math.log10 if log_y else (lambda y: y)
    xs, ys = [p[0] for p in points], [tf(p[1]) for p in points]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    yticks = _log_ticks(min(ys), max(ys)) if log_y else nice_ticks(min(ys), max(ys))
    y0, y1 = min(yticks[0], min(ys)), max(yticks[-1], max(ys))

    def x_of(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * (WIDTH - LEFT - RIGHT)

    def y_of(y: float) -> float:
        return HEIGHT - BOTTOM - (tf(y) - y0) / ((y1 - y0) or 1) * (HEIGHT - TOP - BOTTOM)

    xticks = nice_ticks(x0, x1, 6)
    labels = [(x_of(t), fmt(t)) for t in xticks if x0 <= t <= x1]
    out = _frame(title, yticks, lambda t: y_of(10**t if log_y else t), labels, log_y)
    if x_label:
        out.append(
            f'<text class="axis" x="{WIDTH - RIGHT}" y="{HEIGHT - 4}" text-anchor="end">'
            f"{escape(x_label)}</text>"
        )
    for i, (_, raw, smoothed) in enumerate(drawn):
        color = PALETTE[i % len(PALETTE)]
        if not raw:
            continue
        if smooth > 0:
            out.append(_polyline(raw, x_of, y_of, color, 'stroke-width="1" opacity="0.3"'))
        out.append(_polyline(smoothed, x_of, y_of, color, 'stroke-width="2"'))
        if len(raw) <= 60:
            for x, y in smoothed:
                out.append(
                    f'<circle cx="{x_of(x):.1f}" cy="{y_of(y):.1f}" r="2.5" fill="{color}"/>'
                )
    out.append(_hover_bands(title, drawn, x_of, x_label, smooth > 0))
    out.append("</svg>")
    legend = _legend([s for s, _, _ in drawn])
    return mark_safe(f'<figure class="chart-box">{"".join(out)}{legend}</figure>')  # noqa: S308 — built from escaped text and numbers only


def _polyline(pts, x_of, y_of, color: str, extra: str) -> str:
    path = " ".join(f"{x_of(x):.1f},{y_of(y):.1f}" for x, y in pts)
    return f'<polyline fill="none" stroke="{color}" {extra} points="{path}"/>'


MAX_BANDS = 300


def _hover_bands(title: str, drawn, x_of, x_label: str, smoothed: bool) -> str:
    """Invisible bands, one per x (at most MAX_BANDS), each titled with every series' value."""
    at: dict[float, list[str]] = {}
    for s, raw, smooth_pts in drawn:
        for (x, y), (_, sy) in zip(raw, smooth_pts, strict=True):
            text = f"{s.name}: {fmt_value(y)}"
            if smoothed:
                text += f" (smoothed {fmt_value(sy)})"
            at.setdefault(x, []).append(text)
    xs = sorted(at)
    if len(xs) > MAX_BANDS:
        every = math.ceil(len(xs) / MAX_BANDS)
        xs = xs[::every]
    edges = [x_of(x) for x in xs]
    out = ['<g class="hover-bands">']
    what = x_label or "x"
    for i, x in enumerate(xs):
        left = LEFT if i == 0 else (edges[i - 1] + edges[i]) / 2
        right = WIDTH - RIGHT if i == len(xs) - 1 else (edges[i] + edges[i + 1]) / 2
        tip = f"{what} {fmt_value(x)} · " + " · ".join(at[x])
        out.append(
            f'<rect class="hover" x="{left:.1f}" y="{TOP}" width="{max(right - left, 0.5):.1f}" '
            f'height="{HEIGHT - TOP - BOTTOM}" data-tip="{escape(tip)}">'
            f"<title>{escape(tip)}</title></rect>"
        )
    out.append("</g>")
    return "".join(out)


def fmt_value(v: float) -> str:
    """A value in a tooltip: four significant digits (whole numbers as they are)."""
    if v == int(v) and abs(v) < 1e9:
        return f"{int(v):,}"
    return f"{v:.4g}"


def bar_chart(title: str, categories: Sequence[str], series: Sequence[Series]) -> SafeString:
    """Stacked bars: ``series[i].points`` are (category index, value) pairs."""
    totals = [0.0] * len(categories)
    for s in series:
        for idx, v in s.points:
            totals[int(idx)] += v
    if not categories or not any(totals):
        return mark_safe(f'<p class="empty">No data for “{escape(title)}” in this range.</p>')  # noqa: S308 — built from escaped text and numbers only
    yticks = nice_ticks(0, max(totals))
    y1 = yticks[-1] or 1
    plot_h = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT - RIGHT) / len(categories)
    bar_w = max(min(slot * 0.7, 48), 1)

    def y_of(y: float) -> float:
        return HEIGHT - BOTTOM - y / y1 * plot_h

    every = max(1, math.ceil(len(categories) / 10))
    labels = [(LEFT + slot * (i + 0.5), c) for i, c in enumerate(categories) if i % every == 0]
    out = _frame(title, yticks, y_of, labels)
    base = [0.0] * len(categories)
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        for idx, v in s.points:
            if v <= 0:
                continue
            k = int(idx)
            top, bottom = y_of(base[k] + v), y_of(base[k])
            x = LEFT + slot * (k + 0.5) - bar_w / 2
            out.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{bar_w:.1f}" '
                f'height="{max(bottom - top, 0.5):.1f}" fill="{color}">'
                f"<title>{escape(categories[k])} · {escape(s.name)}: {fmt(v)}</title></rect>"
            )
            base[k] += v
    out.append("</svg>")
    return mark_safe(f'<figure class="chart-box">{"".join(out)}{_legend(series)}</figure>')  # noqa: S308 — built from escaped text and numbers only

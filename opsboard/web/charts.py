"""Inline SVG charts rendered on the server (no chart library, no script):
sparklines, and time-series charts with axes, a legend and values on hover."""
from __future__ import annotations

import math
from datetime import datetime, timedelta

from flask_babel import gettext as _
from markupsafe import Markup, escape

from .. import persian
from .i18n import prefs


def sparkline(values: list[int | float], *, width: int = 120, height: int = 24, color: str = "#2f5bea",
              title: str = "") -> Markup:
    """A polyline of ``values`` (oldest first) scaled to the box; empty data draws a flat line."""
    if not values:
        values = [0]
    top = max(values) or 1
    n = len(values)
    step = width / max(1, n - 1)
    points = " ".join(f"{i * step:.1f},{height - 1 - (v / top) * (height - 2):.1f}" for i, v in enumerate(values))
    label = escape(title or f"max {top:g} per minute")
    return Markup(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{label}"><title>{label}</title>'
        f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{points}"/></svg>')


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k at or above ``value`` (an axis maximum people can read)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exp = math.floor(math.log10(value))
    for m in (1, 2, 2.5, 5, 10):
        top = m * 10 ** exp
        if top >= value * 0.999:
            return float(top)
    return float(10 ** (exp + 1))


def _fmt(v: float | None, unit: str) -> str:
    """A value with its unit, in the reader's language and digits."""
    if v is None:
        return _("no data")
    digits = prefs()[0]
    if unit == "ms":
        return (_("%(n)s s", n=persian.digits_for(f"{v / 1000:.1f}", digits)) if v >= 1000
                else _("%(n)s ms", n=persian.digits_for(f"{v:.0f}", digits)))
    n = persian.digits_for(f"{v:.2f}".rstrip("0").rstrip("."), digits)
    return _("%(n)s /min", n=n) if unit == "/min" else f"{n} {unit}"


def _text_width(text: str) -> float:
    """A generous width in px of ``text`` at the charts' 11 px font (digits and Latin about 6.6 px,
    Persian letters about 7 px, spaces 3.5 px): enough to keep an axis label inside the chart."""
    return sum(3.5 if ch == " " else (7.0 if ord(ch) > 0x5ff else 6.6) for ch in text)


def _clock(at: datetime) -> str:
    """A bucket's time of day in the reader's time zone and digits (the axis labels)."""
    locale, _calendar, zone = prefs()
    return persian.digits_for(at.astimezone(persian.zone(zone, locale)).strftime("%H:%M"), locale)


def _span(start: datetime, minutes: int) -> str:
    """A bucket on hover: local times, and always the exact UTC times."""
    end = start + timedelta(minutes=minutes)
    utc = f"{start.strftime('%H:%M')}–{end.strftime('%H:%M')} UTC"
    local = f"{_clock(start)}–{_clock(end)}"
    return utc if persian.latin_digits(local) == utc[:-4] else f"{local} ({utc})"


def line_chart(buckets: list[datetime], series: list[tuple[str, list[float | None], str]], *, title: str,
               unit: str, width: int = 560, height: int = 180, bucket_minutes: int = 1,
               cap: float | None = None) -> Markup:
    """A time-series chart as inline SVG: y axis with ticks and grid, x axis with
    times in the reader's zone (the exact UTC times on hover), one line per series,
    a legend, and the values of every bucket on hover (an SVG ``<title>`` per
    time column, read by browsers and screen readers).

    ``series`` is ``(name, values, css class)``; colours come from the
    stylesheet (``.chart .s-<class>``), so the dark theme applies and the CSP
    needs no inline style.  ``None`` values leave a gap; values above ``cap``
    are drawn at it.
    """
    right, top, bottom = 10, 10, 26
    n = max(1, len(buckets))

    def clean(v):
        if v is None:
            return None
        if not math.isfinite(v):
            return cap
        return min(v, cap) if cap is not None else v

    cleaned = [(name, [clean(v) for v in values], css) for name, values, css in series]
    peak = max((v for _, values, _ in cleaned for v in values if v is not None), default=0.0)
    y_max = _nice_ceiling(peak)
    # The y axis is as wide as its longest label (they end at the axis, text-anchor=end): a fixed margin
    # clipped "1.5 s" or "۲۵۰ /دقیقه" at the chart's edge.
    y_labels = [_fmt(y_max * frac, unit) for frac in (0, 0.5, 1)]
    left = max(36, 12 + math.ceil(max(_text_width(label) for label in y_labels)))
    plot_w, plot_h = width - left - right, height - top - bottom
    step_x = plot_w / max(1, n - 1)

    def x(i):
        return left + i * step_x

    def y(v):
        return top + plot_h - (v / y_max) * plot_h

    parts = [f'<svg class="chart-svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
             f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>']
    # Y axis: 0, half and the top, with grid lines.
    parts.append('<g class="axis" data-axis="y">')
    for frac, label in zip((0, 0.5, 1), y_labels):
        yy = y(y_max * frac)
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{yy:.1f}" y2="{yy:.1f}"/>')
        parts.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end" data-label="y">{escape(label)}</text>')
    parts.append(f'<line class="axis-line" x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}"/></g>')
    # X axis: about five time labels (the reader's zone).
    parts.append(f'<g class="axis" data-axis="x"><line class="axis-line" x1="{left}" x2="{width - right}" '
                 f'y1="{top + plot_h}" y2="{top + plot_h}"/>')
    every = max(1, (n - 1) // 4)
    for i in range(0, n, every):
        label = _clock(buckets[i]) if i < len(buckets) else ""
        parts.append(f'<line class="tick" x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}"/>'
                     f'<text x="{x(i):.1f}" y="{height - 6}" text-anchor="middle">{label}</text>')
    parts.append("</g>")
    # The lines (a gap where a value is missing).
    for name, values, css in cleaned:
        runs, run = [], []
        for i, v in enumerate(values):
            if v is None:
                if run:
                    runs.append(run)
                run = []
            else:
                run.append(f"{x(i):.1f},{y(v):.1f}")
        if run:
            runs.append(run)
        for r in runs:
            if len(r) == 1:
                cx, cy = r[0].split(",")
                parts.append(f'<circle class="s-{css}" cx="{cx}" cy="{cy}" r="2"/>')
            else:
                parts.append(f'<polyline class="line s-{css}" data-series="{escape(name)}" points="{" ".join(r)}"/>')
    # Hover: one transparent column per bucket, titled with every value at that time.
    parts.append('<g class="hover">')
    for i, b in enumerate(buckets):
        span = _span(b, bucket_minutes)
        values = "; ".join(f"{name}: {_fmt(vals[i], unit)}" for name, vals, _ in cleaned)
        x0 = max(left, x(i) - step_x / 2)
        x1 = min(width - right, x(i) + step_x / 2)
        parts.append(f'<rect x="{x0:.1f}" y="{top}" width="{max(1.0, x1 - x0):.1f}" height="{plot_h}">'
                     f'<title>{escape(span)} — {escape(values)}</title></rect>')
    parts.append("</g></svg>")
    legend = "".join(f'<li><span class="swatch s-{css}" aria-hidden="true"></span>{escape(name)}</li>'
                     for name, _, css in cleaned)
    return Markup(f'<figure class="chart"><figcaption>{escape(title)}</figcaption>{"".join(parts)}'
                  f'<ul class="legend">{legend}</ul></figure>')

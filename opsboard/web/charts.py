"""Inline SVG charts rendered on the server (no chart library, no script):
sparklines, and time-series charts with axes, a legend and values on hover."""
from __future__ import annotations

import math
from datetime import datetime, timedelta

from flask import g
from flask_babel import gettext as _
from persiantools.jdatetime import JalaliDateTime
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


#: Headroom above a chart's largest value: its line stays below the top edge, where it could be
#: taken for a clipped one (issue 44: the p95 line rode the edge when the axis was the bucket bound).
HEADROOM = 1.1


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k at or above ``value`` (an axis maximum
    people can read, and its half too)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exp = math.floor(math.log10(value))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        top = m * 10 ** exp
        if top >= value * 0.999:
            return float(top)
    return float(10 ** (exp + 1))


def _words() -> dict[str, str]:
    """The charts' translated words and patterns of this request, looked up once (a week's chart formats
    hundreds of values: a catalogue lookup each cost more than drawing it)."""
    words = getattr(g, "_chart_words", None)
    if words is None:
        hole = "\x00"
        words = g._chart_words = {"none": _("no data"), "s": _("%(n)s s", n=hole), "ms": _("%(n)s ms", n=hole),
                                  "/min": _("%(n)s /min", n=hole)}
    return words


def _formatter(unit: str):
    """A function writing a value with its unit, in the reader's language and digits (looked up once)."""
    words, digits = _words(), prefs()[0]
    # The locale's decimal separator (۰٫۴ on fa pages, as persian.format_decimal writes it; Babel per value
    # would cost more than the chart).
    point = "٫" if digits == "fa" else "."

    def number(text: str) -> str:
        return persian.digits_for(text.replace(".", point), digits)

    if unit == "ms":
        def fmt(v):
            if v is None:
                return words["none"]
            return (words["s"].replace("\x00", number(f"{v / 1000:.1f}")) if v >= 1000
                    else words["ms"].replace("\x00", number(f"{v:.0f}")))
        return fmt

    def fmt(v):
        if v is None:
            return words["none"]
        n = number(f"{v:.2f}".rstrip("0").rstrip("."))
        if unit == "jobs":  # a count: the chart's title says of what
            return persian.format_count(round(v), digits) if v >= 10 else n
        return words["/min"].replace("\x00", n) if unit == "/min" else f"{n} {unit}"
    return fmt


def _fmt(v: float | None, unit: str) -> str:
    """A value with its unit, in the reader's language and digits."""
    return _formatter(unit)(v)


def _text_width(text: str) -> float:
    """A generous width in px of ``text`` at the charts' 11 px font (digits and Latin about 6.6 px,
    Persian letters about 7 px, spaces 3.5 px): enough to keep an axis label inside the chart."""
    return sum(3.5 if ch == " " else (7.0 if ord(ch) > 0x5ff else 6.6) for ch in text)


def _clock(at: datetime) -> str:
    """A bucket's time of day in the reader's time zone and digits (the axis labels)."""
    locale, _calendar, zone = prefs()
    return persian.digits_for(at.astimezone(persian.zone(zone, locale)).strftime("%H:%M"), locale)


def _day_clock(at: datetime) -> str:
    """A bucket's day and time in the reader's zone, calendar and digits (the axis labels of a week):
    11-29 14:00, or ۰۹/۰۸ ۱۴:۰۰ in the Jalali calendar."""
    locale, calendar, zone = prefs()
    local = at.astimezone(persian.zone(zone, locale))
    if calendar == "jalali":
        day = JalaliDateTime(local.replace(tzinfo=None)).strftime("%m/%d")
    else:
        day = local.strftime("%m-%d")
    return persian.digits_for(f"{day} {local.strftime('%H:%M')}", locale)


def _span(start: datetime, minutes: int) -> str:
    """A bucket on hover: local times, and always the exact UTC times (with the day, for buckets of an
    hour or more: the charts of a week).  Kept for the request: a page's charts share their buckets."""
    spans = getattr(g, "_chart_spans", None)
    if spans is None:
        spans = g._chart_spans = {}
    key = (start, minutes)
    if key not in spans:
        spans[key] = _span_text(start, minutes)
    return spans[key]


def _span_text(start: datetime, minutes: int) -> str:
    end = start + timedelta(minutes=minutes)
    if minutes >= 60:
        utc = f"{start.strftime('%Y-%m-%d %H:%M')}–{end.strftime('%H:%M')} UTC"
        local = f"{_day_clock(start)}–{_clock(end)}"
        return f"{local} ({utc})"
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
    are drawn at it.  The y axis is drawn from the data: its top is the
    largest value with :data:`HEADROOM`, rounded up to a readable number
    (``data-y-max`` on the svg), never a bound the data did not reach.
    Buckets of an hour or more (a week) are labelled with their day.
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
    y_max = _nice_ceiling(peak * HEADROOM)
    if unit == "jobs":  # whole jobs: 0, 1, 2 at least, never half a job
        y_max = max(2.0, y_max)
        for _step in range(4):  # the next readable top that halves into whole jobs (3 -> 4, 15 -> 20)
            if y_max % 2 == 0:
                break
            y_max = _nice_ceiling(y_max * 1.01)
    # The y axis is as wide as its longest label (they end at the axis, text-anchor=end): a fixed margin
    # clipped "1.5 s" or "۲۵۰ /دقیقه" at the chart's edge.
    fmt = _formatter(unit)
    y_labels = [fmt(y_max * frac) for frac in (0, 0.5, 1)]
    left = max(36, 12 + math.ceil(max(_text_width(label) for label in y_labels)))
    plot_w, plot_h = width - left - right, height - top - bottom
    step_x = plot_w / max(1, n - 1)

    def x(i):
        return left + i * step_x

    def y(v):
        return top + plot_h - (v / y_max) * plot_h

    parts = [f'<svg class="chart-svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
             f'role="img" aria-label="{escape(title)}" data-y-max="{y_max:g}" data-peak="{peak:g}">'
             f'<title>{escape(title)}</title>']
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
        label = (_day_clock(buckets[i]) if bucket_minutes >= 60 else _clock(buckets[i])) if i < len(buckets) else ""
        # A week's labels carry the day: the first one starts at its tick, inside the chart.
        anchor = "middle"
        if bucket_minutes >= 60 and i == 0:
            anchor = "start"
        elif x(i) + _text_width(label) / 2 > width - 2:  # the last one ends at its tick
            anchor = "end"
        parts.append(f'<line class="tick" x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}"/>'
                     f'<text x="{x(i):.1f}" y="{height - 6}" text-anchor="{anchor}">{label}</text>')
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
        values = "; ".join(f"{name}: {fmt(vals[i])}" for name, vals, _ in cleaned)
        x0 = max(left, x(i) - step_x / 2)
        x1 = min(width - right, x(i) + step_x / 2)
        parts.append(f'<rect x="{x0:.1f}" y="{top}" width="{max(1.0, x1 - x0):.1f}" height="{plot_h}">'
                     f'<title>{escape(span)} — {escape(values)}</title></rect>')
    parts.append("</g></svg>")
    legend = "".join(f'<li><span class="swatch s-{css}" aria-hidden="true"></span>{escape(name)}</li>'
                     for name, _, css in cleaned)
    return Markup(f'<figure class="chart"><figcaption>{escape(title)}</figcaption>{"".join(parts)}'
                  f'<ul class="legend">{legend}</ul></figure>')

"""Inline SVG sparklines, rendered on the server (no chart library)."""
from __future__ import annotations

from markupsafe import Markup, escape


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

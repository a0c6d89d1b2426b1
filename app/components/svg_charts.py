"""A trajectory's latency waterfall and tokens per turn, drawn as SVG images.

Two small bar charts on the page every trajectory opens: drawn here rather than through a
chart library, because Streamlit ships chart data as Arrow, which loads pandas and pyarrow
(about 80 MB of the server's memory) and a chart spec per open. The page shows them with
`st.image`, so the browser treats them as pictures (nothing in one can run or link); every
piece of text is escaped as well (step labels carry tool names, which are untrusted).
"""

from __future__ import annotations

import math
from html import escape

from components.safe import short

KIND_COLORS = {"model": "#4c78a8", "tool": "#f58518"}
TOKEN_COLORS = {"prompt": "#9ecae9", "completion": "#4c78a8"}
# A picture does not inherit the page's colours: a mid grey reads on the light and the dark theme.
FONT = "font-family:'Source Sans Pro',sans-serif;font-size:12px;fill:#808495"
TITLE_H = 24


def _nice_ticks(top: float, n: int = 4) -> list[float]:
    """Round tick values from 0 to at least `top` (1, 2 or 5 times a power of ten apart)."""
    if top <= 0:
        return [0.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def _num(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 or v == int(v) else f"{v:,.1f}"


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    """An SVG document of `body` drawn below a title line."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height + TITLE_H}" width="{width}" '
        f'height="{height + TITLE_H}" style="{FONT}"><title>{escape(title)}</title>'
        f'<text x="0" y="15" style="font-size:14px;font-weight:600">{escape(title)}</text>'
        f'<g transform="translate(0,{TITLE_H})">' + "".join(body) + "</g></svg>"
    )


def waterfall_svg(rows: list[dict]) -> str:
    """Each timed step as a bar from where the previous one ended (rows of `waterfall_rows`)."""
    left, bar_w, right, row_h, axis_h = 130, 240, 50, 22, 34
    top = max((r["end_ms"] for r in rows), default=0.0) or 1.0
    ticks = _nice_ticks(top)
    scale = bar_w / ticks[-1]
    height = row_h * len(rows) + axis_h
    body = []
    for i, r in enumerate(rows):
        y = i * row_h
        x0, w = left + r["start_ms"] * scale, max(r["latency_ms"] * scale, 1.0)
        body.append(
            f'<text x="{left - 6}" y="{y + 15}" text-anchor="end">{escape(short(r["label"], 21))}</text>'
            f'<rect x="{x0:.1f}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" rx="2" '
            f'fill="{KIND_COLORS.get(r["kind"], "#888")}"/>'
            f'<text x="{x0 + w + 4:.1f}" y="{y + 15}">{r["latency_ms"]:,.1f}</text>'
        )
    base = row_h * len(rows)
    body.append(f'<line x1="{left}" x2="{left + bar_w}" y1="{base}" y2="{base}" stroke="#999"/>')
    for t in ticks:
        x = left + t * scale
        body.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 4}" stroke="#999"/>'
            f'<text x="{x:.1f}" y="{base + 16}" text-anchor="middle">{_num(t)}</text>'
        )
    body.append(
        f'<text x="{left + bar_w / 2}" y="{base + 30}" text-anchor="middle">time since the first model call (ms)</text>'
    )
    return _svg(left + bar_w + right, height, "Latency waterfall (ms)", body)


def tokens_svg(rows: list[dict]) -> str:
    """Prompt and completion tokens stacked per model turn (rows of `token_rows`)."""
    steps: dict[int, dict[str, int]] = {}
    for r in rows:
        steps.setdefault(r["step"], {})[r["kind"]] = r["tokens"]
    left, plot_w, plot_h, top_pad, axis_h = 40, 220, 160, 14, 34
    most = max((sum(v.values()) for v in steps.values()), default=0) or 1
    ticks = _nice_ticks(most)
    scale = plot_h / ticks[-1]
    slot = plot_w / max(len(steps), 1)
    body = []
    for t in ticks:
        y = top_pad + plot_h - t * scale
        body.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{_num(t)}</text>'
        )
    for i, (step, parts) in enumerate(steps.items()):
        x, y = left + i * slot + slot * 0.15, top_pad + plot_h
        for kind in ("prompt", "completion"):
            n = parts.get(kind, 0)
            h = n * scale
            y -= h
            body.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" fill="{TOKEN_COLORS[kind]}"/>'
            )
        body.append(
            f'<text x="{x + slot * 0.35:.1f}" y="{y - 3:.1f}" text-anchor="middle">{sum(parts.values()):,}</text>'
        )
        body.append(f'<text x="{x + slot * 0.35:.1f}" y="{top_pad + plot_h + 14}" text-anchor="middle">{step}</text>')
    body.append(
        f'<text x="{left + plot_w / 2}" y="{top_pad + plot_h + 30}" text-anchor="middle">step (light: prompt, '
        "dark: completion)</text>"
    )
    return _svg(left + plot_w + 10, top_pad + plot_h + axis_h, "Tokens per model turn", body)

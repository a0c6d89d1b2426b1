"""The trajectory page's inline charts and small tables: drawn to scale, every text escaped."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))

from components.safe import html_table  # noqa: E402
from components.svg_charts import _nice_ticks, tokens_svg, waterfall_svg  # noqa: E402

EVIL = "<img src=x onerror=alert(1)>"


def _rects(svg: str) -> list[dict]:
    return [
        {k: float(v) for k, v in re.findall(r"(?<![\w-])(x|y|width|height)=\"([\d.]+)\"", m)}
        for m in re.findall(r"<rect ([^>]*)>", svg)
    ]


def test_waterfall_bars_start_where_the_last_ended_and_scale_with_latency():
    rows = [
        {"step": 1, "label": "1 model → calc", "kind": "model", "start_ms": 0, "end_ms": 300, "latency_ms": 300,
         "prompt_tokens": 10, "completion_tokens": 5},
        {"step": 2, "label": f"2 {EVIL}", "kind": "tool", "start_ms": 300, "end_ms": 400, "latency_ms": 100,
         "prompt_tokens": 0, "completion_tokens": 0},
    ]  # fmt: skip
    svg = waterfall_svg(rows)
    a, b = _rects(svg)
    assert abs(b["x"] - (a["x"] + a["width"])) < 0.2  # end to end
    assert abs(a["width"] / b["width"] - 3.0) < 0.01  # to scale
    assert EVIL not in svg and "&lt;img src=x" in svg  # a tool's name is shown, never parsed


def test_tokens_stack_prompt_under_completion_per_turn():
    rows = [
        {"step": 1, "kind": "prompt", "tokens": 300},
        {"step": 1, "kind": "completion", "tokens": 100},
        {"step": 3, "kind": "prompt", "tokens": 150},
        {"step": 3, "kind": "completion", "tokens": 50},
    ]
    p1, c1, p3, c3 = _rects(tokens_svg(rows))
    assert abs(c1["y"] + c1["height"] - p1["y"]) < 0.2  # completion sits on prompt
    assert abs((p1["height"] + c1["height"]) / (p3["height"] + c3["height"]) - 2.0) < 0.01
    assert p3["x"] > p1["x"]


def test_ticks_are_round_and_cover_the_top():
    for top in (1, 7, 95, 1234.5, 0.3):
        ticks = _nice_ticks(top)
        assert ticks[0] == 0 and ticks[-1] >= top and len(ticks) <= 6
        step = ticks[1] - ticks[0]
        mantissa = step / 10 ** __import__("math").floor(__import__("math").log10(step))
        assert round(mantissa, 6) in (1, 2, 5, 10)


def test_html_table_escapes_headers_and_cells():
    out = html_table([{"note": EVIL, EVIL: None}])
    assert EVIL not in out and out.count("&lt;img") == 2 and "<td>-</td>" in out

"""A picture with the attention its patches got drawn over it, as a PNG.

The Trajectory page shows it with `st.image`: a picture the browser cannot run anything from.
Drawn with Pillow (the demo's renderer already needs it) rather than a chart library, so a page
with pictures loads no Arrow, pandas or Altair.
"""

from __future__ import annotations

import io
from typing import Sequence

import numpy as np

WIDTH = 320  # the timeline shows pictures 320 pixels wide: the heatmap matches
COLOR = (214, 39, 40)  # red over a picture's usual greys and blues


def heatmap_png(picture: bytes, weights: np.ndarray, region: Sequence[float] = (0.0, 0.0, 1.0, 1.0)) -> bytes:
    """`picture` with each patch of `weights` (`[rows, cols]`, row-major) tinted by its share of the largest.

    `region` is the part of the picture (fractions `x0, y0, x1, y1`) the grid covers; outside it the
    picture is dimmed (what the model never saw).
    """
    from PIL import Image, ImageDraw

    base = Image.open(io.BytesIO(picture)).convert("RGB")
    w, h = base.size
    out_h = max(1, round(h * WIDTH / w))
    base = base.resize((WIDTH, out_h), Image.Resampling.NEAREST)
    overlay = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    x0, y0, x1, y1 = (region[0] * WIDTH, region[1] * out_h, region[2] * WIDTH, region[3] * out_h)
    if (x0, y0, x1, y1) != (0, 0, WIDTH, out_h):
        draw.rectangle([0, 0, WIDTH, out_h], fill=(0, 0, 0, 110))
        draw.rectangle([x0, y0, x1, y1], fill=(0, 0, 0, 0))
    weights = np.nan_to_num(np.asarray(weights, dtype=np.float64), nan=0.0)
    rows, cols = weights.shape
    top = float(weights.max()) if weights.size else 0.0
    cw, ch = (x1 - x0) / cols, (y1 - y0) / rows
    for r in range(rows):
        for c in range(cols):
            alpha = int(round(190 * weights[r, c] / top)) if top > 0 else 0
            box = [x0 + c * cw, y0 + r * ch, x0 + (c + 1) * cw - 1, y0 + (r + 1) * ch - 1]
            draw.rectangle(box, fill=COLOR + (alpha,), outline=(255, 255, 255, 40))
    merged = Image.alpha_composite(base.convert("RGBA"), overlay).convert("RGB")
    buf = io.BytesIO()
    merged.save(buf, format="PNG")
    return buf.getvalue()


__all__ = ["heatmap_png"]

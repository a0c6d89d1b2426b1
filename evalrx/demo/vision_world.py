"""The demo VLM's world: pictures of numbers, drawn with Pillow and the font the project ships.

Three kinds of picture, each with the number(s) a task asks about:

- a card: one number, large, on a card somewhere in the picture (read it, then compute);
- two panels: a number on the left and one on the right (compare or combine the two regions);
- a small label: a code in small type inside a framed label in one corner, too small to read at
  the model's resolution; the frame is visible, so the model can zoom into that corner and read it.

Everything is drawn from a seeded `random.Random` with `fonts/DejaVuSansMono.ttf`, so the same
seed gives the same pixels on every machine with the same Pillow (its wheels bundle FreeType);
`pixels_digest` names a picture by its pixels, not by its PNG encoding.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

FONT_PATH = Path(__file__).resolve().parent / "fonts" / "DejaVuSansMono.ttf"
CANVAS = 192  # pixels a side; the model sees a smaller copy (its processor's size)
CARD_TYPE, PANEL_TYPE, LABEL_TYPE = 44, 34, 11  # type sizes: legible, legible, legible only zoomed in
CORNERS = {  # where a small label sits -> the zoom box (fractions) that shows it
    "top left": (0.0, 0.0, 0.5, 0.5),
    "top right": (0.5, 0.0, 1.0, 0.5),
    "bottom left": (0.0, 0.5, 0.5, 1.0),
    "bottom right": (0.5, 0.5, 1.0, 1.0),
}
_BACKGROUNDS = [(244, 241, 232), (232, 240, 246), (238, 246, 236), (246, 236, 240), (240, 240, 240)]
_INKS = [(20, 20, 20), (24, 40, 110), (110, 24, 24), (20, 80, 40)]
_SHAPES = [(196, 205, 220), (222, 206, 190), (200, 222, 204), (214, 200, 222)]


@lru_cache(maxsize=8)
def font(size: int) -> Any:
    from PIL import ImageFont

    return ImageFont.truetype(str(FONT_PATH), size)


def _canvas(rng: random.Random) -> Any:
    from PIL import Image

    return Image.new("RGB", (CANVAS, CANVAS), rng.choice(_BACKGROUNDS))


def _shapes(draw: Any, rng: random.Random, n: int, avoid: tuple) -> None:
    """Faint circles and boxes that are not the answer (kept off the `avoid` box)."""
    ax0, ay0, ax1, ay1 = avoid
    for _ in range(n):
        for _try in range(20):
            r = rng.randint(8, 22)
            x, y = rng.randint(r, CANVAS - r), rng.randint(r, CANVAS - r)
            if x + r < ax0 or x - r > ax1 or y + r < ay0 or y - r > ay1:
                break
        else:
            continue
        box = (x - r, y - r, x + r, y + r)
        colour = rng.choice(_SHAPES)
        draw.ellipse(box, fill=colour) if rng.random() < 0.5 else draw.rectangle(box, fill=colour)


def _text_box(draw: Any, text: str, size: int) -> tuple[int, int, int, int]:
    return draw.textbbox((0, 0), text, font=font(size))


def card(number: int, rng: random.Random) -> Any:
    """One number in large type on a card placed somewhere in the picture."""
    from PIL import ImageDraw

    img = _canvas(rng)
    draw = ImageDraw.Draw(img)
    text = str(number)
    x0, y0, x1, y1 = _text_box(draw, text, CARD_TYPE)
    w, h = x1 - x0 + 24, y1 - y0 + 24
    left, top = rng.randint(6, CANVAS - w - 6), rng.randint(6, CANVAS - h - 6)
    _shapes(draw, rng, rng.randint(0, 3), (left - 4, top - 4, left + w + 4, top + h + 4))
    draw.rounded_rectangle(
        (left, top, left + w, top + h), radius=6, fill=(255, 255, 255), outline=(90, 90, 90), width=2
    )
    draw.text((left + 12 - x0, top + 12 - y0), text, font=font(CARD_TYPE), fill=rng.choice(_INKS))
    return img


def two_panels(left_number: int, right_number: int, rng: random.Random) -> Any:
    """A left and a right panel, each with one number."""
    from PIL import ImageDraw

    img = _canvas(rng)
    draw = ImageDraw.Draw(img)
    half = CANVAS // 2
    tints = rng.sample(_SHAPES, 2)
    for i, number in enumerate((left_number, right_number)):
        x_off = i * half
        draw.rectangle((x_off + 3, 3, x_off + half - 4, CANVAS - 4), fill=tints[i], outline=(90, 90, 90), width=2)
        text = str(number)
        x0, y0, x1, y1 = _text_box(draw, text, PANEL_TYPE)
        tw, th = x1 - x0, y1 - y0
        x = x_off + (half - tw) // 2 + rng.randint(-6, 6) - x0
        y = rng.randint(20, CANVAS - th - 20) - y0
        draw.text((x, y), text, font=font(PANEL_TYPE), fill=rng.choice(_INKS))
    return img


def small_label(code: int, corner: str, rng: random.Random) -> Any:
    """A code in small type inside a framed label in `corner`; the rest is a large decoy number."""
    from PIL import ImageDraw

    img = _canvas(rng)
    draw = ImageDraw.Draw(img)
    half = CANVAS // 2
    bx0, by0, _, _ = (round(v * CANVAS) for v in CORNERS[corner])
    text = f"code {code}"
    x0, y0, x1, y1 = _text_box(draw, text, LABEL_TYPE)
    w, h = x1 - x0 + 12, y1 - y0 + 12
    left = bx0 + rng.randint(4, half - w - 4)
    top = by0 + rng.randint(4, half - h - 4)
    # the decoy: a large number in the opposite half, which is not the code
    decoy = str(rng.randint(10, 99))
    dx = (half if bx0 == 0 else 0) + rng.randint(10, half - 60)
    dy = (half if by0 == 0 else 0) + rng.randint(8, half - 50)
    _shapes(draw, rng, rng.randint(0, 2), (left - 4, top - 4, left + w + 4, top + h + 4))
    draw.text((dx, dy), decoy, font=font(PANEL_TYPE), fill=(150, 150, 150))
    draw.rectangle((left, top, left + w, top + h), fill=(255, 255, 240), outline=(30, 30, 30), width=3)
    draw.text((left + 6 - x0, top + 6 - y0), text, font=font(LABEL_TYPE), fill=(10, 10, 10))
    return img


def pixels_digest(img: Any) -> str:
    """A picture's identity by its pixels (size, mode and bytes), whatever its file encoding."""
    h = hashlib.sha256(f"{img.mode}:{img.size[0]}x{img.size[1]}:".encode())
    h.update(img.tobytes())
    return h.hexdigest()


def png_bytes(img: Any) -> bytes:
    """The picture as PNG (no timestamps or text chunks: the same pixels give the same file)."""
    import io

    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False, compress_level=9)
    return buf.getvalue()

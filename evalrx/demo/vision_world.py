"""The demo VLM's world: pictures of numbers and names, drawn with Pillow and the font the project ships.

Four kinds of picture, each with what a task asks about:

- a card: one number, large, on a card somewhere in the picture (read it, then compute);
- two panels: a number on the left and one on the right (compare or combine the two regions);
- a small label: a code in small type inside a framed label in one corner, too small to read at
  the model's resolution; the frame is visible, so the model can zoom into that corner and read it;
- a name card: a country's name, large, on a card (read it, then `lookup` a fact about that country).

Digits and letters sit one a cell of a 24-pixel grid, which is one patch of the model's half-size
view: a tiny vision tower trained in minutes reads a character from one column of patches, not from
pieces of several. Everything is drawn from a seeded `random.Random` with `fonts/DejaVuSansMono.ttf`, so the same
seed gives the same pixels on every machine with the same Pillow (its wheels bundle FreeType);
`pixels_digest` names a picture by its pixels, not by its PNG encoding.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

FONT_PATH = Path(__file__).resolve().parent / "fonts" / "DejaVuSansMono.ttf"
CANVAS = 192  # pixels a side; the model sees a half-size copy (its processor's 96 pixels, 12-pixel patches)
CELL = 24  # one character a cell: a patch of the model's view, so each digit is read from one column of patches
TYPE = 36  # digits a cell tall and a little narrower than one
SMALL_CELL, SMALL_TYPE = 12, 18  # the small label: half size, legible only zoomed in (x2 brings it to CELL)
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


def _digits(
    draw: Any, text: str, left: int, top: int, cell: int, size: int, ink: tuple, cells: Optional[dict] = None
) -> None:
    """`text` one character a cell, each centred in its `cell` x 2`cell` box from (`left`, `top`).

    `cells` gets `(column, row) -> character` on the CELL grid for each cell a character covers.
    """
    f = font(size)
    for i, ch in enumerate(text):
        if cells is not None and cell == CELL:
            col, row = (left + i * cell) // CELL, top // CELL
            cells[(col, row)] = cells[(col, row + 1)] = ch
        x0, y0, x1, y1 = draw.textbbox((0, 0), ch, font=f)
        x = left + i * cell + (cell - (x1 - x0)) // 2 - x0
        y = top + (2 * cell - (y1 - y0)) // 2 - y0
        draw.text((x, y), ch, font=f, fill=ink)


def card(number: int, rng: random.Random) -> Any:
    """One number on a card placed on the cell grid somewhere in the picture."""
    return _text_card(str(number), 1, rng)  # a cell of margin left and right of the digits


def name_card(name: str, rng: random.Random) -> Any:
    """A name on a card, one letter a cell like a card's digits (at most 8 letters fill the width)."""
    return _text_card(name, 0, rng)  # the letters span the card


def _text_card(text: str, margin: int, rng: random.Random) -> Any:
    """`text` on a card two cells tall with a cell of margin above and below and `margin` cells beside."""
    from PIL import ImageDraw

    img = _canvas(rng)
    draw = ImageDraw.Draw(img)
    cols, rows = len(text) + 2 * margin, 4
    left = CELL * rng.randint(0, CANVAS // CELL - cols)
    top = CELL * rng.randint(0, CANVAS // CELL - rows)
    w, h = cols * CELL, rows * CELL
    _shapes(draw, rng, rng.randint(0, 3), (left - 4, top - 4, left + w + 4, top + h + 4))
    draw.rounded_rectangle(
        (left + 2, top + 2, left + w - 3, top + h - 3), radius=6, fill=(255, 255, 255), outline=(90, 90, 90), width=2
    )
    cells: dict = {}
    _digits(draw, text, left + margin * CELL, top + CELL, CELL, TYPE, rng.choice(_INKS), cells)
    img.info["cells"] = cells
    return img


def two_panels(left_number: int, right_number: int, rng: random.Random) -> Any:
    """A left and a right panel, each with one number."""
    from PIL import ImageDraw

    img = _canvas(rng)
    draw = ImageDraw.Draw(img)
    half = CANVAS // 2
    tints = rng.sample(_SHAPES, 2)
    cells: dict = {}
    for i, number in enumerate((left_number, right_number)):
        x_off = i * half
        draw.rectangle((x_off + 2, 2, x_off + half - 3, CANVAS - 3), fill=tints[i])  # tint apart, no frame to misread
        text = str(number)
        start = x_off + CELL * rng.randint(0, half // CELL - len(text))
        top = CELL * rng.randint(0, CANVAS // CELL - 2)
        _digits(draw, text, start, top, CELL, TYPE, rng.choice(_INKS), cells)
    img.info["cells"] = cells
    return img


def small_label(code: int, corner: str, rng: random.Random) -> Any:
    """A code in small type in a framed label in `corner`, and a large decoy number elsewhere.

    The label's characters sit on a half-size grid, so the x2 zoom into its corner puts them on
    the picture's cell grid, one a patch column, like a card's.
    """
    from PIL import ImageDraw

    img = _canvas(rng)
    draw = ImageDraw.Draw(img)
    half = CANVAS // 2
    bx0, by0, _, _ = (round(v * CANVAS) for v in CORNERS[corner])
    text = str(code)
    cols, rows = len(text) + 2, 4
    w, h = cols * SMALL_CELL, rows * SMALL_CELL
    left = bx0 + SMALL_CELL * rng.randint(0, half // SMALL_CELL - cols)
    top = by0 + SMALL_CELL * rng.randint(0, half // SMALL_CELL - rows)
    # the decoy: a large number in the opposite half (rows), which is not the code
    decoy = str(rng.randint(10, 99))
    dx = CELL * rng.randint(0, CANVAS // CELL - 2)
    dy = (half if by0 == 0 else 0) + CELL * rng.randint(0, half // CELL - 2)
    _shapes(draw, rng, rng.randint(0, 2), (left - 4, top - 4, left + w + 4, top + h + 4))
    cells: dict = {}
    _digits(draw, decoy, dx, dy, CELL, TYPE, (150, 150, 150), cells)
    draw.rectangle((left + 1, top + 1, left + w - 2, top + h - 2), fill=(255, 255, 240), outline=(30, 30, 30), width=3)
    _digits(draw, text, left + SMALL_CELL, top + SMALL_CELL, SMALL_CELL, SMALL_TYPE, (10, 10, 10))
    # What training may say of each cell: the decoy's digits; the label's cells hold type too small to name.
    img.info["cells"] = cells
    img.info["unreadable"] = {
        (c, r)
        for c in range(left // CELL, (left + w - 1) // CELL + 1)
        for r in range(top // CELL, (top + h - 1) // CELL + 1)
    }
    # The x2 zoom into `corner` puts the code on the CELL grid: its cells there.
    zc, zr = (left - bx0) // SMALL_CELL + 1, (top - by0) // SMALL_CELL + 1
    img.info["zoom_cells"] = {(zc + i, zr + dr): ch for i, ch in enumerate(text) for dr in (0, 1)}
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

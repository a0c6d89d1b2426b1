"""The picture heatmap of the Trajectory page: the most-attended patch darkest, where the grid lies on the
picture, and the token choices of a turn (values first)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))

from components.patch_heatmap import WIDTH, heatmap_png  # noqa: E402

from evalrx.analyzers import KINDS, AttentionResult, picture_choices  # noqa: E402


def _white(w: int = 96, h: int = 96) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (255, 255, 255)).save(buf, format="PNG")
    return buf.getvalue()


def _redness(img: Image.Image, x: float, y: float) -> int:
    r, g, b = img.getpixel((int(x * img.width), int(y * img.height)))
    return r - g


def test_the_most_attended_patch_is_tinted_darkest_and_an_unattended_one_not_at_all():
    weights = np.zeros((2, 2))
    weights[0, 1], weights[1, 0] = 0.4, 0.1
    img = Image.open(io.BytesIO(heatmap_png(_white(), weights)))
    assert img.size == (WIDTH, WIDTH)
    top_right, bottom_left, top_left = _redness(img, 0.75, 0.25), _redness(img, 0.25, 0.75), _redness(img, 0.25, 0.25)
    assert top_right > bottom_left > top_left == 0


def test_the_grid_covers_only_the_region_the_model_saw_and_the_rest_is_dimmed():
    # A 2:1 picture a CLIP processor centre-crops to its middle square.
    img = Image.open(io.BytesIO(heatmap_png(_white(192, 96), np.ones((1, 1)), region=(0.25, 0.0, 0.75, 1.0))))
    assert img.size == (WIDTH, WIDTH // 2)
    inside, outside = img.getpixel((WIDTH // 2, 40)), img.getpixel((10, 40))
    assert inside[0] - inside[1] > 50  # tinted
    assert max(outside) < 200 and outside[0] == outside[1]  # dimmed grey, not tinted


def test_a_turns_token_choices_put_written_values_first_and_need_a_picture_before_the_turn():
    kinds = [KINDS.index(k) for k in ("tool_name", "arg_value", "turn_start")]
    att = AttentionResult(
        positions=[10, 20, 30],
        token_ids=[1, 2, 3],
        mass=np.zeros((3, 2, 1)),
        segments=[{"kind": "image", "step": 0, "label": "image@0"}],
        labels={
            "label_step": [1, 1, 1],
            "label_kind": kinds,
            "label_token_index": [11, 21, 31],
            "label_arg": ["", "expression", ""],
        },
        patches=np.zeros((3, 2, 4)),
        images=[{"step": 0, "offset": 0, "n": 4, "grid": [2, 2]}],
    )
    choices = picture_choices(att, 1)
    assert [p for p, _ in choices] == [1, 0, 2] and choices[0][1] == "arg value expression"
    assert picture_choices(att, 0) == []  # a turn before any picture was shown
    att.images[0]["step"] = 2
    assert picture_choices(att, 1) == []

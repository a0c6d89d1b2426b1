"""A vision model's teacher-forced passes: each image's placeholder expanded to the image's tokens.

A VLM's chat template writes one placeholder token per image; its processor replaces it with
as many tokens as the vision tower gives features and computes the pixel inputs. The planner
works on the rendered text (one placeholder each, so character offsets hold); `expand_pictures`
then gives every pass the ids the model really ran (what `HFLocalModel.chat` prefilled, so the
generation captures still cover the pass) and the images it holds, in order. Each image is
processed once per plan by the model's own processor, alone, which gives its token count and its
pixel inputs; a pass's inputs are those of its images concatenated (per-image tensors stack on
the first axis in LLaVA's and Qwen2-VL's processors alike).

Nothing here imports torch at module level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from evalrx.core.content import is_picture_block

__all__ = ["ImageSpan", "conversation_pictures", "expand_pictures", "image_token_id", "pass_inputs"]


@dataclass(frozen=True)
class ImageSpan:
    """One image's tokens in a pass.

    Attributes:
        image: its index in the conversation's images (`conversation_pictures`).
        step: the trajectory step whose message shows it (the prompt's step for a case image,
            the tool's step for an image a tool returned).
        start: its first token in the pass; `n` tokens follow.
        grid: `(rows, cols)` of the patches its tokens stand for, row-major.
    """

    image: int
    step: Optional[int]
    start: int
    n: int
    grid: tuple


def conversation_pictures(conversation: Any) -> "list[tuple[Any, Optional[int]]]":
    """`(image, step)` of every image block of the conversation, in the order the template writes them."""
    out: "list[tuple[Any, Optional[int]]]" = []
    for k, message in enumerate(conversation.messages):
        content = message.get("content")
        if isinstance(content, list):
            step = conversation.message_info[k].get("step") if k < len(conversation.message_info) else None
            out.extend((block.get("image"), step) for block in content if is_picture_block(block))
    return out


def _processor(local: Any) -> Any:
    proc = local.tokenizer if hasattr(local.tokenizer, "image_processor") else None
    proc = proc or getattr(local.handle, "processor", None)
    if proc is None:
        raise TypeError("image passes need the model's processor (load a vision spec on hf_local)")
    return proc


def image_token_id(local: Any) -> int:
    """The id of the token a VLM's template writes for an image (the processor's `image_token`)."""
    proc = _processor(local)
    token = getattr(proc, "image_token", None)
    tok = local.text_tokenizer
    tid = tok.convert_tokens_to_ids(token) if token else None
    if not isinstance(tid, int) or tid < 0 or tid == tok.unk_token_id:
        cfg = getattr(local.hf, "config", None)
        tid = getattr(cfg, "image_token_id", None) or getattr(cfg, "image_token_index", None)
    if not isinstance(tid, int):
        raise TypeError(f"{type(proc).__name__} names no image token")
    return tid


def _open(image: Any) -> Any:
    """A PIL image from what a conversation holds (PIL image, bytes, a path)."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image
    if isinstance(image, (bytes, bytearray)):
        import io

        return Image.open(io.BytesIO(bytes(image)))
    with Image.open(image) as img:  # a path: read it now, leave no file open
        img.load()
        return img.copy()


def _grid(n: int, inputs: dict, proc: Any) -> tuple:
    thw = inputs.get("image_grid_thw")
    if thw is not None:  # Qwen2-VL: patches merged `merge_size` x `merge_size` into one token
        merge = int(getattr(getattr(proc, "image_processor", None), "merge_size", 1) or 1)
        _, h, w = (int(v) for v in thw[0])
        if (h // merge) * (w // merge) == n:
            return (h // merge, w // merge)
    side = math.isqrt(n)
    return (side, side) if side * side == n else (1, n)


def _region(size: tuple, image_processor: Any) -> list:
    """`[x0, y0, x1, y1]` (fractions of the picture) that the model's view covers: all of it, or the centre
    a CLIP-style processor crops after resizing the shortest edge."""
    if not getattr(image_processor, "do_center_crop", False):
        return [0.0, 0.0, 1.0, 1.0]
    crop = getattr(image_processor, "crop_size", None) or {}
    short = (getattr(image_processor, "size", None) or {}).get("shortest_edge")
    w, h = size
    if not (crop and short and w and h):
        return [0.0, 0.0, 1.0, 1.0]
    scale = float(short) / min(w, h)
    fw, fh = min(1.0, crop["width"] / (w * scale)), min(1.0, crop["height"] / (h * scale))
    return [round((1 - fw) / 2, 6), round((1 - fh) / 2, 6), round((1 + fw) / 2, 6), round((1 + fh) / 2, 6)]


def process_pictures(local: Any, images: Sequence[Any]) -> list:
    """`(n_tokens, grid, inputs, region)` per image: the processor run on its placeholder and the image alone
    (`region`: the part of the picture the tokens cover, `[x0, y0, x1, y1]` in fractions)."""
    proc = _processor(local)
    tid = image_token_id(local)
    token = local.text_tokenizer.convert_ids_to_tokens(tid)
    out = []
    for image in images:
        picture = _open(image)
        enc = dict(proc(text=[token], images=[picture], return_tensors="pt"))
        n = int((enc.pop("input_ids") == tid).sum())
        inputs = {k: v for k, v in enc.items() if k not in ("attention_mask", "mm_token_type_ids", "token_type_ids")}
        out.append((n, _grid(n, inputs, proc), inputs, _region(picture.size, proc.image_processor)))
    return out


def expand_pictures(
    local: Any, passes: list, images: "list[tuple[Any, Optional[int]]]", rendered: str
) -> "tuple[list, list]":
    """The passes with each image placeholder expanded to its image's tokens.

    Args:
        local: the model (`compute.LocalModel`).
        passes: from `plan_passes` on the conversation holding `images`.
        images: `conversation_pictures` of that conversation.
        rendered: the whole conversation as the template writes it (one image token a picture).

    Raises:
        ValueError: the rendering holds another number of image tokens than there are pictures.

    Returns:
        `(passes, processed)`: new passes (ids, offsets, turns' token ranges shifted; `images` the
        `ImageSpan`s each holds) and `process_pictures` of the images.
    """
    tid = image_token_id(local)
    found = rendered.count(local.text_tokenizer.convert_ids_to_tokens(tid))
    if found != len(images):  # text holding the image token itself would shift every later picture
        raise ValueError(
            f"the rendered conversation holds {found} image tokens for {len(images)} pictures "
            "(does a message's text contain the image token?): its pictures cannot be placed"
        )
    processed = process_pictures(local, [im for im, _ in images])
    out = []
    for tf_pass in passes:
        ids: "list[int]" = []
        offsets: list = []
        spans: "list[ImageSpan]" = []
        shift = []  # per original token: its index in the expanded pass
        for tok, off in zip(tf_pass.ids, tf_pass.offsets):
            shift.append(len(ids))
            if tok == tid and len(spans) < len(processed):
                k = len(spans)
                n, grid = processed[k][:2]
                spans.append(ImageSpan(k, images[k][1], len(ids), n, grid))
                ids.extend([tid] * n)
                offsets.extend([off] * n)  # every image token stands where its placeholder was written
            else:
                ids.append(tok)
                offsets.append(off)
        shift.append(len(ids))
        turns = [replace(pt, gen_tokens=(shift[pt.gen_tokens[0]], shift[pt.gen_tokens[1]])) for pt in tf_pass.turns]
        out.append(replace(tf_pass, ids=ids, offsets=offsets, turns=turns, images=spans))
    return out, processed


def pass_inputs(processed: list, spans: Sequence[ImageSpan], device: Any = None) -> dict:
    """The model inputs beside the ids for a pass holding `spans` (empty without images)."""
    if not spans:
        return {}
    import torch

    inputs = {k: torch.cat([processed[s.image][2][k] for s in spans]) for k in processed[spans[0].image][2]}
    return {k: v.to(device) for k, v in inputs.items()} if device is not None else inputs

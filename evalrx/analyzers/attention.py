"""Attention by segment: where the model looked, per layer, when it made each decision.

The conversation is cut into segments (the system turn with its tool schemas, the
user prompt, each tool observation, each earlier model turn, the current turn,
image tokens) by character offsets of the rendered conversation. For every
decision position, each layer's attention row (averaged over heads) is summed per
segment, so a row sums to 1 over the segments.

The head-averaged rows at the decision positions come from `evalrx.internals.passes.teacher_forced`:
rebuilt from the pass's residual streams and KV cache on a Llama-shaped model (the
model keeps its kernel), else from eager attention for that pass only, reduced inside
a hook so the `[heads, T, T]` maps of all layers are never held at once. The rows are
summed per segment here.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from evalrx.analyzers._base import AnalysisResult, model_id, register_analyzer, register_result
from evalrx.analyzers._pass_analyzer import PassAnalyzer
from evalrx.core.capability import Capability
from evalrx.core.content import content_text
from evalrx.internals.passes import (
    KINDS,
    PassRequest,
    PassResult,
    TrajectoryPlan,
    conversation_pictures,
    tokenize_with_offsets,
)

__all__ = ["AttentionAnalyzer", "AttentionResult", "SEGMENT_KINDS"]

SEGMENT_KINDS = ("system", "prompt", "user", "observation", "turn", "current", "image", "text")
_IMAGE_TOKENS = ("<|image_pad|>", "<image>", "<|image|>", "<image_soft_token>", "<|vision_pad|>")
_ROLE_MARKERS = re.compile(r"<\|im_start\|>(\w+)|<\|start_header_id\|>(\w+)<\|end_header_id\|>")


@register_result
class AttentionResult(AnalysisResult):
    """Attention mass per decision position, decoder layer and segment.

    Attributes:
        positions: query positions `[P]`; `token_ids` the token at each.
        mass: `[P, L, S]` float32, the head-averaged attention of each layer's row summed per segment.
        segments: `[{"kind", "step", "label"}]` per segment (kinds from `SEGMENT_KINDS`;
            "turn" segments whose step equals the position's step are its current turn).
        labels: per position, as in `LensResult` (`label_step`, `label_kind`, ...).
        patches: `[P, L, N]` float32 for a vision model: the same rows over each image token, the
            images of the conversation one after another (0 where an image came after the position);
            an image's tokens sum to its share of its step's "image" segment (the pictures one step
            showed share one segment; stored in float16).
        images: per image `{"step", "offset", "n", "grid": [rows, cols], "region": [x0, y0, x1, y1]}`: the step
            that showed it, where its tokens start in `patches` and how many, the patch grid they cover
            (row-major) and the part of the picture that grid spans (fractions; a processor may crop).
    """

    result_type = "attention"

    def __init__(self, positions, token_ids, mass, segments, labels=None, info=None, patches=None, images=None):
        self.positions = np.asarray(positions, dtype=np.int32)
        self.token_ids = np.asarray(token_ids, dtype=np.int32)
        self.mass = np.asarray(mass, dtype=np.float32)
        self.segments = list(segments)
        self.labels: "dict[str, Any]" = {
            k: (np.asarray(v) if k != "label_arg" else list(v)) for k, v in (labels or {}).items()
        }
        self.info = dict(info or {})
        n_p, n_l = self.mass.shape[:2]
        self.patches = np.zeros((n_p, n_l, 0), dtype=np.float32) if patches is None else np.asarray(patches, np.float32)
        self.images = list(images or [])

    def patch_map(self, position: int, image: int, layer: "int | None" = None) -> np.ndarray:
        """`[rows, cols]` attention of the `position`-th analysed position to each patch of image `image`,
        at decoder layer `layer` (None: the mean over layers)."""
        img = self.images[image]
        block = self.patches[position, :, img["offset"] : img["offset"] + img["n"]]
        row = block.mean(0) if layer is None else block[layer]
        rows, cols = img["grid"]
        return row.reshape(rows, cols)

    def by_kind(self) -> "tuple[list, np.ndarray]":
        """Mass summed per segment kind: `(kinds, [P, L, len(kinds)])`; a position's own turn counts as "current"."""
        kinds = list(SEGMENT_KINDS)
        out = np.zeros(self.mass.shape[:2] + (len(kinds),), dtype=np.float32)
        steps = self.labels.get("label_step")
        for s, seg in enumerate(self.segments):
            for p in range(self.mass.shape[0]):
                kind = seg["kind"]
                if kind == "turn" and steps is not None and seg.get("step") == int(steps[p]):
                    kind = "current"
                out[p, :, kinds.index(kind)] += self.mass[p, :, s]
        return kinds, out

    def looked(self, rows: Sequence[int], image: int) -> float:
        """How much the positions `rows` looked at picture `image`: its share of their attention over the share
        an even spread over every token they see would give its tokens, averaged over positions and layers
        (1: as much as an even spread; under 1: less)."""
        img = self.images[image]
        share = self.patches[list(rows), :, img["offset"] : img["offset"] + img["n"]].sum(-1)  # [P, L]
        even = img["n"] / (self.positions[list(rows)].astype(np.float64) + 1.0)
        return float((share / even[:, None]).mean())

    def to_arrays(self) -> dict:
        arrays: "dict[str, Any]" = {"positions": self.positions, "token_ids": self.token_ids, "mass": self.mass}
        if self.images:  # half precision: a real VLM's pictures are ~1k tokens each, at every position and layer
            arrays["patches"] = self.patches.astype(np.float16)
        for k, v in self.labels.items():
            if k != "label_arg":
                arrays[k] = v
        return arrays

    @property
    def meta(self) -> dict:
        meta = {
            "result_type": self.result_type,
            "analyzer": AttentionAnalyzer.name,
            "segments": self.segments,
            "kinds": list(KINDS),
            "info": self.info,
        }
        if self.images:
            meta["images"] = self.images
        if "label_arg" in self.labels:
            meta["label_arg"] = self.labels["label_arg"]
        return meta

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict) -> "AttentionResult":
        labels = {k: v for k, v in arrays.items() if k.startswith("label_")}
        if "label_arg" in meta:
            labels["label_arg"] = meta["label_arg"]
        return cls(
            arrays["positions"],
            arrays["token_ids"],
            arrays["mass"],
            meta.get("segments") or [],
            labels,
            meta.get("info"),
            arrays.get("patches"),
            meta.get("images"),
        )


def _segment_mass(rows: Any, seg_of_token: np.ndarray, n_segments: int) -> np.ndarray:
    """`[P, L, S]` mass per segment from `[L, P, T]` attention rows."""
    import torch

    n_tokens = rows.shape[-1]
    onehot = torch.zeros(n_tokens, n_segments, dtype=torch.float32, device=rows.device)
    seg = torch.as_tensor(np.asarray(seg_of_token), dtype=torch.long, device=rows.device)
    onehot[torch.arange(n_tokens, device=rows.device), seg] = 1.0
    return torch.matmul(rows, onehot).permute(1, 0, 2).contiguous().cpu().numpy()


def segment_mass(
    local: Any, ids: Sequence[int], positions: Sequence[int], seg_of_token: np.ndarray, n_segments: int
) -> np.ndarray:
    """One teacher-forced pass; returns `[P, L, S]` attention mass of each query position per segment."""
    from evalrx.internals.passes import teacher_forced

    _, _, rows = teacher_forced(local, ids, [len(ids) - 1], hidden=False, attention=positions)
    return _segment_mass(rows, seg_of_token, n_segments)


def _image_token_ids(local: Any) -> set:
    tok = local.text_tokenizer
    ids = set()
    for t in _IMAGE_TOKENS:
        i = tok.convert_tokens_to_ids(t)
        if isinstance(i, int) and i >= 0 and i != tok.unk_token_id:
            ids.add(i)
    cfg = getattr(local.hf, "config", None)
    for attr in ("image_token_id", "image_token_index"):
        v = getattr(cfg, attr, None)
        if isinstance(v, int):
            ids.add(v)
    return ids


def _segment_kind(info: dict) -> str:
    return {
        "system": "system",
        "prompt": "prompt",
        "user": "user",
        "nudge": "user",
        "image": "user",
        "tool": "observation",
        "parse_error": "observation",
        "assistant": "turn",
    }.get(info["kind"], "text")


def _pass_segments(local: Any, conv: Any, tf_pass: Any) -> "tuple[np.ndarray, list]":
    """Segment id per token of a pass, and the segment descriptions."""
    text = tf_pass.text
    n_msgs = tf_pass.turns[-1].turn.message_index + 1
    tools = tf_pass.tools
    starts: list = [0]
    segs: list = [{"kind": "system", "step": None, "label": "system"}]
    cursor = 0
    for k in range(n_msgs):
        info = conv.message_info[k]
        if k == 0 and info["kind"] == "system":
            continue  # the system turn is segment 0, from the first character
        boundary = None
        try:
            rendered = conv.render(local.renderer, k, tools, False) if k else ""
        except Exception:  # some templates refuse partial conversations: place by content instead
            rendered = ""
        if rendered and text.startswith(rendered) and len(rendered) >= cursor:
            boundary = len(rendered)
        else:
            body = content_text(conv.messages[k].get("content"))
            at = text.find(body, cursor) if body else -1
            if at >= 0:
                boundary = at
        if boundary is None or boundary < cursor:
            continue  # cannot place it: it stays in the previous segment
        cursor = boundary
        starts.append(boundary)
        kind = _segment_kind(info)
        label = kind if info["step"] is None else f"{kind}@{info['step']}"
        segs.append({"kind": kind, "step": info["step"], "label": label})
    seg_chars = np.array(starts)
    tok_starts = np.array([s for s, _ in tf_pass.offsets]) if tf_pass.offsets else np.zeros(0, dtype=int)
    seg_of = np.clip(np.searchsorted(seg_chars, tok_starts, side="right") - 1, 0, len(segs) - 1)
    # Generated tokens belong to their turn even where the template's boundary falls elsewhere.
    for pt in tf_pass.turns:
        s = next((i for i, g in enumerate(segs) if g["kind"] == "turn" and g["step"] == pt.step_idx), None)
        if s is not None:
            seg_of[pt.gen_tokens[0] : pt.gen_tokens[1]] = s
    if tf_pass.images:  # a VLM pass: one segment per image, on the step that showed it
        for span in tf_pass.images:
            segs.append({"kind": "image", "step": span.step, "label": f"image@{span.step}"})
            seg_of[span.start : span.start + span.n] = len(segs) - 1
        return seg_of.astype(np.int64), segs
    image_ids = _image_token_ids(local)
    if image_ids:
        is_image = np.isin(np.asarray(tf_pass.ids), list(image_ids))
        if is_image.any():
            segs.append({"kind": "image", "step": None, "label": "image"})
            seg_of[is_image] = len(segs) - 1
    return seg_of.astype(np.int64), segs


def _text_segments(local: Any, text: str, ids: Sequence[int], offsets: Sequence[tuple]) -> "tuple[np.ndarray, list]":
    """Segments of a raw prompt: one per chat role marker, or the whole text."""
    starts, segs = [0], [{"kind": "text", "step": None, "label": "text"}]
    roles = {"system": "system", "user": "user", "assistant": "turn", "tool": "observation", "ipython": "observation"}
    for m in _ROLE_MARKERS.finditer(text):
        role = m.group(1) or m.group(2)
        kind = roles.get(role, "text")
        if m.start() == 0:
            segs[0] = {"kind": kind, "step": None, "label": role}
            continue
        starts.append(m.start())
        segs.append({"kind": kind, "step": None, "label": role})
    tok_starts = np.array([s for s, _ in offsets])
    seg_of = np.clip(np.searchsorted(np.array(starts), tok_starts, side="right") - 1, 0, len(segs) - 1)
    image_ids = _image_token_ids(local)
    if image_ids:
        is_image = np.isin(np.asarray(ids), list(image_ids))
        if is_image.any():
            segs.append({"kind": "image", "step": None, "label": "image"})
            seg_of[is_image] = len(segs) - 1
    return seg_of.astype(np.int64), segs


def image_layout(plan: TrajectoryPlan) -> list:
    """Where each image of the conversation sits in `AttentionResult.patches` (see `AttentionResult.images`)."""
    layout, offset = [], 0
    for (n, grid, _, region), (_, step) in zip(plan.images, conversation_pictures(plan.conversation)):
        layout.append(
            {"step": step, "offset": offset, "n": int(n), "grid": [int(grid[0]), int(grid[1])], "region": region}
        )
        offset += int(n)
    return layout


def _merge(results: Sequence[tuple], info: dict, images: Sequence[dict] = ()) -> AttentionResult:
    """Join per-pass results onto one segment list keyed by (kind, step), and their patches onto `images`."""
    keys: list = []
    segments: list = []
    for _, _, _, segs, _, _ in results:
        for seg in segs:
            key = (seg["kind"], seg["step"])
            if key not in keys:
                keys.append(key)
                segments.append(seg)
    n_p = sum(len(r[0]) for r in results)
    n_l = results[0][2].shape[1]
    mass = np.zeros((n_p, n_l, len(segments)), dtype=np.float32)
    patches = np.zeros((n_p, n_l, sum(img["n"] for img in images)), dtype=np.float32)
    positions: "list[int]" = []
    token_ids: "list[int]" = []
    labels: "dict[str, list]" = {}
    row = 0
    for pos, toks, m, segs, lab, pat in results:
        for s, seg in enumerate(segs):
            mass[row : row + len(pos), :, keys.index((seg["kind"], seg["step"]))] += m[:, :, s]
        for k, block in pat:  # image k's rows
            at = images[k]["offset"]
            patches[row : row + len(pos), :, at : at + block.shape[-1]] = block
        row += len(pos)
        positions.extend(pos)
        token_ids.extend(toks)
        for k, v in lab.items():
            labels.setdefault(k, []).extend(list(v))
    return AttentionResult(positions, token_ids, mass, segments, labels, info, patches, list(images))


@register_analyzer
class AttentionAnalyzer(PassAnalyzer):
    """Attention mass per layer over conversation segments at each decision position.

    Needs ATTENTION: a local handle whose rows can be rebuilt from its KV cache, one
    already running eager attention, or one whose model can switch to eager (it is
    switched for the passes that read attention only, so generation keeps the fast
    kernel; under `analyze` the analyzers sharing such a pass read the same forward).

    Args:
        mode: "auto" or "per_step" (see `LogitLensAnalyzer`).
        kinds: decision kinds analysed (default: tool names, argument values, turn starts;
            answers are many tokens and add little, except in a pass that shows pictures).
    """

    name = "attention"
    requires = frozenset({Capability.ATTENTION})
    generation_capture = frozenset({"attention"})

    def __init__(self, *, mode: str = "auto", kinds: Sequence[str] = ("tool_name", "arg_value", "turn_start")) -> None:
        self.mode = mode
        self.kinds = tuple(kinds)

    def check(self, model: Any) -> None:
        """A local model without eager attention still qualifies: its rows are rebuilt from the pass's KV cache,
        or it runs eager for these passes only."""
        caps = frozenset(getattr(model, "capabilities", frozenset()) or frozenset())
        hf = getattr(model, "model", None)
        if Capability.ATTENTION not in caps and callable(getattr(hf, "set_attn_implementation", None)):
            return
        super().check(model)

    def run(self, model: Any, text: str, *, positions: "Sequence[int] | None" = None) -> AttentionResult:
        """Attention of `positions` (default: the last) over the role turns of a rendered prompt."""
        from evalrx.internals.passes import local_model

        self.check(model)
        local = local_model(model, type(self).__name__)
        ids, offsets = tokenize_with_offsets(local.tokenizer, text)
        if not ids:
            raise ValueError("text tokenizes to nothing")
        n = len(ids)
        pos = [n - 1] if positions is None else [p + n if p < 0 else p for p in positions]
        seg_of, segs = _text_segments(local, text, ids, offsets)
        mass = segment_mass(local, ids, pos, seg_of, len(segs))
        return AttentionResult(
            pos, [ids[p] for p in pos], mass, segs, None, {"model": model_id(model), "source": "text"}
        )

    def requests(self, plan: TrajectoryPlan) -> list:
        """Per pass, the attention rows at the decision positions of the kinds analysed."""
        from evalrx.analyzers.logit_lens import _labels_for

        out: list = []
        for i, tf_pass in enumerate(plan.passes):
            # A pass that shows pictures also reads its answers: a value read from a picture is often written there.
            kinds = self.kinds + (("answer",) if tf_pass.images and "answer" not in self.kinds else ())
            points = [p for p in plan.decisions(i) if p.kind in kinds]
            if not points:
                out.append(None)
                continue
            seg_of, segs = _pass_segments(plan.local, plan.conversation, tf_pass)
            labels = _labels_for(points, i)
            out.append(PassRequest(attention=[p.position for p in points], state=(seg_of, segs, labels)))
        return out

    def read(self, plan: TrajectoryPlan, request: PassRequest, result: PassResult) -> tuple:
        seg_of, segs, labels = request.state
        pos = [int(p) for p in request.attention]
        rows = result.attention_at(pos)
        mass = _segment_mass(rows, seg_of, len(segs))
        # Each image's rows over its tokens, [P, L, n]: the patch map (sums to the image segment's mass).
        patches = [
            (span.image, rows[:, :, span.start : span.start + span.n].permute(1, 0, 2).float().cpu().numpy())
            for span in result.tf_pass.images
        ]
        return pos, [result.ids[p] for p in pos], mass, segs, labels, patches

    def finish(self, plan: TrajectoryPlan, parts: list) -> AttentionResult:
        """The passes' positions on one segment list keyed by (kind, step)."""
        info = plan.info()
        results = [part for part in parts if part is not None]
        if not results:
            n_l = plan.local.parts.num_layers
            return AttentionResult([], [], np.zeros((0, n_l, 0), dtype=np.float32), [], {}, info)
        return _merge(results, info, image_layout(plan))

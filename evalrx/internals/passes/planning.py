"""Plan the teacher-forced passes over a rebuilt conversation.

`plan_passes` renders the conversation once and checks, per model turn, that the
prompt the model saw at that turn is a token prefix of the full rendering. Turns
that pass are analysed together in ONE teacher-forced pass (attention is causal, so
the prefix's hidden states are the same); turns whose template rewrites history
(or whose tools differ, such as the forced final turn) get a pass of their own.

`TrajectoryPlan` is what every analyzer of one trajectory reads: the conversation,
its passes, and their decision positions (found once, shared). Pure Python: nothing
here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from evalrx.core.case import Trajectory
from evalrx.core.content import has_picture
from evalrx.core.model import model_id
from evalrx.internals.passes.conversation import (
    ActorTurn,
    Conversation,
    conversation_from_trajectory,
    drop_pictures,
    replay_style,
)
from evalrx.internals.passes.pictures import conversation_pictures, expand_pictures, pass_inputs
from evalrx.internals.passes.positions import first_token_at, tokenize_with_offsets

__all__ = [
    "PassResult",
    "PassTurn",
    "TeacherForcedPass",
    "TrajectoryPlan",
    "describe_passes",
    "eos_text",
    "answer_known_words",
    "pass_decisions",
    "plan_passes",
    "plan_trajectory",
]


@dataclass
class PassTurn:
    """One model turn inside a teacher-forced pass.

    Attributes:
        step_idx: the trajectory step.
        gen_chars: `[start, end)` characters of the text the model generated (end-of-turn token included).
        gen_tokens: `[start, end)` token indices of that text.
    """

    step_idx: int
    gen_chars: tuple
    gen_tokens: tuple
    turn: ActorTurn


@dataclass
class TeacherForcedPass:
    """One forward pass: the token ids, their offsets in the rendered text, the turns it covers."""

    text: str
    ids: list
    offsets: list
    turns: list
    tools: Optional[list] = None  # the tool schemas the text was rendered with
    shared: bool = False  # the full conversation's pass (as opposed to one turn's own)
    images: list = field(default_factory=list)  # a VLM pass's images (`pictures.ImageSpan`), in order

    @property
    def steps(self) -> list:
        return [t.step_idx for t in self.turns]


def eos_text(tokenizer: Any) -> Optional[str]:
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    eos = getattr(tok, "eos_token", None)
    return str(eos) if eos else None


def _generated_chars(text: str, start: int, end_hint: int, content: str, eos: Optional[str]) -> int:
    """End of what the model generated in a turn starting at `start`: its text plus the end-of-turn token."""
    if content and text.startswith(content, start):
        end = start + len(content)
    else:  # the template wrote the turn (OpenAI-style calls): take the rendered message up to eos
        end = end_hint
        if eos:
            at = text.find(eos, start, end_hint)
            if at >= 0:
                return at + len(eos)
        return end
    if eos and text.startswith(eos, end):
        end += len(eos)
    return end


def _batch_ids(tokenizer: Any, texts: list) -> list:
    """Token ids of several texts without added special tokens."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    return [list(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]


def _own_pass(tokenizer: Any, prompt: str, completion: str, turn: ActorTurn, eos: Optional[str]) -> TeacherForcedPass:
    """A pass holding one turn: the prompt the model saw, then what it generated."""
    p_ids, p_off = tokenize_with_offsets(tokenizer, prompt)
    text = prompt + completion
    ids, offs = tokenize_with_offsets(tokenizer, text)
    if ids[: len(p_ids)] != p_ids:  # tokens merged across the boundary: keep the model's prompt tokens
        c_ids, c_off = tokenize_with_offsets(tokenizer, completion)
        ids = p_ids + c_ids
        offs = p_off + [(s + len(prompt), e + len(prompt)) for s, e in c_off]
    gen_end = _generated_chars(text, len(prompt), len(text), turn.content, eos)
    g0 = len(p_ids)
    g1 = first_token_at(offs, gen_end)
    turns = [PassTurn(turn.step_idx, (len(prompt), gen_end), (g0, g1), turn)]
    return TeacherForcedPass(text, ids, offs, turns, turn.tools)


def _known_prompt(ids: Optional[list], full_ids: list, full_off: list, prompt_end: int) -> Optional[list]:
    """`ids` when they are the full pass's first tokens and end where the prompt's text ends, else None."""
    if not ids or full_ids[: len(ids)] != list(ids):
        return None
    g0 = len(ids)
    after = full_off[g0][0] if g0 < len(full_off) else prompt_end
    return list(ids) if full_off[g0 - 1][1] <= prompt_end <= after else None


def plan_passes(
    tokenizer: Any,
    conversation: Conversation,
    *,
    mode: str = "auto",
    renderer: Any = None,
    prompt_ids: Optional[dict] = None,
    generated_ids: Optional[dict] = None,
) -> "list[TeacherForcedPass]":
    """Group the conversation's model turns into as few teacher-forced passes as the template allows.

    Args:
        tokenizer: the local model's tokenizer (or processor) with its chat template.
        conversation: from `conversation_from_trajectory`.
        mode: "auto" (one pass for every prefix-stable turn, own passes for the rest)
            or "per_step" (one pass per turn; the reference the one-pass result must match).
        renderer: what renders the chat template (a local handle's `render`); the tokenizer when None.
        prompt_ids: `{step: ids}` of prompts already tokenized on this model (the generation
            captures'): a turn whose ids are the full pass's first tokens, ending where its
            rendered prompt ends, is not tokenized again.
        generated_ids: `{step: ids}` the model generated (the generation captures'): where a pass's last
            turn re-tokenizes otherwise than generated (a model may write "\n\n" as two tokens the
            tokenizer would merge), the pass holds the generated tokens, which write the same text.

    Returns:
        The passes; the shared pass (if any) first, truncated after its last turn.
    """
    if mode not in ("auto", "per_step"):
        raise ValueError(f"mode must be 'auto' or 'per_step', got {mode!r}")
    msgs = conversation.messages
    eos = eos_text(tokenizer)
    renderer = renderer if renderer is not None else tokenizer
    full_text = conversation.render(renderer, len(msgs), conversation.tools, False)
    full_ids, full_off = tokenize_with_offsets(tokenizer, full_text) if mode == "auto" else ([], [])
    rendered = []
    for turn in conversation.turns:
        mi = turn.message_index
        prompt = conversation.render(renderer, mi, turn.tools, True)
        upto = conversation.render(renderer, mi + 1, turn.tools, False)
        # Stable when the full rendering starts with this turn as the model saw and wrote it:
        # the prompt (compared as tokens) and the turn itself (a template may rewrite past turns).
        # A turn the template renders otherwise than the model wrote it (an id it adds, a space)
        # gets its own pass over what the model wrote.
        as_written = not getattr(turn, "verbatim", True) or upto.startswith(prompt + turn.content + (eos or ""))
        candidate = mode == "auto" and as_written and upto.startswith(prompt) and full_text.startswith(upto)
        rendered.append((turn, prompt, upto, candidate, as_written))
    known = {
        turn.step_idx: _known_prompt((prompt_ids or {}).get(turn.step_idx), full_ids, full_off, len(prompt))
        for turn, prompt, _, candidate, _ in rendered
        if candidate
    }
    # One batched call tokenizes every other candidate prompt (the fast tokenizer runs it in parallel).
    texts = [prompt for turn, prompt, _, candidate, _ in rendered if candidate and known[turn.step_idx] is None]
    tokenized = iter(_batch_ids(tokenizer, texts) if texts else [])
    shared: list = []
    own: list = []
    for turn, prompt, upto, candidate, as_written in rendered:
        p_ids = (known[turn.step_idx] or next(tokenized)) if candidate else None
        if p_ids is not None and full_ids[: len(p_ids)] == p_ids:
            gen_end = _generated_chars(full_text, len(prompt), len(upto), turn.content, eos)
            g0 = len(p_ids)
            g1 = first_token_at(full_off, gen_end)
            shared.append(PassTurn(turn.step_idx, (len(prompt), gen_end), (g0, g1), turn))
        else:
            completion = upto[len(prompt) :] if upto.startswith(prompt) and as_written else (turn.content + (eos or ""))
            own.append(_own_pass(tokenizer, prompt, completion, turn, eos))
    passes: list = []
    if shared:
        n = max(t.gen_tokens[1] for t in shared)
        passes.append(TeacherForcedPass(full_text, full_ids[:n], full_off[:n], shared, conversation.tools, True))
    return [_as_generated(tokenizer, p, generated_ids or {}) for p in passes + own]


def _as_generated(tokenizer: Any, tf_pass: TeacherForcedPass, generated_ids: dict) -> TeacherForcedPass:
    """`tf_pass` with its last turn's tokens as the model generated them, where they differ from the
    re-tokenized text but write it exactly (the pass ends with that turn, so nothing after it moves)."""
    last = tf_pass.turns[-1]
    gen = generated_ids.get(last.step_idx)
    g0, g1 = last.gen_tokens
    if not gen or g1 != len(tf_pass.ids) or tf_pass.images:
        return tf_pass
    c0, c1 = last.gen_chars
    want = tf_pass.text[c0:c1]
    own = list(gen)
    if own == tf_pass.ids[g0:g1]:
        return tf_pass
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    pieces = [tok.decode([i], skip_special_tokens=False) for i in own]
    eos = eos_text(tokenizer)
    if "".join(pieces) != want and eos and "".join(pieces) + eos == want and g1 > g0:
        own.append(tf_pass.ids[g1 - 1])  # a turn cut at its token limit: the end-of-turn token the text adds
        pieces.append(eos)
    if "".join(pieces) != want:
        return tf_pass
    offsets: list = []
    at = c0
    for piece in pieces:
        offsets.append((at, at + len(piece)))
        at += len(piece)
    ids = tf_pass.ids[:g0] + own
    turns = tf_pass.turns[:-1] + [PassTurn(last.step_idx, last.gen_chars, (g0, len(ids)), last.turn)]
    return TeacherForcedPass(
        tf_pass.text, ids, tf_pass.offsets[:g0] + offsets, turns, tf_pass.tools, tf_pass.shared, tf_pass.images
    )


def describe_passes(passes: Sequence[TeacherForcedPass]) -> dict:
    """JSON-safe summary of a plan: mode and per-pass steps and lengths."""
    if all(p.shared for p in passes):
        mode = "one_pass"
    elif not any(p.shared for p in passes):
        mode = "per_step"
    else:
        mode = "mixed"
    return {
        "mode": mode,
        "passes": [{"steps": p.steps, "n_tokens": len(p.ids), "shared": p.shared} for p in passes],
    }


def plan_trajectory(
    tokenizer: Any,
    trajectory: Trajectory,
    *,
    tools: Optional[Sequence[Any]] = None,
    system: Optional[str] = None,
    mode: str = "auto",
    renderer: Any = None,
    prompt_ids: Optional[dict] = None,
    images: Optional[dict] = None,
    vision: bool = False,
    generated_ids: Optional[dict] = None,
) -> "tuple[Conversation, list]":
    """Rebuild the conversation of `trajectory` and plan its teacher-forced passes.

    With `vision` and every picture the conversation shows in `images` (`{step: [image, ...]}`: the
    case image on the prompt's step, the images a tool returned on its step), the image blocks
    hold them (each renders as its placeholder token; `pictures.expand_pictures` expands them).
    Otherwise image blocks are dropped and the turns are scored on their text.
    `prompt_ids` and `generated_ids` as `plan_passes` takes them.
    """
    style = replay_style(renderer) if renderer is not None else "auto"  # the scoring model's own call format
    conv = conversation_from_trajectory(trajectory, system, tools, style=style, images=images)
    if has_picture(conv.messages) and not (vision and all(im is not None for im, _ in conversation_pictures(conv))):
        conv = drop_pictures(conv)
    return conv, plan_passes(
        tokenizer, conv, mode=mode, renderer=renderer, prompt_ids=prompt_ids, generated_ids=generated_ids
    )


def pass_decisions(tokenizer: Any, tf_pass: TeacherForcedPass, *, known: Any = None, **caps: Any) -> list:
    """Decision points of every turn in a pass (see `positions.find_decision_points`).

    `known(turn)` gives the `known_words` a turn's answer values may share (none when None).
    """
    from evalrx.internals.passes.positions import find_decision_points

    eos = eos_text(tokenizer)
    points: list = []
    for pt in tf_pass.turns:
        points.extend(
            find_decision_points(
                pt.step_idx,
                tf_pass.text,
                tf_pass.offsets,
                pt.gen_chars,
                pt.gen_tokens,
                pt.turn.calls,
                is_answer=pt.turn.is_answer,
                eos_text=eos,
                known=known(pt.turn) if known is not None and pt.turn.is_answer else frozenset(),
                **caps,
            )
        )
    return points


def answer_known_words(conversation: Conversation, turn: ActorTurn, expected: Any = None) -> frozenset:
    """The words an answer turn's values may share (`positions.known_words`): the case's expected answer,
    the observations the model saw before the turn, and the arguments of the calls up to it."""
    from evalrx.core.content import content_text
    from evalrx.internals.passes.positions import known_words

    info = conversation.message_info
    seen = [
        content_text(m.get("content"))
        for k, m in enumerate(conversation.messages[: turn.message_index])
        if (info[k]["kind"] == "tool" if k < len(info) else m.get("role") == "tool")
    ]
    args = [c.get("args") for t in conversation.turns if t.message_index <= turn.message_index for c in t.calls]
    return known_words([expected, *seen, *args])


@dataclass
class TrajectoryPlan:
    """One trajectory on one local model: its rebuilt conversation and planned passes.

    Built once and read by every analyzer of the trajectory; the decision positions of
    each pass are found once per cap setting and shared.

    Attributes:
        local: the model (`compute.LocalModel`).
        trajectory: the stored trajectory.
        conversation: from `conversation_from_trajectory` (image blocks dropped unless a VLM sees them).
        passes: from `plan_passes` (a VLM's with its images expanded, `pictures.expand_pictures`).
        tools: the tools as the caller gave them (`Tool` objects or schema dicts).
        mode: the planning mode ("auto" or "per_step").
        images: `(n_tokens, grid, inputs, region)` per image of the conversation (`pictures.process_pictures`).
    """

    local: Any
    trajectory: Trajectory
    conversation: Conversation
    passes: list
    tools: Optional[list] = None
    mode: str = "auto"
    images: list = field(default_factory=list)
    _points: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        local: Any,
        trajectory: Trajectory,
        *,
        tools: Optional[Sequence[Any]] = None,
        system: Optional[str] = None,
        mode: str = "auto",
        captures: Optional[dict] = None,
        images: Optional[dict] = None,
    ) -> "TrajectoryPlan":
        """Rebuild the conversation of `trajectory` and plan its passes on `local`'s tokenizer and template.

        `captures` (`{step: GenerationCapture}`) lend the prompts they tokenized on this model and the
        tokens it generated;
        `images` (`{step: [image, ...]}`) are the pictures a vision model saw (see `plan_trajectory`).
        """
        from evalrx.core.capability import Capability

        vision = Capability.VISION in frozenset(getattr(local.handle, "capabilities", ()) or ())
        mine = {step: cap for step, cap in (captures or {}).items() if getattr(cap, "model_ref", None) == id(local.hf)}
        known = {step: cap.prompt_ids for step, cap in mine.items() if getattr(cap, "prompt_ids", None)}
        generated = {step: cap.generated_ids for step, cap in mine.items() if getattr(cap, "generated_ids", None)}
        conv, passes = plan_trajectory(
            local.tokenizer,
            trajectory,
            tools=tools,
            system=system,
            mode=mode,
            renderer=local.renderer,
            prompt_ids=known,
            images=images,
            vision=vision,
            generated_ids=generated,
        )
        processed: list = []
        shown = conversation_pictures(conv)
        if shown:
            rendered = conv.render(local.renderer, len(conv.messages), conv.tools, False)  # the planner's, cached
            passes, processed = expand_pictures(local, passes, shown, rendered)
        return cls(local, trajectory, conv, passes, None if tools is None else list(tools), mode, processed)

    def inputs(self, index: int) -> dict:
        """Model inputs beside the ids for pass `index` (a VLM's pixel values; empty for text)."""
        return pass_inputs(self.images, self.passes[index].images, self.local.device)

    def decisions(
        self, index: int, *, max_value_tokens: int = 16, max_answer_tokens: int = 64, answer_points: str = "values"
    ) -> list:
        """Decision points of pass `index` (see `positions.find_decision_points`); do not modify the list.

        With `answer_points="values"` an answer's points are its values (the words it shares with the case's
        expected answer, the observations and the calls' arguments among them, `answer_known_words`).
        """
        key = (index, max_value_tokens, max_answer_tokens, answer_points)
        if key not in self._points:
            expected = getattr(self.trajectory, "ground_truth", None)
            self._points[key] = pass_decisions(
                self.local.tokenizer,
                self.passes[index],
                known=lambda turn: answer_known_words(self.conversation, turn, expected),
                max_value_tokens=max_value_tokens,
                max_answer_tokens=max_answer_tokens,
                answer_points=answer_points,
            )
        return self._points[key]

    def info(self, **extra: Any) -> dict:
        """The `info` every trajectory result carries: model, sample, plan, then `extra`."""
        info = {"model": model_id(self.local.handle), **extra}
        info["sample_id"] = getattr(self.trajectory, "sample_id", None)
        info["plan"] = describe_passes(self.passes)
        if self.images:
            info["pictures"] = len(self.images)  # the pictures the passes saw (none: scored on the text alone)
        return info


@dataclass
class PassResult:
    """One teacher-forced forward over a planned pass, as every analyzer of the trajectory reads it.

    Attributes:
        plan: the trajectory's plan.
        index: the pass's index in `plan.passes`.
        logit_positions: the positions `logits` holds, in order.
        logits: `[len(logit_positions), V]` final logits, in the model's dtype.
        hidden_states: `L + 1` tensors `[1, T, D]` (None when no analyzer read them).
        attention_positions: the query positions `attention` holds, in order.
        attention: `[L, P, T]` fp32 attention rows averaged over heads (None when none were read).
    """

    plan: TrajectoryPlan
    index: int
    logit_positions: list
    logits: Any
    hidden_states: Any = None
    attention_positions: list = field(default_factory=list)
    attention: Any = None
    source: str = "teacher_forced"  # where logits and hidden states came from: or "generation"
    attention_source: str = "teacher_forced"
    notes: list = field(default_factory=list)  # (what, why) for each part that fell back to the teacher-forced pass
    lens_requests: list = field(default_factory=list)  # the `lens.LensRequest`s of the analyzers reading the pass
    _lens: Any = field(default=None, repr=False)

    @property
    def tf_pass(self) -> TeacherForcedPass:
        return self.plan.passes[self.index]

    @property
    def ids(self) -> list:
        """Token ids of the pass."""
        return self.tf_pass.ids

    @property
    def offsets(self) -> list:
        """Character offsets of the pass's tokens in its rendered text."""
        return self.tf_pass.offsets

    @property
    def text(self) -> str:
        return self.tf_pass.text

    def decisions(self, **caps: Any) -> list:
        """Decision points of this pass (shared across analyzers; see `TrajectoryPlan.decisions`)."""
        return self.plan.decisions(self.index, **caps)

    def lens_stats(
        self,
        positions: Sequence[int],
        targets: Sequence[int],
        top_k: int,
        gather_ids: Optional[Sequence[Sequence[int]]] = None,
        precision: str = "exact",
    ) -> Any:
        """`lens.lens_stats` at `positions` of this pass; analyzers that declared a `LensRequest` at the same
        precision share one unembedding of the union of their positions (`lens.SharedLens`)."""
        from evalrx.internals.passes.lens import SharedLens

        if self._lens is None:
            self._lens = SharedLens(self.plan.local, self.ids, self.hidden_states, self.logits_at, self.lens_requests)
        return self._lens.stats(positions, targets, top_k, gather_ids, precision)

    def logits_at(self, positions: Sequence[int]) -> Any:
        """Final logits `[len(positions), V]` at `positions` (each one must have been requested)."""
        return _rows(self.logits, 0, self.logit_positions, positions, "logits")

    def attention_at(self, positions: Sequence[int]) -> Any:
        """Attention rows `[L, len(positions), T]` at query `positions` (each one must have been requested)."""
        if self.attention is None:
            raise KeyError("no attention was requested for this pass")
        return _rows(self.attention, 1, self.attention_positions, positions, "attention rows")


def _rows(tensor: Any, dim: int, held: Sequence[int], positions: Sequence[int], what: str) -> Any:
    import torch

    row = {p: r for r, p in enumerate(held)}
    missing = [int(p) for p in positions if int(p) not in row]
    if missing:
        raise KeyError(f"{what} at positions {missing[:5]} were not requested for this pass")
    index = torch.tensor([row[int(p)] for p in positions], dtype=torch.long, device=tensor.device)
    return tensor.index_select(dim, index)

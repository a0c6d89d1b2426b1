"""The white-box source: a step where the model's own decision was weak or reversed by the last layer.

Three signs, each proposing its step as the first wrong one:
- tool decision (read through `ToolDecisionResult`: per decision, the chosen candidate's
  log-prob minus the best alternative's, per lens layer; an argument value at its least certain
  token): a margin clearly positive at a middle layer that collapsed by the last, or one the last
  layer barely had;
- logit lens (read through `LensResult`: its top-k per layer, targets, step and kind labels and
  vocabulary): at an argument or answer token, a middle layer confidently predicted (part of) a
  value the question or an earlier observation states, and the last layer wrote a token of no
  stated value (the right value was there and got lost);
- attention on a picture (read through `AttentionResult`'s patches, a vision model's): a value no
  earlier text states, so read from a picture, written while the picture's patches got under half
  the attention an even spread would give them (`misread_observation`: it wrote a value it barely looked at).
"""

from __future__ import annotations

from typing import Any, Optional

from evalrx.core.failures import Diagnosis
from evalrx.core.observation import observation_text, picture_count

# Nats. A lead of 1 nat is ~2.7x the alternative's probability; under 0.1 the model was nearly undecided.
LED_MIDWAY = 1.0
UNDECIDED = 0.1
CONFIDENCE = 0.4


def from_analyses(analyses: "dict[str, dict]", trajectory: Any = None) -> "list[Diagnosis]":
    """Diagnoses from white-box results, by analyzer name -> `{"meta", "arrays"}` (as the store returns them).

    The lens sign needs the `trajectory` (what the question and the observations stated).
    """
    found = _from_tool_decision(analyses)
    if trajectory is not None:
        found += _from_lens(analyses, trajectory)
        found += _from_image_attention(analyses, trajectory)
    return found


def _from_tool_decision(analyses: "dict[str, dict]") -> "list[Diagnosis]":
    rec = analyses.get("tool_decision")
    if not rec or (rec.get("meta") or {}).get("error"):
        return []
    meta, arrays = rec.get("meta") or {}, rec.get("arrays") or {}
    if arrays.get("margin") is None or not meta.get("decisions"):
        return []
    from evalrx.analyzers import ToolDecisionResult  # the one reader of its margins

    result = ToolDecisionResult.from_arrays(arrays, meta)
    best: Optional[tuple] = None
    for i, d, row in result.margin_rows():
        final = row[-1]
        peak = max(row[:-1], default=final)
        collapsed = peak >= LED_MIDWAY and final < UNDECIDED
        if not (collapsed or final < UNDECIDED):
            continue
        key = (d.get("step", 0), final)
        if best is None or key < best[0]:
            best = (key, i, d, final, peak, collapsed)
    if best is None:
        return []
    _, i, d, final, peak, collapsed = best
    return [_diagnosis(d, result.alternative(i)[0], final, peak, collapsed)]


def _diagnosis(d: dict, strongest: str, final: float, peak: float, collapsed: bool) -> Diagnosis:
    """`strongest`: the strongest alternative at the last layer ("" when the record keeps margins only)."""
    cands = [str(c) for c in d.get("candidates") or []]
    written = str(d.get("chosen") or (cands[0] if cands else "?"))
    chosen = cands[0] if cands else written  # what was measured: a value's decided token, or the whole name
    alt = strongest or next(iter(cands[1:]), "another token")
    what = "tool name" if d.get("kind") == "tool_name" else f"argument {d.get('arg', '')!s}"
    piece = d.get("piece")
    at_token = False
    if chosen != written and isinstance(piece, int) and piece >= 0:  # a value measured at one of its tokens:
        at_token = True  # say which, so the near miss reads as one
        what += f", token {piece + 1} of {written!r}"
    if collapsed:
        how = f"led by {peak:.2f} nats at a middle layer, {final:.2f} at the last"
    elif final < 0:
        how = f"{-final:.2f} nats behind it at the last layer"
    else:
        how = f"only {final:.2f} nats ahead at the last layer"
    kind = "wrong_tool" if d.get("kind") == "tool_name" else "bad_arguments"
    return Diagnosis(
        kind=kind,
        first_wrong_step=d.get("step"),
        confidence=CONFIDENCE,
        source="whitebox",
        evidence={
            "text": f"{what}: chose {chosen!r} over {alt!r}, {how}",
            "chosen": chosen,
            "alternative": alt,
            "margin_last": round(final, 4),
            "margin_peak": round(peak, 4),
            **({"value": written, "piece": piece} if at_token else {}),
            **_token(d.get("token_index"), d.get("pass"), d.get("call"), d.get("arg")),
        },
    )


def _token(token_index: Any, pass_index: Any, call: Any, arg: Any) -> dict:
    """Where the decision went wrong, for the panels (the token index in its pass); {} when unknown."""
    if token_index is None:
        return {}
    return {
        "token_index": int(token_index),
        "pass": int(pass_index or 0),
        "call": None if call is None else int(call),
        "arg": str(arg or ""),
    }


LENS_CONFIDENT = 0.5  # a middle layer's top token at least this likely counts as "the lens showed it"
_LENS_KINDS = {"arg_value": "bad_arguments", "answer": "misread_observation"}


def _from_lens(analyses: "dict[str, dict]", trajectory: Any) -> "list[Diagnosis]":
    import math

    from evalrx.analyzers import LensResult
    from evalrx.core.case import StepRole
    from evalrx.diagnosis._evidence import values_in

    rec = analyses.get("logit_lens")
    if not rec or (rec.get("meta") or {}).get("error"):
        return []
    try:
        lens = LensResult.from_arrays(rec.get("arrays") or {}, rec.get("meta") or {})
    except KeyError:  # no top-k or targets: nothing to read
        return []
    if not lens.labels:
        return []
    stated: dict = {}  # step -> the values (numbers, names) the question and earlier observations state

    def before(step: int) -> set:
        if step not in stated:
            parts = [trajectory.goal or ""] + [
                observation_text(s.observation) for s in trajectory.steps if s.role is StepRole.TOOL and s.idx < step
            ]
            stated[step] = {v.lower() for part in parts for v in values_in(part)}
        return stated[step]

    def states(values: set, piece: str) -> bool:
        return any(piece in v for v in values)

    n_layers = lens.topk_ids.shape[0]
    for p, decision in enumerate(lens.kinds):
        kind = _LENS_KINDS.get(decision)
        if kind is None:
            continue
        step, chosen = int(lens.labels["label_step"][p]), int(lens.target_ids[p])
        piece = str(lens.vocab.get(str(chosen), "")).strip().lower()
        for layer in range(1, n_layers - 1):
            top = int(lens.topk_ids[layer, p, 0])
            if top == chosen or math.exp(float(lens.topk_logprobs[layer, p, 0])) < LENS_CONFIDENT:
                continue
            right = str(lens.vocab.get(str(top), "")).strip().lower()
            values = before(step)
            # Word pieces of 3+ characters that are not one another's extension: short pieces match anything.
            distinct = len(right) >= 3 and piece.isalnum() and not (right.startswith(piece) or piece.startswith(right))
            if distinct and states(values, right) and not states(values, piece):
                return [
                    Diagnosis(
                        kind=kind,
                        first_wrong_step=step,
                        confidence=CONFIDENCE,
                        source="whitebox",
                        evidence={
                            "text": f"layer {layer} of {n_layers - 1} predicted {right!r}, which an "
                            f"earlier step states; the last layer wrote {piece!r}",
                            "chosen": piece,
                            "alternative": right,
                            "layer": layer,
                            "chosen_id": chosen,
                            "alternative_id": top,
                            **_lens_token(lens, p),
                        },
                    )
                ]
    return []


# A picture's tokens getting under this fraction of an even share of a position's attention (their count over
# the tokens it sees) is "barely looked at": a fixed ratio to the uniform reader, not fitted to any data.
LOOKED_AWAY = 0.5


def _written(step: Any, call: int, arg: str) -> str:
    """The text a model turn wrote for an argument (`call` >= 0) or as its answer."""
    if call < 0:
        return str(step.content or "")
    calls = step.tool_calls or []
    if call >= len(calls):
        return ""
    return str(calls[call].args.get(arg, ""))


def _returns_pictures(trajectory: Any, step_idx: int, call: int) -> bool:
    """Whether the tool step answering call `call` of model turn `step_idx` returned pictures."""
    from evalrx.core.case import StepRole

    for s in trajectory.steps:
        if s.idx > step_idx and s.role is StepRole.TOOL and int((s.span or {}).get("call", 0) or 0) == call:
            return bool(picture_count(s.observation) or (s.span or {}).get("n_images"))
        if s.idx > step_idx and s.role is StepRole.ACTOR:
            break
    return False


def _from_image_attention(analyses: "dict[str, dict]", trajectory: Any) -> "list[Diagnosis]":
    from evalrx.analyzers import KINDS, AttentionResult
    from evalrx.core.case import StepRole
    from evalrx.diagnosis._evidence import quote, values_in

    rec = analyses.get("attention")
    if not rec or (rec.get("meta") or {}).get("error") or not (rec.get("meta") or {}).get("images"):
        return []
    try:
        att = AttentionResult.from_arrays(rec.get("arrays") or {}, rec.get("meta") or {})
    except KeyError:
        return []
    labels = att.labels
    if "label_step" not in labels or not att.images:
        return []
    steps = {s.idx: s for s in trajectory.steps}
    groups: dict = {}  # (step, call, arg) -> analysed positions writing it
    for p in range(len(att.positions)):
        kind = KINDS[int(labels["label_kind"][p])]
        if kind not in ("arg_value", "answer"):
            continue
        args = labels.get("label_arg") or []
        key = (int(labels["label_step"][p]), int(labels["label_call"][p]), str(args[p] if p < len(args) else ""))
        groups.setdefault(key, []).append(p)
    for (step_idx, call, arg), rows in sorted(groups.items()):
        shown = [k for k, img in enumerate(att.images) if img.get("step") is not None and img["step"] < step_idx]
        step = steps.get(step_idx)
        if not shown or step is None:
            continue
        if call >= 0 and _returns_pictures(trajectory, step_idx, call):
            continue  # a call that fetches a picture takes where to look, not a value read
        written = _written(step, call, arg)
        before = [trajectory.goal or ""] + [
            observation_text(s.observation) if s.role is StepRole.TOOL else str(s.content or "")
            for s in trajectory.steps
            if s.role in (StepRole.TOOL, StepRole.USER) and s.idx < step_idx
        ]
        stated = {v.lower() for part in before for v in values_in(part)}
        # One-character values are left out: a "2" is as likely "twice" in the question as a digit in a picture.
        unstated = [v for v in values_in(written) if v.lower() not in stated and len(v) > 1]
        if not unstated:  # every value it wrote is in the text: not read from the picture
            continue
        img = att.images[shown[-1]]  # the latest picture before the step
        ratio = att.looked(rows, shown[-1])
        if ratio >= LOOKED_AWAY:
            continue
        what = f"argument {arg}" if call >= 0 else "the answer"
        return [
            Diagnosis(
                kind="misread_observation",
                first_wrong_step=step_idx,
                confidence=CONFIDENCE,
                source="whitebox",
                evidence={
                    "text": f"{what} wrote {quote(unstated[0])!r}, stated by no earlier text (read from the picture "
                    f"of step {img['step']}), while that picture got {ratio:.2f}x an even share of attention",
                    "image_step": int(img["step"]),
                    "attention_ratio": round(ratio, 4),
                    "position": int(rows[0]),
                    **_token(
                        int(labels["label_token_index"][rows[0]]),
                        int(labels["label_pass"][rows[0]]),
                        None if call < 0 else call,
                        arg,
                    ),
                },
            )
        ]
    return []


def _lens_token(lens: Any, p: int) -> dict:
    """The lens position `p` as a token of its pass (`_token`); {} for a result stored without token labels."""
    labels = lens.labels
    token = int(labels["label_token_index"][p])
    if token < 0:
        return {}
    call = int(labels["label_call"][p])
    args = labels.get("label_arg") or []
    return _token(token, int(labels["label_pass"][p]), None if call < 0 else call, args[p] if p < len(args) else "")


__all__ = ["from_analyses"]

"""What the Trajectory page's analysis panels show of one model turn, as plain rows (no Streamlit, no Markdown).

Each function reads one result class (`LensResult`, `ToolDecisionResult`, `AttentionResult`,
`TokenUncertaintyResult`) at one step and returns the rows a chart or a caption draws: the numpy
work stays here, so the app's panels only draw. Token text is made visible (whitespace marked) but
not escaped: the app escapes what it puts in Markdown or HTML.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

import numpy as np

from evalrx.analyzers.attention import AttentionResult
from evalrx.analyzers.logit_lens import LensResult
from evalrx.analyzers.tool_decision import ToolDecisionResult
from evalrx.analyzers.uncertainty import TokenUncertaintyResult
from evalrx.internals.passes import KINDS

TICK_CHARS = 8  # a decision token's text on the axis; the full label is in the tooltip


def _piece(vocab: dict, token_id: Any) -> str:
    return str(vocab.get(str(int(token_id)), f"#{int(token_id)}"))


def _visible(piece: str) -> str:
    """A token as a short readable label (whitespace made visible)."""
    return piece.replace("\n", "↵").replace("\t", "⇥").replace(" ", "·") or "∅"


def _tick(text: str, n: int = TICK_CHARS) -> str:
    """`text` cut to `n` characters, an ellipsis marking the cut."""
    return text if len(text) <= n else text[: n - 1] + "…"


# ---------------------------------------------------------------- lens


def lens_rows(lens: LensResult, step: int) -> list[dict]:
    """Heatmap cells of one turn: per layer and decision token, p(chosen) and the top alternative."""
    if not lens.labels:  # a single-prompt result: no turns
        return []
    turn = lens.for_step(step)
    vocab = turn.vocab
    rows = []
    for order, (kind, target) in enumerate(zip(turn.kinds, turn.target_ids)):
        target_id = int(target)
        chosen = _visible(_piece(vocab, target_id))
        for layer in range(turn.num_layers + 1):
            ids, lps = turn.topk_ids[layer, order], turn.topk_logprobs[layer, order]
            alt_id, alt_lp = _top_alternative(ids, lps, target_id)
            top = [f"{_visible(_piece(vocab, i))} {np.exp(lp):.2f}" for i, lp in zip(ids[:5], lps[:5])]
            rows.append(
                {
                    "layer": layer,
                    "order": order,
                    "kind": kind,
                    "chosen": chosen,
                    "token": f"{order:02d} {_tick(chosen)}",
                    "label": f"{order:02d} {chosen} ({kind})",
                    "p_chosen": float(np.exp(turn.target_logprob[layer, order])),
                    "rank": int(turn.target_rank[layer, order]),
                    "alternative": _visible(_piece(vocab, alt_id)) if alt_id is not None else "(none in top-k)",
                    "p_alternative": float(np.exp(alt_lp)) if alt_id is not None else None,
                    "top": " | ".join(top),
                }
            )
    return rows


def _top_alternative(ids: np.ndarray, logprobs: np.ndarray, chosen_id: int) -> tuple[Optional[int], float]:
    """The most probable top-k token that is not the chosen one, with its log-prob."""
    for i, lp in zip(ids, logprobs):
        if int(i) != chosen_id:
            return int(i), float(lp)
    return None, float("nan")


# ---------------------------------------------------------------- tool decision


def diagnosed_token(diagnoses: Any) -> Optional[dict]:
    """The token where the call went wrong, as the first diagnosis naming one has it (its evidence's
    `token_index` in pass `pass`, with `call`, `arg` and the `alternative_id` it saw), or None."""
    for d in diagnoses or []:
        ev = getattr(d, "evidence", None) or {}
        if isinstance(ev.get("token_index"), int) and d.first_wrong_step is not None:
            return {
                "step": int(d.first_wrong_step),
                "token_index": ev["token_index"],
                "pass": int(ev.get("pass") or 0),
                "call": ev.get("call"),
                "arg": str(ev.get("arg") or ""),
                "alternative_id": ev.get("alternative_id"),
            }
    return None


def decision_rows(
    decision: ToolDecisionResult, step: int, *, lens: Optional[LensResult] = None, focus: Optional[dict] = None
) -> list[dict]:
    """One row per (decision, layer, candidate) of a turn, with the layer's strongest alternative.

    Where the diagnosis names the token the call went wrong at (`focus`, from `diagnosed_token`) and
    no decision sits there, that call's decision (tool name or the argument) is read off the logit
    lens at that token instead of at its first token.
    """
    rows: list[dict] = []
    replaced, at_token = _at_diagnosed_token(decision, step, lens, focus)
    for d_i in decision.for_step(step):
        d = decision.decisions[d_i]
        if d_i in replaced:
            if d_i == min(replaced):
                rows.extend(dict(r, decision=d_i) for r in at_token)
            continue
        lp = decision.cand_logprob[d_i]  # [layers, candidates]
        cands = list(d["candidates"])[: lp.shape[1]]
        measured = _measured_token(d)
        chosen_name = _visible(measured) if measured is not None else str(d.get("chosen", ""))
        for layer in range(lp.shape[0]):
            alt_name, p_alt = _strongest_alternative(decision, d_i, layer)
            margin = float(decision.margin[d_i, layer])
            for c_i, cand in enumerate(cands):
                v = float(lp[layer, c_i])
                if np.isnan(v):
                    continue
                is_chosen = c_i == 0  # candidates list the chosen one first
                name = chosen_name if is_chosen else cand
                row = _candidate_row(
                    _decision_title(d), layer, name, is_chosen, chosen_name, v, (alt_name, p_alt), margin
                )
                rows.append({"decision": d_i, **row, "token_index": d.get("token_index")})
    if at_token and not replaced:
        rows.extend(dict(r, decision=len(decision.decisions)) for r in at_token)
    return rows


def _at_diagnosed_token(
    decision: ToolDecisionResult, step: int, lens: Optional[LensResult], focus: Optional[dict]
) -> "tuple[set, list[dict]]":
    """The decisions of `step` the diagnosed token stands for, and its rows from the lens (or `(set(), [])`)."""
    if lens is None or not focus or focus["step"] != step or not lens.labels:
        return set(), []
    mine = decision.for_step(step)
    if any(decision.decisions[i].get("token_index") == focus["token_index"] for i in mine):
        return set(), []  # a decision sits at that token already: its own alternatives are the ones
    lab = lens.labels
    hit = np.nonzero(
        (lab["label_step"] == step)
        & (lab["label_token_index"] == focus["token_index"])
        & (lab["label_pass"] == focus["pass"])
    )[0]
    if not len(hit):
        return set(), []
    p = int(hit[0])
    kind = lens.kinds[p]
    if kind not in ("tool_name", "arg_value"):
        return set(), []
    call, arg = int(lab["label_call"][p]), str(lab["label_arg"][p])
    replaced = {
        i
        for i in mine
        if decision.decisions[i].get("kind") == kind
        and int(decision.decisions[i].get("call", 0)) == call
        and (kind == "tool_name" or str(decision.decisions[i].get("arg", "")) == arg)
    }
    what = "tool name" if kind == "tool_name" else f"argument {arg}"
    title = f"{what} (call {call}) at token {focus['token_index']}, where the diagnosis says it went wrong"
    return replaced, _token_rows(lens, p, title, focus.get("alternative_id"), focus["token_index"])


def _candidate_row(
    what: str, layer: int, name: str, chosen: bool, chosen_name: str, logprob: float, other: tuple, margin: Any
) -> dict:
    """A chart row: one candidate's probability at `layer`, beside the layer's strongest `other` (name, p)."""
    return {
        "what": what,
        "layer": layer,
        "candidate": name,
        "series": f"chosen: {name}" if chosen else name,  # "chosen: " leads so that the legend's label cut keeps it
        "chosen": chosen,
        "chosen_name": chosen_name,
        "p": float(np.exp(logprob)),
        "alternative": other[0],
        "p_alternative": other[1],
        "margin": margin if margin is not None and np.isfinite(margin) else None,
    }


def _token_rows(lens: LensResult, p: int, title: str, alt_id: Any, token_index: int) -> list[dict]:
    """Decision-shaped rows of one lens position: the chosen token against the named alternative, per layer."""
    vocab, chosen_id = lens.vocab, int(lens.target_ids[p])
    ids, lps = lens.topk_ids[:, p], lens.topk_logprobs[:, p]  # [layers, k]
    if alt_id is None or int(alt_id) == chosen_id or not (ids == int(alt_id)).any():
        alt_id, _ = _top_alternative(ids[-1], lps[-1], chosen_id)  # the output's strongest other token
    chosen = _visible(_piece(vocab, chosen_id))
    rows = []
    for layer in range(ids.shape[0]):
        other_id, other_lp = _top_alternative(ids[layer], lps[layer], chosen_id)
        chosen_lp = float(lens.target_logprob[layer, p])
        margin = chosen_lp - other_lp if other_id is not None else None
        cands = [(chosen_id, chosen_lp)]
        if alt_id is not None:
            at = np.nonzero(ids[layer] == int(alt_id))[0]
            if len(at):
                cands.append((int(alt_id), float(lps[layer, at[0]])))
        for tok, lp in cands:
            is_chosen = tok == chosen_id
            name = chosen if is_chosen else _visible(_piece(vocab, tok))
            other = (_visible(_piece(vocab, other_id)), float(np.exp(other_lp))) if other_id is not None else ("", None)
            row = _candidate_row(title, layer, name, is_chosen, chosen, lp, other, margin)
            rows.append({**row, "token_index": token_index})
    return rows


def _strongest_alternative(decision: ToolDecisionResult, d_i: int, layer: int) -> tuple[str, Optional[float]]:
    """The most probable candidate other than the chosen one at one layer, named (`ToolDecisionResult.alternative`)."""
    name, lp = decision.alternative(d_i, layer)
    if lp is None:
        return "", None
    if name not in decision.decisions[d_i]["candidates"][1:]:  # an argument's runner-up: the token itself
        name = _visible(name)
    return name, float(np.exp(lp))


def _measured_token(d: dict) -> Optional[str]:
    """The token a value was measured at when its candidates are tokens (an argument without an enum), else
    None: names and enum values are compared whole, and results stored before tokens were named lack it."""
    token, cands = d.get("token"), list(d.get("candidates") or [])
    if isinstance(token, str) and cands and cands[0] == token:
        return token
    return None


def _decision_title(d: dict) -> str:
    """What was decided, and at which token of the name or value it was measured (when the result says)."""
    what = "tool name" if d.get("kind") == "tool_name" else f"argument {d.get('arg', '')}"
    title = f"{what} (call {d.get('call', 0)})"
    token, piece = d.get("token"), d.get("piece")
    if isinstance(token, str) and isinstance(piece, int) and piece >= 0:
        title += f" at token {piece + 1} “{_visible(token)}”"
        if token != d.get("chosen"):  # a value of one token needs no "of"
            title += f" of “{_short(d.get('chosen', ''), 60)}”"
    return title


def _short(text: Any, n: int) -> str:
    """One line of at most `n` characters."""
    return _tick(" ".join(str(text if text is not None else "").split()), n)


# ---------------------------------------------------------------- attention


def attention_rows(attention: AttentionResult, step: int) -> list[dict]:
    """Mean attention mass of a turn's decision positions, per (layer, segment)."""
    steps = attention.labels.get("label_step")
    if steps is None:  # a single-prompt result: no turns
        return []
    sel = np.nonzero(steps == step)[0]
    if not len(sel):
        return []
    mass = attention.mass[sel].mean(axis=0)  # [layers, segments]
    segs = attention.segments
    # A decision attends to what comes before it only: no column for a later step's observation or turn, nor
    # for a message of no step that follows its turn (the forced-final nudge). Segments are in prompt order.
    own = [i for i, seg in enumerate(segs) if seg.get("step") is not None and int(seg["step"]) <= step]
    last = own[-1] if own else None
    shown = [
        s for s in range(mass.shape[1]) if s >= len(segs) or (_not_after(segs[s], step) if last is None else s <= last)
    ]
    names = segment_names([segs[s].get("label") if s < len(segs) else str(s) for s in shown])
    return [
        {"layer": layer + 1, "segment": names[i], "order": s, "mass": float(mass[layer, s])}
        for layer in range(mass.shape[0])
        for i, s in enumerate(shown)
    ]


def _not_after(segment: dict, step: int) -> bool:
    """A segment of no step (system, prompt, images) or of this step or an earlier one."""
    at = segment.get("step")
    return at is None or int(at) <= step


def segment_names(labels: list) -> list[str]:
    """Column names for the segments, numbered where a label repeats (a nominal axis would merge them)."""
    labels = [str(label) for label in labels]
    total: Counter[str] = Counter(labels)
    count: Counter[str] = Counter()
    out = []
    for label in labels:
        count[label] += 1
        out.append(f"{label} #{count[label]}" if total[label] > 1 else label)
    return out


def picture_choices(attention: AttentionResult, step: int, lens: Optional[LensResult] = None) -> list[tuple]:
    """`(row, label)` for each analysed position of a turn that some picture before it could be read from,
    values first (where a read number is written), labelled by kind, argument and (with the lens) the token."""
    steps = attention.labels.get("label_step")
    if steps is None or not attention.images:
        return []
    if not any(img.get("step") is not None and int(img["step"]) < step for img in attention.images):
        return []
    written: dict = {}
    if lens is not None and lens.labels.get("label_step") is not None:
        for q in np.nonzero(lens.labels["label_step"] == step)[0]:
            written[int(lens.labels["label_token_index"][q])] = lens.token_text(int(lens.target_ids[q]))
    kinds = attention.labels.get("label_kind")
    args = attention.labels.get("label_arg") or []
    tokens = attention.labels.get("label_token_index")
    out = []
    for p in np.nonzero(steps == step)[0]:
        kind = KINDS[int(kinds[p])] if kinds is not None else "token"
        arg = str(args[p]) if p < len(args) and args[p] else ""
        token = written.get(int(tokens[p])) if tokens is not None else None
        label = " ".join(x for x in (kind.replace("_", " "), arg, repr(token) if token is not None else "") if x)
        out.append((int(p), label, kind in ("arg_value", "answer")))
    out.sort(key=lambda r: (not r[2], r[0]))
    return [(p, label) for p, label, _ in out]


def pictures_before(attention: AttentionResult, step: int) -> list[dict]:
    """The pictures shown before `step`, in order: `image` (its index in the result), `step` that showed it,
    `nth` (its place among that step's pictures) and `region` (where it sits in the picture, as fractions)."""
    seen: Counter = Counter()
    shown = []
    for k, img in enumerate(attention.images):
        at = img.get("step")
        nth = seen[at]
        seen[at] += 1
        if at is None or int(at) >= step:
            continue
        shown.append({"image": k, "step": int(at), "nth": nth, "region": img.get("region") or (0.0, 0.0, 1.0, 1.0)})
    return shown


# ---------------------------------------------------------------- uncertainty


def uncertainty_rows(uncertainty: TokenUncertaintyResult, step: int) -> list[dict]:
    """The turn's generated tokens in order: `text`, `p` of the token emitted, `entropy` and `rank`."""
    tokens = uncertainty.tokens
    return [
        {
            "text": tokens[i] if i < len(tokens) else "",
            "p": float(np.exp(uncertainty.logprob[i])),
            "entropy": float(uncertainty.entropy[i]),
            "rank": int(uncertainty.rank[i]),
        }
        for i in np.nonzero(uncertainty.step == step)[0]
    ]

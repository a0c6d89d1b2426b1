"""White-box analysis panels of the Trajectory page, decoded from the store without torch.

Per model turn: a logit-lens heatmap (layers by decision tokens, coloured by the
probability of the finally chosen token, its top alternative and the top-k on hover), the
tool-decision panel (each candidate's probability by layer, the chosen one against its
strongest alternative), attention mass by conversation segment, and the generated tokens
shaded by uncertainty, each with a line on how to read it. Plus a
"Request analysis" button whose request a worker runs (status shown live).

Each stored record is rebuilt into its result object (`decode`: `evalrx.analyzers.result_from_arrays`,
the one decoder of stored results) and the panels read its attributes; `evalrx.analyzers`
imports no torch, so the app process stays free of it. Model text is untrusted: charts get
it as data (Vega escapes it), captions get it `md_escape`d, and the only HTML built here
comes from `html.escape`d token strings.
"""

from __future__ import annotations

import html
from collections import Counter
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import streamlit as st

from components.safe import md_escape, short
from evalrx.analyzers import (
    KINDS,
    AnalysisResult,
    AttentionResult,
    LensResult,
    TokenUncertaintyResult,
    ToolDecisionResult,
    result_from_arrays,
)
from evalrx.store import default_replay_model, load_analyses, request_analysis, requests_for

if TYPE_CHECKING:
    import altair as alt

ACTIVE = ("queued", "running")


def _latest(records: list) -> dict:
    """The newest stored result per analyzer (requests replace older ones; runs store one)."""
    out: dict = {}
    for rec in records:
        out[rec["analyzer"]] = rec
    return out


def decode(rec: dict) -> AnalysisResult:
    """The result object of one stored record (as `load_analyses` returns it).

    Raises:
        ValueError: the record names no known result type.
        KeyError: an array the result type needs is missing.
    """
    return result_from_arrays(rec["arrays"], rec["meta"])


def _piece(vocab: dict, token_id: Any) -> str:
    return str(vocab.get(str(int(token_id)), f"#{int(token_id)}"))


def _visible(piece: str) -> str:
    """A token as a short readable label (whitespace made visible)."""
    return piece.replace("\n", "↵").replace("\t", "⇥").replace(" ", "·") or "∅"


# ---------------------------------------------------------------- chart sizing

# Heatmap rows (one per layer): a readable band each, whatever the model's depth.
ROW_PX, MIN_PLOT_PX, MAX_PLOT_PX = 18, 150, 900
# Streamlit's default autosize "fit" squeezes axis labels into the given height, which left
# the plot one pixel tall; fit-x keeps the container width and adds labels below the plot.
FIT_WIDTH = {"type": "fit-x", "contains": "padding"}
TICK_CHARS = 8  # a decision token's text on the axis; the full label is in the tooltip
LENS_ALL_LABELS = 24  # decision tokens whose labels are all drawn; a longer turn drops those that overlap


def heatmap_height(n_layers: int) -> int:
    """Plot height in pixels for a heatmap with one row per layer."""
    return max(MIN_PLOT_PX, min(MAX_PLOT_PX, ROW_PX * n_layers))


def _tick(text: str, n: int = TICK_CHARS) -> str:
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


def lens_chart(rows: list[dict]) -> "alt.Chart":
    import altair as alt  # only where an analysis is drawn: the import costs ~28 MB

    order = [t for _, t in sorted({(r["order"], r["token"]) for r in rows})]
    n_layers = 1 + max(r["layer"] for r in rows)
    # A long turn's labels cannot all fit side by side: upright, and those that would overlap left out (the
    # tooltip names every column); a short turn's are all drawn, slanted.
    long_turn = len(order) > LENS_ALL_LABELS
    return (
        alt.Chart(alt.Data(values=rows))
        .mark_rect()
        .encode(
            x=alt.X(
                "token:N",
                sort=order,
                title="decision token (chosen)",
                axis=alt.Axis(
                    labelAngle=-90 if long_turn else -45, labelLimit=90, labelOverlap="greedy" if long_turn else False
                ),
            ),
            y=alt.Y("layer:O", sort="descending", title="layer (0 = embeddings)"),
            color=alt.Color("p_chosen:Q", scale=alt.Scale(domain=[0, 1], scheme="viridis"), title="p(chosen)"),
            tooltip=[
                alt.Tooltip("label:N", title="token"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("chosen:N"),
                alt.Tooltip("p_chosen:Q", format=".3f", title="p(chosen)"),
                alt.Tooltip("rank:Q"),
                alt.Tooltip("alternative:N", title="top alternative"),
                alt.Tooltip("p_alternative:Q", format=".3f", title="p(alternative)"),
                alt.Tooltip("top:N", title="top-5"),
            ],
        )
        .properties(height=heatmap_height(n_layers), autosize=FIT_WIDTH)
    )


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
    rows = []
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
                # "chosen: " leads so that the legend's label cut keeps it.
                rows.append(
                    {
                        "decision": d_i,
                        "what": _decision_title(d),
                        "layer": layer,
                        "candidate": name,
                        "series": f"chosen: {name}" if is_chosen else name,
                        "chosen": is_chosen,
                        "chosen_name": chosen_name,
                        "p": float(np.exp(v)),
                        "alternative": alt_name,
                        "p_alternative": p_alt,
                        "margin": margin if np.isfinite(margin) else None,
                        "token_index": d.get("token_index"),
                    }
                )
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
            rows.append(
                {
                    "what": title,
                    "layer": layer,
                    "candidate": name,
                    "series": f"chosen: {name}" if is_chosen else name,
                    "chosen": is_chosen,
                    "chosen_name": chosen,
                    "p": float(np.exp(lp)),
                    "alternative": _visible(_piece(vocab, other_id)) if other_id is not None else "",
                    "p_alternative": float(np.exp(other_lp)) if other_id is not None else None,
                    "margin": margin if margin is not None and np.isfinite(margin) else None,
                    "token_index": token_index,
                }
            )
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
            title += f" of “{short(d.get('chosen', ''), 60)}”"
    return title


def decision_summary(rows: list[dict]) -> str:
    """One Markdown line for one decision's rows: the chosen value against its strongest alternative at the output."""
    last = max(r["layer"] for r in rows)
    row = next(r for r in rows if r["layer"] == last)
    chosen_p = next((r["p"] for r in rows if r["layer"] == last and r["chosen"]), None)
    head = f"{md_escape(row['what'])}: chosen “{md_escape(row['chosen_name'])}”"
    if not row["alternative"]:
        return head + ", no alternative scored"
    odds = f" (p {chosen_p:.2f} vs {row['p_alternative']:.2f})" if chosen_p is not None else ""
    margin = f"margin {row['margin']:.2f} nats" if row["margin"] is not None else "no margin"
    return f"{head} vs alternative “{md_escape(row['alternative'])}”, {margin} at the output{odds}"


def decision_chart(rows: list[dict]) -> "alt.Chart":
    import altair as alt  # only where an analysis is drawn: the import costs ~28 MB

    return (
        alt.Chart(alt.Data(values=rows))
        .mark_line(point=True)
        .encode(
            x=alt.X("layer:O", title="layer"),
            y=alt.Y("p:Q", scale=alt.Scale(domain=[0, 1]), title="probability"),
            color=alt.Color("series:N", title="candidate", legend=alt.Legend(labelLimit=240)),
            strokeDash=alt.StrokeDash(
                "chosen:N", title="chosen", legend=None, scale=alt.Scale(domain=[True, False], range=[[1, 0], [4, 3]])
            ),
            tooltip=[
                alt.Tooltip("candidate:N"),
                alt.Tooltip("layer:O"),
                alt.Tooltip("p:Q", format=".3f"),
                alt.Tooltip("chosen_name:N", title="chosen"),
                alt.Tooltip("alternative:N", title="strongest alternative here"),
                alt.Tooltip("p_alternative:Q", format=".3f", title="p(alternative)"),
                alt.Tooltip("margin:Q", format=".3f", title="margin of chosen (nats)"),
            ],
        )
        .properties(height=180)
    )


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
    total, count = Counter(labels), Counter()
    out = []
    for label in labels:
        count[label] += 1
        out.append(f"{label} #{count[label]}" if total[label] > 1 else label)
    return out


def attention_chart(rows: list[dict]) -> "alt.Chart":
    import altair as alt  # only where an analysis is drawn: the import costs ~28 MB

    order = [s for _, s in sorted({(r["order"], r["segment"]) for r in rows})]
    n_layers = max(r["layer"] for r in rows)
    # Every segment is a column the reader looks for: no label may be dropped for lack of room.
    axis = alt.Axis(labelAngle=-40, labelOverlap=False, labelLimit=160)
    return (
        alt.Chart(alt.Data(values=rows))
        .mark_rect()
        .encode(
            x=alt.X("segment:N", sort=order, title="segment", axis=axis),
            y=alt.Y("layer:O", sort="descending", title="layer"),
            color=alt.Color("mass:Q", scale=alt.Scale(domain=[0, 1], scheme="blues"), title="attention mass"),
            tooltip=[alt.Tooltip("layer:O"), alt.Tooltip("segment:N"), alt.Tooltip("mass:Q", format=".3f")],
        )
        .properties(height=heatmap_height(n_layers), autosize=FIT_WIDTH)
    )


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


def _pictures(detail: Any, store: Any) -> Any:
    """`(step, n) -> bytes or None`: the n-th picture step `step` showed (`evalrx.store.shown_pictures`), read
    once, on the first call."""
    from evalrx.store import shown_pictures

    shown: dict = {}

    def picture(step: int, n: int) -> Optional[bytes]:
        if not shown:
            shown.update(shown_pictures(detail.row.id, store=store) or {-1: []})
        pictures = shown.get(step) or []
        return pictures[n] if n < len(pictures) else None

    return picture


def render_pictures(results: dict, idx: int, pictures: Any, focus: Optional[dict] = None) -> bool:
    """The pictures shown before a turn, tinted by the attention a chosen token of the turn gave each patch."""
    from components.patch_heatmap import heatmap_png

    attention = results.get("attention")
    if attention is None or pictures is None:
        return False
    choices = picture_choices(attention, idx, results.get("logit_lens"))
    if not choices:
        return False
    st.markdown("**Where it looked in the pictures**: the attention a token gave each patch")
    tokens = attention.labels.get("label_token_index")
    # The diagnosed token, else the first that writes a digit (a value read from a picture), else the first.
    default = next((i for i, (_, label) in enumerate(choices) if any(ch.isdigit() for ch in label)), 0)
    if focus and focus.get("step") == idx and tokens is not None:
        default = next((i for i, (p, _) in enumerate(choices) if int(tokens[p]) == focus["token_index"]), default)
    left, right = st.columns(2)
    pick = left.selectbox(
        "Token", range(len(choices)), index=default, format_func=lambda i: choices[i][1], key=f"patch-token-{idx}"
    )
    n_layers = attention.patches.shape[1]
    layers = ["mean over layers"] + [f"layer {i + 1}" for i in range(n_layers)]
    layer_name = right.selectbox("Layer", layers, key=f"patch-layer-{idx}")
    layer = None if layer_name == layers[0] else layers.index(layer_name) - 1
    row = choices[pick][0]
    seen: Counter = Counter()
    shown = []
    for k, img in enumerate(attention.images):
        step = img.get("step")
        nth = seen[step]
        seen[step] += 1
        if step is None or int(step) >= idx:
            continue
        shown.append((k, int(step), nth, img))
    cols = st.columns(max(1, len(shown)))
    for col, (k, step, nth, img) in zip(cols, shown):
        data = pictures(step, nth)
        weights = attention.patch_map(row, k, layer)
        caption = f"picture of step {step}: {float(weights.sum()):.0%} of the token's attention"
        if data is None:
            col.caption(f"{caption} (the picture is not stored)")
            continue
        try:
            drawn = heatmap_png(data, weights, img.get("region") or (0.0, 0.0, 1.0, 1.0))
        except (OSError, ValueError):  # stored bytes Pillow cannot read: say so, never a traceback
            col.caption(f"{caption} (the stored picture cannot be read)")
            continue
        col.image(drawn, caption=caption)
    st.caption(HOW_TO_READ["pictures"])
    return True


# ---------------------------------------------------------------- uncertainty


def uncertainty_html(uncertainty: TokenUncertaintyResult, step: int) -> Optional[str]:
    """The turn's generated tokens as escaped spans shaded by 1 - p (darker: less sure)."""
    tokens = uncertainty.tokens
    sel = np.nonzero(uncertainty.step == step)[0]
    if not len(sel):
        return None
    spans = []
    for i in sel:
        p = float(np.exp(uncertainty.logprob[i]))
        text = tokens[i] if i < len(tokens) else ""
        title = f"p={p:.3f} entropy={float(uncertainty.entropy[i]):.2f} rank={int(uncertainty.rank[i])}"
        shown = html.escape(text.replace("\n", "↵\n"))
        spans.append(
            f'<span title="{html.escape(title)}" style="background: rgba(220,60,60,{min(1.0, 1 - p):.2f});'
            f' white-space: pre-wrap; font-family: monospace">{shown}</span>'
        )
    return '<div class="evalrx-uncertainty">' + "".join(spans) + "</div>"


# ---------------------------------------------------------------- page parts


def request_status(trajectory_id: int, *, store: Any, analysed: bool = False) -> None:
    """The "Request analysis" button and the latest request's status (refreshed while it runs).

    `analysed`: results are stored already (the run analysed it): no "nothing requested" line then.
    """

    @st.fragment(run_every=1.5 if _active(trajectory_id, store) else None)
    def box() -> None:
        reqs = requests_for(trajectory_id, store=store)
        cols = st.columns([1, 2], vertical_alignment="center")
        busy = bool(reqs) and reqs[0]["status"] in ACTIVE
        if cols[0].button("Request analysis", key="request-analysis", icon=":material/biotech:", disabled=busy):
            request_analysis(trajectory_id, store=store)
            st.rerun()
        if reqs:
            r = reqs[0]
            cols[1].markdown(f"Analysis request {r['id']}: **{r['status']}**", help="queued → running → done / failed")
            if r["status"] == "failed" and r.get("error"):
                cols[1].caption(str(r["error"])[:300])
            if r["status"] == "done" and st.session_state.get("analysis-seen") != r["id"]:
                st.session_state["analysis-seen"] = r["id"]
                st.rerun(scope="app")  # show the fresh results
        elif analysed:
            cols[1].caption("Analysed with the run; a request analyses it again.")
        else:
            cols[1].caption(
                "No analysis requested yet. A worker runs it on a local model "
                f"(API runs are replayed on {default_replay_model()})."
            )

    box()


def _active(trajectory_id: int, store: Any) -> bool:
    reqs = requests_for(trajectory_id, store=store)
    return bool(reqs) and reqs[0]["status"] in ACTIVE


def render_analysis(detail: Any, *, store: Any, open_step: Optional[int] = None) -> None:
    """The whole analysis section of one trajectory; the page calls it after the steps, so they show first.

    A model turn's panels are computed only while its expander is open: by default the turn of `open_step`
    (the first wrong step), else the first. The section is a fragment: opening a turn reruns only it.
    """
    _analysis_section(detail, store, open_step)


def open_turn(turns: list, open_step: Optional[int]) -> Optional[int]:
    """The model turn whose panels show without a click: the last one at or before `open_step`, else the first."""
    before = [t for t in turns if open_step is not None and t <= open_step]
    return before[-1] if before else (turns[0] if turns else None)


@st.fragment
def _analysis_section(detail: Any, store: Any, open_step: Optional[int]) -> None:
    from evalrx.core import StepRole

    tid = detail.row.id
    st.markdown("#### Analysis")
    records = _latest(load_analyses(tid, store=store))
    request_status(tid, store=store, analysed=bool(records))
    for name, rec in records.items():
        if rec["meta"].get("error"):
            st.caption(f"{name} failed: {str(rec['meta']['error'])[:200]}")
    results, unreadable = panel_results(records)
    for name, why in unreadable.items():
        st.caption(f"{name}: the stored result cannot be read ({why[:200]})")
    if not results:
        st.caption("No white-box analysis stored for this trajectory yet.")
        return
    # Where it was scored is the worker's note on the record, not part of the result.
    scored = next((records[k]["meta"].get("scored_on") for k in results if records[k]["meta"].get("scored_on")), None)
    if scored:
        st.caption(f"Scored on {scored} (teacher-forced).")
    cheaper = cheaper_settings(results)
    if cheaper:
        st.warning("Cheaper setting, not exact: " + "; ".join(cheaper), icon=":material/speed:")
    turns = [s.idx for s in detail.trajectory.steps if s.role is StepRole.ACTOR]
    focus = diagnosed_token(getattr(detail, "diagnoses", None))
    attention = results.get("attention")
    pictures = _pictures(detail, store) if attention is not None and attention.images else None
    first = open_turn(turns, open_step)
    for idx in turns:
        turn = st.expander(
            f"Model turn at step {idx}", expanded=idx == first, key=f"turn-{tid}-{idx}", on_change="rerun"
        )
        with turn:
            if turn.open:  # a closed turn costs nothing: its charts are built when it is opened
                _turn(results, idx, focus, pictures)


def cheaper_settings(results: dict) -> list:
    """One line per analyzer whose result was computed with a named cheaper setting (`info["precision"]`)."""
    lines = []
    for name, result in results.items():
        precision = (getattr(result, "info", None) or {}).get("precision")
        if precision and precision != "exact":
            lines.append(
                f"{name} unembedded its layers in {md_escape(str(precision))} (approximate log-probs and ranks; "
                "the last layer is the model's own)"
            )
    return lines


# The panels: the analyzer name a result is stored under, and the result class the panel reads.
PANELS = {
    "logit_lens": LensResult,
    "tool_decision": ToolDecisionResult,
    "attention": AttentionResult,
    "token_uncertainty": TokenUncertaintyResult,
}


def panel_results(records: dict) -> "tuple[dict, dict]":
    """The results the panels show, decoded from the latest record per analyzer.

    Returns:
        `({name: result}, {name: why it cannot be read})` in panel order; failed analyses
        (meta `error`) are in neither.
    """
    results: dict = {}
    unreadable: dict = {}
    for name, kind in PANELS.items():
        rec = records.get(name)
        if rec is None or rec["meta"].get("error"):
            continue
        try:
            result = decode(rec)
        except (KeyError, TypeError, ValueError) as exc:  # stored by an older or foreign version
            unreadable[name] = f"{type(exc).__name__}: {exc}"
            continue
        if isinstance(result, kind):
            results[name] = result
        else:
            unreadable[name] = f"a {type(result).__name__}, not a {kind.__name__}"
    return results, unreadable


# One line under each panel: what a mark is and how to read it.
HOW_TO_READ = {
    "logit_lens": "Each cell: the probability the layer's logit lens gives the token the model finally chose "
    "(hover for the top alternative); bright at the top only = the decision forms late.",
    "tool_decision": "Each line: a candidate's probability at each layer's logit lens (solid: the chosen one); "
    "the margin is the chosen one's log-prob minus the strongest alternative's, small = a near miss.",
    "attention": "Each cell: the share of a layer's attention (mean over heads and this turn's decision tokens) "
    "that lands on a segment; a row sums to 1, a bright column is what the model was reading.",
    "pictures": "Each patch is tinted by its share of the chosen token's attention (the most-attended patch "
    "darkest); the caption gives the whole picture's share. A value read from a picture the token barely "
    "attended is a misreading sign.",
    "token_uncertainty": "Each generated token is shaded by 1 − p of the token emitted (hover: p, entropy, rank); "
    "dark runs mark where the model was guessing.",
}


def _turn(results: dict, idx: int, focus: Optional[dict] = None, pictures: Any = None) -> None:
    shown = render_pictures(results, idx, pictures, focus)
    if "logit_lens" in results:
        rows = lens_rows(results["logit_lens"], idx)
        if rows:
            st.markdown("**Logit lens**: probability of the chosen token at each layer")
            st.altair_chart(lens_chart(rows), width="stretch")
            st.caption(HOW_TO_READ["logit_lens"])
            shown = True
    if "tool_decision" in results:
        rows = decision_rows(results["tool_decision"], idx, lens=results.get("logit_lens"), focus=focus)
        if rows:
            st.markdown("**Tool decision**: alternatives by layer")
            for d in sorted({r["decision"] for r in rows}):
                mine = [r for r in rows if r["decision"] == d]
                st.caption(decision_summary(mine))
                st.altair_chart(decision_chart(mine), width="stretch")
            st.caption(HOW_TO_READ["tool_decision"])
            shown = True
    if "attention" in results:
        rows = attention_rows(results["attention"], idx)
        if rows:
            st.markdown("**Attention by segment** (mean over this turn's decision tokens)")
            st.altair_chart(attention_chart(rows), width="stretch")
            st.caption(HOW_TO_READ["attention"])
            shown = True
    if "token_uncertainty" in results:
        body = uncertainty_html(results["token_uncertainty"], idx)
        if body:
            st.markdown("**Generated tokens** shaded by uncertainty (darker: less likely)")
            st.html(body)
            st.caption(HOW_TO_READ["token_uncertainty"])
            shown = True
    if not shown:
        st.caption("No decision points analysed in this turn.")

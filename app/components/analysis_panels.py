"""White-box analysis panels of the Trajectory page, decoded from the store without torch.

Per model turn: a logit-lens heatmap (layers by decision tokens, coloured by the
probability of the finally chosen token, its top alternative and the top-k on hover), the
tool-decision panel (each candidate's probability by layer, the chosen one against its
strongest alternative), attention mass by conversation segment, and the generated tokens
shaded by uncertainty, each with a line on how to read it. Plus a
"Request analysis" button whose request a worker runs (status shown live).

Each stored record is rebuilt into its result object (`decode`: `evalrx.analyzers.result_from_arrays`,
the one decoder of stored results) and `evalrx.analyzers`' panel rows (`lens_rows`, `decision_rows`, ...)
turn it into what each chart draws; this module only draws them. `evalrx.analyzers` imports no torch,
so the app process stays free of it. Model text is untrusted: charts get
it as data (Vega escapes it), captions get it `md_escape`d, and the only HTML built here
comes from `html.escape`d token strings.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, Callable, Optional

import streamlit as st

from components.safe import md_escape
from evalrx.analyzers import (
    AnalysisResult,
    AttentionResult,
    LensResult,
    TokenUncertaintyResult,
    ToolDecisionResult,
    attention_rows,
    decision_rows,
    diagnosed_token,
    lens_rows,
    picture_choices,
    pictures_before,
    result_from_arrays,
    uncertainty_rows,
)
from evalrx.store import (
    ACTIVE_STATUSES,
    JobStatus,
    default_replay_model,
    load_analyses,
    request_analysis,
    requests_for,
)

if TYPE_CHECKING:
    import altair as alt


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


# ---------------------------------------------------------------- chart sizing

# Heatmap rows (one per layer): a readable band each, whatever the model's depth.
ROW_PX, MIN_PLOT_PX, MAX_PLOT_PX = 18, 150, 900
# Streamlit's default autosize "fit" squeezes axis labels into the given height, which left
# the plot one pixel tall; fit-x keeps the container width and adds labels below the plot.
FIT_WIDTH = {"type": "fit-x", "contains": "padding"}
LENS_ALL_LABELS = 24  # decision tokens whose labels are all drawn; a longer turn drops those that overlap


def heatmap_height(n_layers: int) -> int:
    """Plot height in pixels for a heatmap with one row per layer."""
    return max(MIN_PLOT_PX, min(MAX_PLOT_PX, ROW_PX * n_layers))


# ---------------------------------------------------------------- lens


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


# ---------------------------------------------------------------- pictures


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
    shown = pictures_before(attention, idx)
    cols = st.columns(max(1, len(shown)))
    for col, img in zip(cols, shown):
        data = pictures(img["step"], img["nth"])
        weights = attention.patch_map(row, img["image"], layer)
        caption = f"picture of step {img['step']}: {float(weights.sum()):.0%} of the token's attention"
        if data is None:
            col.caption(f"{caption} (the picture is not stored)")
            continue
        try:
            drawn = heatmap_png(data, weights, img["region"])
        except (OSError, ValueError):  # stored bytes Pillow cannot read: say so, never a traceback
            col.caption(f"{caption} (the stored picture cannot be read)")
            continue
        col.image(drawn, caption=caption)
    st.caption(HOW_TO_READ["pictures"])
    return True


# ---------------------------------------------------------------- uncertainty


def uncertainty_html(uncertainty: TokenUncertaintyResult, step: int) -> Optional[str]:
    """The turn's generated tokens as escaped spans shaded by 1 - p (darker: less sure)."""
    rows = uncertainty_rows(uncertainty, step)
    if not rows:
        return None
    spans = []
    for r in rows:
        p = r["p"]
        title = f"p={p:.3f} entropy={r['entropy']:.2f} rank={r['rank']}"
        shown = html.escape(r["text"].replace("\n", "↵\n"))
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
        busy = bool(reqs) and reqs[0]["status"] in ACTIVE_STATUSES
        if cols[0].button("Request analysis", key="request-analysis", icon=":material/biotech:", disabled=busy):
            request_analysis(trajectory_id, store=store)
            st.rerun()
        if reqs:
            r = reqs[0]
            cols[1].markdown(f"Analysis request {r['id']}: **{r['status']}**", help="queued → running → done / failed")
            if r["status"] == JobStatus.FAILED and r.get("error"):
                cols[1].caption(str(r["error"])[:300])
            if r["status"] == JobStatus.DONE and st.session_state.get("analysis-seen") != r["id"]:
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
    return bool(reqs) and reqs[0]["status"] in ACTIVE_STATUSES


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
    answers = answer_points_line(results)
    if answers:
        st.caption(answers)
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


def answer_points_line(results: dict) -> Optional[str]:
    """Which answer tokens the logit lens read (`info["answer_points"]`; a result stored before the setting read
    them all), or None without a lens result."""
    lens = results.get("logit_lens")
    if lens is None:
        return None
    points = (getattr(lens, "info", None) or {}).get("answer_points") or "all"
    if points == "values":
        return (
            "Answers: the lens read each final answer's values (numbers, ids, quoted strings, words shared with the "
            "expected answer, an observation or a call's arguments) and its first token (answer_points=values)."
        )
    return f"Answers: the lens read every answer token (answer_points={md_escape(str(points))})."


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


def _chart_panel(key: str, heading: str, rows: list, chart_of: Callable[[list], Any]) -> bool:
    """A heading, the chart of `rows` and how to read it; False (nothing drawn) when there are no rows."""
    if not rows:
        return False
    st.markdown(heading)
    st.altair_chart(chart_of(rows), width="stretch")
    st.caption(HOW_TO_READ[key])
    return True


def _turn(results: dict, idx: int, focus: Optional[dict] = None, pictures: Any = None) -> None:
    shown = render_pictures(results, idx, pictures, focus)
    if "logit_lens" in results:
        rows = lens_rows(results["logit_lens"], idx)
        heading = "**Logit lens**: probability of the chosen token at each layer"
        shown |= _chart_panel("logit_lens", heading, rows, lens_chart)
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
        heading = "**Attention by segment** (mean over this turn's decision tokens)"
        shown |= _chart_panel("attention", heading, rows, attention_chart)
    if "token_uncertainty" in results:
        body = uncertainty_html(results["token_uncertainty"], idx)
        if body:
            st.markdown("**Generated tokens** shaded by uncertainty (darker: less likely)")
            st.html(body)
            st.caption(HOW_TO_READ["token_uncertainty"])
            shown = True
    if not shown:
        st.caption("No decision points analysed in this turn.")

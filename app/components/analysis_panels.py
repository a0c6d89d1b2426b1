"""White-box analysis panels of the Trajectory page, read from the store with numpy only.

Per model turn: a logit-lens heatmap (layers by decision tokens, coloured by the
probability of the finally chosen token, top-k tokens on hover), the tool-decision panel
(each available tool's probability by layer and the chosen one's margin), attention mass
by conversation segment, and the generated tokens shaded by uncertainty. Plus heuristic
tags and a "Request analysis" button whose request a worker runs (status shown live).

Never imports `evalrx.analyzers` (the app process stays free of torch): the stored arrays
are interpreted here. Model text is untrusted: charts get it as data (Vega escapes it),
and the only HTML built here comes from `html.escape`d token strings.
"""

from __future__ import annotations

import html
from typing import Any, Optional

import altair as alt
import numpy as np
import streamlit as st

from evalrx.store import analyses as A
from evalrx.store.runs import load_analyses

ACTIVE = ("queued", "running")


def _latest(records: list) -> dict:
    """The newest stored result per analyzer (requests replace older ones; runs store one)."""
    out: dict = {}
    for rec in records:
        out[rec["analyzer"]] = rec
    return out


def _piece(vocab: dict, token_id: Any) -> str:
    return str(vocab.get(str(int(token_id)), f"#{int(token_id)}"))


def _visible(piece: str) -> str:
    """A token as a short readable label (whitespace made visible)."""
    return piece.replace("\n", "↵").replace("\t", "⇥").replace(" ", "·") or "∅"


# ---------------------------------------------------------------- lens


def lens_rows(rec: dict, step: int) -> list[dict]:
    """Heatmap cells of one turn: layer, decision token, probability of the chosen token, top-k text."""
    a, meta = rec["arrays"], rec["meta"]
    if "label_step" not in a or "topk_ids" not in a:
        return []
    vocab, kinds = meta.get("vocab") or {}, meta.get("kinds") or []
    cols = np.nonzero(a["label_step"] == step)[0]
    rows = []
    n_layers = a["topk_ids"].shape[0]
    for order, p in enumerate(cols):
        kind = kinds[int(a["label_kind"][p])] if int(a["label_kind"][p]) < len(kinds) else "?"
        target = _piece(vocab, a["target_ids"][p])
        label = f"{order:02d} {_visible(target)} ({kind})"
        for layer in range(n_layers):
            top = [f"{_visible(_piece(vocab, i))} {np.exp(lp):.2f}"
                   for i, lp in zip(a["topk_ids"][layer, p][:5], a["topk_logprobs"][layer, p][:5])]
            rows.append({
                "layer": layer, "token": label, "order": order, "chosen": _visible(target), "kind": kind,
                "p_chosen": float(np.exp(a["target_logprob"][layer, p])),
                "rank": int(a["target_rank"][layer, p]), "top": " | ".join(top),
            })
    return rows


def lens_chart(rows: list[dict]) -> alt.Chart:
    order = sorted({r["token"] for r in rows}, key=lambda s: s[:2])
    return alt.Chart(alt.Data(values=rows)).mark_rect().encode(
        x=alt.X("token:N", sort=order, title="decision token (chosen)", axis=alt.Axis(labelAngle=-45)),
        y=alt.Y("layer:O", sort="descending", title="layer (0 = embeddings)"),
        color=alt.Color("p_chosen:Q", scale=alt.Scale(domain=[0, 1], scheme="viridis"), title="p(chosen)"),
        tooltip=[alt.Tooltip("layer:O"), alt.Tooltip("chosen:N"), alt.Tooltip("kind:N"),
                 alt.Tooltip("p_chosen:Q", format=".3f"), alt.Tooltip("rank:Q"), alt.Tooltip("top:N", title="top-5")],
    ).properties(height=max(120, 26 * (1 + max(r["layer"] for r in rows))))


# ---------------------------------------------------------------- tool decision


def decision_rows(rec: dict, step: int) -> list[dict]:
    """One row per (decision, layer, candidate) of a turn, with probabilities."""
    a, meta = rec["arrays"], rec["meta"]
    rows = []
    for d_i, d in enumerate(meta.get("decisions") or []):
        if d.get("step") != step:
            continue
        cands = d.get("candidates") or []
        lp = a["cand_logprob"][d_i]  # [layers, candidates]
        for layer in range(lp.shape[0]):
            for c_i, cand in enumerate(cands[:lp.shape[1]]):
                v = float(lp[layer, c_i])
                if np.isnan(v):
                    continue
                rows.append({"decision": d_i, "what": _decision_title(d), "layer": layer, "candidate": cand,
                             "chosen": cand == d.get("chosen"), "p": float(np.exp(v)),
                             "margin": float(a["margin"][d_i, layer])})
    return rows


def _decision_title(d: dict) -> str:
    if d.get("kind") == "tool_name":
        return f"tool name (call {d.get('call', 0)})"
    return f"argument {d.get('arg', '')} (call {d.get('call', 0)})"


def decision_chart(rows: list[dict]) -> alt.Chart:
    return alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("layer:O", title="layer"),
        y=alt.Y("p:Q", scale=alt.Scale(domain=[0, 1]), title="probability"),
        color=alt.Color("candidate:N", title="alternative"),
        strokeDash=alt.StrokeDash("chosen:N", title="chosen"),
        tooltip=[alt.Tooltip("candidate:N"), alt.Tooltip("layer:O"), alt.Tooltip("p:Q", format=".3f"),
                 alt.Tooltip("margin:Q", format=".3f", title="margin of chosen")],
    ).properties(height=180)


# ---------------------------------------------------------------- attention


def attention_rows(rec: dict, step: int) -> list[dict]:
    """Mean attention mass of a turn's decision positions, per (layer, segment)."""
    a, meta = rec["arrays"], rec["meta"]
    if "label_step" not in a or "mass" not in a:
        return []
    sel = np.nonzero(a["label_step"] == step)[0]
    if not len(sel):
        return []
    mass = a["mass"][sel].mean(axis=0)  # [layers, segments]
    segs = meta.get("segments") or []
    return [{"layer": layer + 1, "segment": (segs[s].get("label") if s < len(segs) else str(s)),
             "order": s, "mass": float(mass[layer, s])}
            for layer in range(mass.shape[0]) for s in range(mass.shape[1])]


def attention_chart(rows: list[dict]) -> alt.Chart:
    order = [s for _, s in sorted({(r["order"], r["segment"]) for r in rows})]
    return alt.Chart(alt.Data(values=rows)).mark_rect().encode(
        x=alt.X("segment:N", sort=order, title="segment", axis=alt.Axis(labelAngle=-30)),
        y=alt.Y("layer:O", sort="descending", title="layer"),
        color=alt.Color("mass:Q", scale=alt.Scale(domain=[0, 1], scheme="blues"), title="attention mass"),
        tooltip=[alt.Tooltip("layer:O"), alt.Tooltip("segment:N"), alt.Tooltip("mass:Q", format=".3f")],
    ).properties(height=max(100, 28 * (1 + max(r["layer"] for r in rows))))


# ---------------------------------------------------------------- uncertainty


def uncertainty_html(rec: dict, step: int) -> Optional[str]:
    """The turn's generated tokens as escaped spans shaded by 1 - p (darker: less sure)."""
    a, meta = rec["arrays"], rec["meta"]
    tokens = meta.get("tokens") or []
    sel = np.nonzero(a["step"] == step)[0] if "step" in a else []
    if not len(sel):
        return None
    spans = []
    for i in sel:
        p = float(np.exp(a["logprob"][i]))
        text = tokens[i] if i < len(tokens) else ""
        title = f"p={p:.3f} entropy={float(a['entropy'][i]):.2f} rank={int(a['rank'][i])}"
        shown = html.escape(text.replace("\n", "↵\n"))
        spans.append(f'<span title="{html.escape(title)}" style="background: rgba(220,60,60,{min(1.0, 1 - p):.2f});'
                     f' white-space: pre-wrap; font-family: monospace">{shown}</span>')
    return '<div class="evalrx-uncertainty">' + "".join(spans) + "</div>"


# ---------------------------------------------------------------- page parts


def heuristic_tags(records: dict) -> list[dict]:
    """The findings of the latest heuristics result (tag, failure mode, steps)."""
    rec = records.get("heuristics")
    return list((rec or {}).get("meta", {}).get("findings") or []) if rec else []


def request_status(trajectory_id: int, *, store: Any) -> None:
    """The "Request analysis" button and the latest request's status (refreshed while it runs)."""

    @st.fragment(run_every=1.5 if _active(trajectory_id, store) else None)
    def box() -> None:
        reqs = A.requests_for(trajectory_id, store=store)
        cols = st.columns([1, 2], vertical_alignment="center")
        busy = bool(reqs) and reqs[0]["status"] in ACTIVE
        if cols[0].button("Request analysis", key="request-analysis", icon=":material/biotech:", disabled=busy):
            A.request_analysis(trajectory_id, store=store)
            st.rerun()
        if reqs:
            r = reqs[0]
            cols[1].markdown(f"Analysis request {r['id']}: **{r['status']}**", help="queued → running → done / failed")
            if r["status"] == "failed" and r.get("error"):
                cols[1].caption(str(r["error"])[:300])
            if r["status"] == "done" and st.session_state.get("analysis-seen") != r["id"]:
                st.session_state["analysis-seen"] = r["id"]
                st.rerun(scope="app")  # show the fresh results
        else:
            cols[1].caption("No analysis requested yet. A worker runs it on a local model "
                            f"(API runs are replayed on {A.DEFAULT_REPLAY_MODEL}).")

    box()


def _active(trajectory_id: int, store: Any) -> bool:
    reqs = A.requests_for(trajectory_id, store=store)
    return bool(reqs) and reqs[0]["status"] in ACTIVE


def render_analysis(detail: Any, *, store: Any) -> None:
    """The whole analysis section of one trajectory."""
    from evalrx.core import StepRole

    tid = detail.row.id
    st.markdown("#### Analysis")
    request_status(tid, store=store)
    records = _latest(load_analyses(tid, store=store))
    findings = heuristic_tags(records)
    if findings:
        st.markdown("Heuristic tags: " + " ".join(
            f":orange-badge[{html.escape(str(f.get('tag')))}]" for f in findings))
    elif "heuristics" in records:
        st.caption("Heuristics found no failure sign.")
    usable = {k: v for k, v in records.items() if not v["meta"].get("error")}
    for name, rec in records.items():
        if rec["meta"].get("error"):
            st.caption(f"{name} failed: {str(rec['meta']['error'])[:200]}")
    panels = [k for k in ("logit_lens", "tool_decision", "attention", "token_uncertainty") if k in usable]
    if not panels:
        st.caption("No white-box analysis stored for this trajectory yet.")
        return
    scored = next((usable[k]["meta"].get("scored_on") for k in panels if usable[k]["meta"].get("scored_on")), None)
    if scored:
        st.caption(f"Scored on {scored} (teacher-forced).")
    turns = [s.idx for s in detail.trajectory.steps if s.role is StepRole.ACTOR]
    for idx in turns:
        with st.expander(f"Model turn at step {idx}", expanded=True):
            _turn(usable, idx)


def _turn(records: dict, idx: int) -> None:
    shown = False
    if "logit_lens" in records:
        rows = lens_rows(records["logit_lens"], idx)
        if rows:
            st.markdown("**Logit lens**: probability of the chosen token at each layer")
            st.altair_chart(lens_chart(rows), width="stretch")
            shown = True
    if "tool_decision" in records:
        rows = decision_rows(records["tool_decision"], idx)
        if rows:
            st.markdown("**Tool decision**: alternatives by layer")
            for d in sorted({r["decision"] for r in rows}):
                mine = [r for r in rows if r["decision"] == d]
                last = max(r["layer"] for r in mine)
                final = [r for r in mine if r["layer"] == last]
                chosen = next((r["candidate"] for r in final if r["chosen"]), "?")
                st.caption(f"{mine[0]['what']}: chose “{chosen}”, margin {final[0]['margin']:.2f} nats at the output")
                st.altair_chart(decision_chart(mine), width="stretch")
            shown = True
    if "attention" in records:
        rows = attention_rows(records["attention"], idx)
        if rows:
            st.markdown("**Attention by segment** (mean over this turn's decision tokens)")
            st.altair_chart(attention_chart(rows), width="stretch")
            shown = True
    if "token_uncertainty" in records:
        body = uncertainty_html(records["token_uncertainty"], idx)
        if body:
            st.markdown("**Generated tokens** shaded by uncertainty (darker: less likely)")
            st.html(body)
            shown = True
    if not shown:
        st.caption("No decision points analysed in this turn.")

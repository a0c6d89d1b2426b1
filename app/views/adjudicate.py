"""Adjudicate: a run's trajectories whose annotators disagree (on outcome or kind), one at a time, their
labels side by side; one key (1-9) keeps that annotator's label as the adjudicated one, saved under
the annotator name "adjudicator" (it becomes the current label; the history keeps everyone's)."""

import streamlit as st
from components.data import store
from components.diagnosis_card import render_diagnosis
from components.filters import url_int
from components.labelling import flash
from components.run_picker import pick_run
from components.safe import md_escape
from components.timeline import render_case, render_timeline

from evalrx.store import ADJUDICATOR, disagreements, get_trajectory, list_kinds, set_label, step_pictures

S = store()
ss = st.session_state
ss.setdefault("adj_skipped", [])
_GRADE = {"pass": "green", "fail": "red"}


def _reset() -> None:
    ss.adj_skipped = []


def _keep(tid: int, who: str, word: dict) -> None:
    set_label(
        tid,
        word["outcome"],
        failure_kind=word["kind"],
        first_wrong_step=word["first_wrong_step"],
        annotator=ADJUDICATOR,
        note=f"kept {who}'s label",
        store=S,
    )
    flash(f"#{tid}: kept {md_escape(who)}'s label")


def _skip(tid: int) -> None:
    ss.adj_skipped.append(tid)


st.title("Adjudicate")
run_key = pick_run(st, "pick a run", _reset)
run_id = url_int(run_key)
if run_id is None:
    st.caption("Pick a run: its trajectories whose annotators disagree are listed here, one at a time.")
    st.stop()
items = disagreements(run_id, store=S)
waiting = [d for d in items if d["trajectory_id"] not in ss.adj_skipped]
st.caption(
    f"{len(items):,} open disagreement(s) in run {run_key}"
    + (f" · {len(ss.adj_skipped)} skipped" if ss.adj_skipped else "")
)
if not waiting:
    st.success("No open disagreement in this run.")
    if ss.adj_skipped:
        st.button("Start again from the skipped ones", on_click=_reset)
    st.stop()

item = waiting[0]
tid = item["trajectory_id"]
names = list(item["labels"])[:9]  # one number key each
st.subheader(f"Trajectory {tid}")
st.page_link(
    "views/trajectory.py", label="Open on its own page", icon=":material/open_in_new:", query_params={"id": str(tid)}
)
for n, (who, col) in enumerate(zip(names, st.columns(len(names))), start=1):
    word = item["labels"][who]
    with col, st.container(border=True, key=f"adj-label-{n}"):
        st.markdown(f"**{n} · {md_escape(who)}**")
        bits = [f":{_GRADE.get(word['outcome'], 'gray')}-badge[{md_escape(word['outcome'] or 'cleared')}]"]
        if word["kind"]:
            bits.append(md_escape(word["kind"]))
        if word["first_wrong_step"] is not None:
            bits.append(f"first wrong step {word['first_wrong_step']}")
        st.markdown(" · ".join(bits))
        st.button(
            f"Keep {md_escape(who)}'s label",
            key=f"adj-keep-{n}",
            shortcut=str(n),
            type="primary",
            icon=":material/gavel:",
            on_click=_keep,
            args=(tid, who, word),
            width="stretch",
        )
st.button("Skip", key="adj-skip", shortcut="N", icon=":material/skip_next:", on_click=_skip, args=(tid,))
st.caption(f"Keys: 1–{len(names)} keep that annotator's label · N skip")

detail = get_trajectory(tid, store=S)
render_diagnosis(detail, {k.key: k.definition for k in list_kinds(store=S)})
render_case(detail, store=S)
render_timeline(detail, store=S, pictures=step_pictures(tid, store=S), show_user=False)

with st.expander(f"All open disagreements ({len(items)})"):
    st.dataframe(
        [
            {
                "open": f"trajectory?id={d['trajectory_id']}",
                **{
                    who: " · ".join(str(x) for x in (w["outcome"], w["kind"], w["first_wrong_step"]) if x is not None)
                    for who, w in d["labels"].items()
                },
            }
            for d in items
        ],
        hide_index=True,
        width="stretch",
        column_config={"open": st.column_config.LinkColumn("id", display_text=r"id=(\d+)", width="small")},
    )

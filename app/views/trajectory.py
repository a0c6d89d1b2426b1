"""Trajectory: one trajectory at its own URL (`?id=`), with previous/next in the filter."""

import streamlit as st
from components.data import store
from components.diagnosis_card import highlight_step, render_diagnosis
from components.filters import as_context, describe, from_context, neighbours, url_int
from components.judge_form import trajectory_judge_panel
from components.labelling import current_label, history_table, label_panel
from components.safe import md_escape, short, show_pre
from components.team import render_team
from components.timeline import facts_line, render_case, render_charts, render_timeline

from evalrx.store import get_trajectory, list_kinds, other_runs_of_case, step_pictures

S = store()
qp = st.query_params
raw_id = (qp.get("id") or "").strip()

if url_int(raw_id) is None:
    st.title("Trajectory")
    st.caption("Open one from the Trajectories page, or enter its id.")
    tid = st.number_input("Trajectory id", min_value=1, step=1, value=None)
    if tid:
        st.switch_page("views/trajectory.py", query_params={"id": str(int(tid))})
    st.stop()

detail = get_trajectory(url_int(raw_id), store=S)
if detail is None:
    st.title("Trajectory")
    st.error(f"There is no trajectory {raw_id} in this store.")
    st.page_link("views/trajectories.py", label="All trajectories", icon=":material/list:")
    st.stop()

row = detail.row
keep = from_context(qp.to_dict())
prev_id, next_id = neighbours(row, keep, store=S)


def go(target: int) -> None:
    st.switch_page("views/trajectory.py", query_params={"id": str(target), **as_context(keep)})


st.title(f"Trajectory {row.id}")
nav = st.columns([1, 1, 1, 3], vertical_alignment="center")
if nav[0].button(
    "Previous", key="prev", icon=":material/arrow_back:", shortcut="K", disabled=prev_id is None, width="stretch"
):
    go(prev_id)
if nav[1].button(
    "Next", key="next", icon=":material/arrow_forward:", shortcut="J", disabled=next_id is None, width="stretch"
):
    go(next_id)
nav[2].page_link("views/trajectories.py", label="List", icon=":material/list:", query_params=keep)
nav[3].caption(f"Within: {md_escape(describe(keep))}")

st.caption(
    f"run {row.run_id} · case {md_escape(row.sample_id)} · {row.created_at:%Y-%m-%d %H:%M} UTC"
    + (f" · tags: {md_escape(', '.join(detail.tags))}" if detail.tags else "")
)
others = other_runs_of_case(row.id, store=S)
if others:
    o = next((x for x in others if x["run_id"] != row.run_id), others[0])  # another run before another attempt
    where = f"run {o['run_id']}" if o["run_id"] != row.run_id else "this run"
    same = st.columns([2, 2, 3], vertical_alignment="center")
    same[0].page_link(
        "views/trajectory.py",
        label=f"Same case in {where} (attempt {o['attempt']}, {o['outcome']})",
        icon=":material/call_split:",
        query_params={"id": str(o["trajectory_id"])},
    )
    lo, hi = sorted((o["run_id"], row.run_id))
    same[1].page_link(
        "views/compare.py",
        label="Compare the two side by side",
        icon=":material/compare_arrows:",
        query_params={"a": str(lo), "b": str(hi), "case": row.sample_id},
    )
    if len(others) > 1:
        with same[2].popover(f"All {len(others)} elsewhere", icon=":material/list:"):
            for x in others:
                st.page_link(
                    "views/trajectory.py",
                    query_params={"id": str(x["trajectory_id"])},
                    label=f"run {x['run_id']} · {md_escape(short(x['run_name'] or '', 30))} · attempt {x['attempt']} "
                    f"· {x['outcome']}",
                )
cur = current_label(detail)
st.markdown(facts_line(row, cur))
err = detail.trajectory.metrics.get("error")
if err:
    st.markdown(":red[**The run of this case raised an error**]")
    show_pre(str(err))

kinds = list_kinds(store=S)


def _rediagnose() -> None:
    from evalrx.runner import rediagnose

    rediagnose([row.id], store=S)


@st.cache_data(ttl=60, show_spinner=False)
def _agreement(run_id: int, seen_label: object) -> dict:
    """Each diagnosis source's agreement with people over the runs of this run's suite: a minute old at most,
    and fresh after this trajectory's label changes (`seen_label`, part of the cache key)."""
    from evalrx.reports import source_agreement
    from evalrx.store import get_run, list_runs

    run = get_run(run_id, store=S)
    suite = (run.config or {}).get("suite") if run is not None else None
    runs = [r.id for r in list_runs(store=S) if suite and (r.config or {}).get("suite") == suite] or [run_id]
    return source_agreement(runs, store=S)


wrong_step = render_diagnosis(
    detail,
    {k.key: k.definition for k in kinds},
    on_rediagnose=_rediagnose,
    agreement=_agreement(row.run_id, cur and (cur.id, cur.created_at))
    if len({d.source for d in detail.diagnoses or []}) > 1
    else None,
)
with st.expander("Ask a judge about this trajectory", icon=":material/gavel:"):
    trajectory_judge_panel(row.id, row.run_id, S)
main, side = st.columns([3, 2], gap="large")
with side:
    with st.container(border=True):
        st.markdown("#### Label")
        annotator = st.text_input(
            "Annotator", key="annotator", persist_state="session", placeholder="your name (saved with each label)"
        )
        label_panel(detail, store=S, kinds=kinds, annotator_key="annotator", key="tl")
    with st.expander("Label history", expanded=False):
        history_table(row.id, store=S)
with main:
    with st.container(border=True):
        render_case(detail, store=S)
    render_team(detail, store=S)  # a team's agents, their shares and the roster; nothing for one agent
    render_charts(detail)
    st.markdown("#### Steps")
    marked = cur.first_wrong_step if cur and cur.first_wrong_step is not None else wrong_step
    render_timeline(detail, store=S, pictures=step_pictures(row.id, store=S), first_wrong=marked)
    seen = st.session_state.setdefault("scrolled-to", set())
    highlight_step(marked, scroll=row.id not in seen)  # scroll once per trajectory, not on every rerun
    seen.add(row.id)
    from components.analysis_panels import render_analysis  # numpy and the analyzers: after the steps

    render_analysis(detail, store=S, open_step=marked)  # after the steps, which show first

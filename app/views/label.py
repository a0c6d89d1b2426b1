"""Label queue: unlabelled trajectories one at a time, labelled from the keyboard.

Second opinion (`?second=true`, with a run and your name): a fixed sample of the run's failures that
someone else labelled and you have not, shown blind (no grade, diagnosis or earlier label), so the
Agreement tab of the run measures independent verdicts.
"""

from typing import Any

import streamlit as st
from components.data import store
from components.diagnosis_card import render_diagnosis
from components.filters import url_int
from components.labelling import current_label, history_table, label_panel
from components.run_picker import pick_run
from components.safe import counted, md_escape
from components.timeline import facts_line, render_case, render_charts, render_timeline

from evalrx.store import (
    count_trajectories,
    delete_kind,
    encode_cursor,
    get_trajectory,
    list_kinds,
    list_trajectories,
    save_kind,
    second_opinion_queue,
    step_pictures,
)

S = store()
ss = st.session_state
ss.setdefault("q_after", None)  # id of the last skipped trajectory: the queue continues after it
ss.setdefault("q_seen", [])  # ids labelled or skipped in this session, for Back
ss.setdefault("q_pin", None)  # an id brought back with Back (shown even if labelled)
ss.setdefault("so_skipped", [])  # second-opinion ids skipped in this session


def _reset_queue() -> None:
    ss.q_after, ss.q_pin, ss.so_skipped = None, None, []


def _queue_filter(col: Any, label: str, key: str, help: str) -> bool:
    """A toggle that changes which trajectories the queue holds (kept in the URL; the queue starts again)."""
    return col.toggle(label, key=key, bind="query-params", on_change=_reset_queue, help=help)


st.title("Label queue")
top = st.columns([2, 1.3, 0.8, 1.4, 1.6], vertical_alignment="bottom")
run_key = pick_run(top[0], "all runs", _reset_queue)
only_fail = _queue_filter(
    top[1], "Only failures", "fails", "only trajectories the automatic grader failed (errored cases are not failures)"
)
blind = top[2].toggle("Blind", key="blind", bind="query-params", help="hide the automatic grade while you label")
second = _queue_filter(
    top[3],
    "Second opinion",
    "second",
    "blind: a sample of this run's failures labelled by someone else, not yet by you",
)
annotator = top[4].text_input(
    "Annotator",
    key="annotator",
    bind="query-params",
    persist_state="session",
    placeholder="your name (saved with each label)",
)

filters = {"label": "none"}
if url_int(run_key) is not None:
    filters["run_id"] = url_int(run_key)
if only_fail:
    filters["outcome"] = "fail"
me = (annotator or "").strip()
if second:
    blind = True
    if url_int(run_key) is None or not me:
        st.info("A second opinion needs a run and your annotator name (above).")
        st.stop()
    queue = [t for t in second_opinion_queue(url_int(run_key), me, store=S) if t not in ss.so_skipped]
    tid = queue[0] if queue else None
    st.caption(
        f"{counted(len(queue), 'trajectory', 'trajectories')} {'waits' if len(queue) == 1 else 'wait'} for your second opinion in run {run_key}"
        + (f" · {len(ss.so_skipped)} skipped" if ss.so_skipped else "")
    )
    if tid is None:
        st.success("No second opinion left for you in this run.")
        if ss.so_skipped:
            st.button("Start again from the skipped ones", on_click=_reset_queue)
        st.stop()
else:
    remaining = count_trajectories(store=S, **filters)
    tid = ss.q_pin
    if tid is None:
        after = encode_cursor(ss.q_after, ss.q_after) if ss.q_after else None
        page = list_trajectories(sort="id", descending=False, limit=1, after=after, store=S, **filters)
        tid = page.rows[0].id if page.rows else None
    st.caption(
        f"{remaining:,} unlabelled"
        + (" failures" if only_fail else "")
        + " in this queue"
        + (f" · {len(ss.q_seen)} done this session" if ss.q_seen else "")
    )
if tid is None:
    if ss.q_after:
        st.info("No unlabelled trajectory after the ones you skipped.")
        st.button("Start again from the first skipped one", on_click=_reset_queue)
    else:
        st.success("Nothing left to label here.")
    st.stop()

detail = get_trajectory(tid, store=S)


def _done(t: int) -> None:
    ss.q_seen.append(t)
    if ss.q_pin == t:
        ss.q_pin = None


def _skip() -> None:
    if second:
        ss.so_skipped.append(tid)
        return
    _done(tid)
    if ss.q_pin is None:
        ss.q_after = max(tid, ss.q_after or 0)


def _back() -> None:
    if ss.q_seen:
        ss.q_pin = ss.q_seen.pop()


def taxonomy_editor(kinds: list) -> None:
    """Edit the shared taxonomy: add your own kinds, bind keys 1-9; built-in kinds stay."""
    rows = [{"kind": k.key, "definition": k.definition, "key": k.hotkey, "built in": k.builtin} for k in kinds]
    edited = st.data_editor(
        rows,
        num_rows="dynamic",
        key="taxonomy-editor",
        hide_index=True,
        width="stretch",
        disabled=["built in"],
        column_config={"key": st.column_config.SelectboxColumn("key", options=list("123456789"))},
    )
    if st.button("Save taxonomy"):
        try:
            save_taxonomy(kinds, edited)
            st.rerun()
        except ValueError as exc:
            st.error(md_escape(exc))
    st.caption("Shared by everyone on this store. One number key per kind; built-in kinds cannot be removed.")


def save_taxonomy(kinds: list, edited: list) -> None:
    before = {k.key: k for k in kinds}
    after = {}
    for row in edited:
        name = (row.get("kind") or "").strip()
        if name:
            after[name] = row
    for name, k in before.items():
        if name not in after and not k.builtin:
            delete_kind(name, store=S)
    for name, row in after.items():
        old = before.get(name)
        if old is None or (row.get("definition") or "") != old.definition or row.get("key") != old.hotkey:
            save_kind(name, row.get("definition") or "", hotkey=row.get("key") or None, store=S)


kinds = list_kinds(store=S)
left, right = st.columns([3, 2], gap="large")
with right:
    with st.container(border=True):
        st.markdown(f"#### Trajectory {tid}")
        label_panel(detail, store=S, kinds=kinds, annotator_key="annotator", key="lq", on_saved=_done, blind=second)
        n1, n2 = st.columns(2)
        n1.button(
            "Back",
            key="lq-back",
            icon=":material/undo:",
            shortcut="B",
            on_click=_back,
            disabled=second or not ss.q_seen,
            width="stretch",
        )
        n2.button("Skip", key="lq-skip", icon=":material/skip_next:", shortcut="N", on_click=_skip, width="stretch")
    st.caption(
        "Keys: Enter accept the proposal · P pass · F fail · U unknown · 1–9 fail with that kind · "
        "W first wrong step → next model turn · N skip · B back · ? all keys"
    )
    if not second:  # its own page and the history show the earlier labels
        st.page_link(
            "views/trajectory.py",
            label="Open on its own page",
            icon=":material/open_in_new:",
            query_params={"id": str(tid)},
        )
        with st.expander("Label history"):
            history_table(tid, store=S)
    with st.expander("Failure taxonomy"):
        taxonomy_editor(kinds)
with left:
    row = detail.row
    cur = None if second else current_label(detail)
    st.markdown(f"run {row.run_id} · case {md_escape(row.sample_id)} · " + facts_line(row, cur, blind=blind))
    if not blind:
        render_diagnosis(detail, {k.key: k.definition for k in kinds})
    render_case(detail, store=S, blind=blind)
    render_timeline(
        detail, store=S, pictures=step_pictures(tid, store=S), show_user=False, first_wrong=ss.get(f"lq-fws-{tid}")
    )
    with st.expander("Latency and tokens"):
        render_charts(detail)

"""Dashboard: outcomes, why the failures failed (diagnosed kinds) and labelled failure kinds per run,
latency by step kind and tool, the slowest and longest trajectories."""

from urllib.parse import urlencode

import streamlit as st
from components.charts import KIND_PICK, counts_chart, failure_kind_chart, latency_boxplot
from components.data import store
from components.filters import OUTCOMES, url_int
from components.safe import short

from evalrx.core import NOT_AGENT_KINDS
from evalrx.store import (
    count_trajectories,
    label_counts_by_annotator,
    list_kinds,
    list_runs,
    list_trajectories,
    run_stats,
    runs_with_label_kinds,
    step_latency_sample,
)

S = store()
st.title("Dashboard")


@st.cache_data(ttl=10, show_spinner=False)
def _runs(url: str) -> dict:  # the URL is part of the cache key (a leading _ would drop it)
    return {r.id: r for r in list_runs(limit=500, store=S)}


@st.cache_data(ttl=10, show_spinner=False)
def _effective(run_id: int, url: str) -> dict:
    """Outcome counts from human labels where present, the grader's otherwise."""
    out = {}
    for o in OUTCOMES:
        n = count_trajectories(run_id=run_id, label=o, store=S) + count_trajectories(
            run_id=run_id, label="none", outcome=o, store=S
        )
        if n:
            out[o] = n
    return out


@st.cache_data(ttl=10, show_spinner=False)
def _stats(run_id: int, url: str):
    return run_stats(run_id, store=S)


runs = _runs(S.url)
if not runs:
    st.info("No runs yet.")
    st.stop()
NEWEST = 10  # runs shown by default, besides every run with labelled failure kinds
labelled = {r: n for r, n in runs_with_label_kinds(store=S).items() if r in runs}
wanted = st.query_params.get("run")
newest = list(runs)[:NEWEST]
default = (
    [url_int(wanted)]
    if url_int(wanted) in runs
    else newest + [r for r in labelled if r not in newest]  # a labelled run is never hidden for being old
)
chosen = st.multiselect(
    "Runs",
    list(runs),
    default=default,
    key="dash-runs",
    format_func=lambda i: f"{i} · {runs[i].name or runs[i].spec_key or ''}",
)
if not chosen:
    st.caption("Pick at least one run.")
    st.stop()

definitions = {k.key: k.definition for k in list_kinds(store=S)}
outcome_rows, mode_rows, kind_rows = [], [], []
for rid in chosen:
    label = f"{rid} · {short(runs[rid].name, 30)}"
    for o, n in _effective(rid, S.url).items():
        outcome_rows.append({"run": label, "outcome": o, "n": n})
    for m, n in _stats(rid, S.url).label_kinds.items():
        mode_rows.append({"run": label, "failure kind": m, "n": n})
    for k, n in _stats(rid, S.url).diagnosis_kinds.items():
        if k not in NOT_AGENT_KINDS:  # an errored case or the user's error is not the model's failure
            kind_rows.append({"run": label, "run_id": rid, "kind": k, "n": n, "definition": definitions.get(k, "")})

total = {}
for r in outcome_rows:
    total[r["outcome"]] = total.get(r["outcome"], 0) + r["n"]
n_all = sum(total.values())
c = st.columns(5)
c[0].metric("trajectories", f"{n_all:,}")
for i, o in enumerate(OUTCOMES, start=1):
    share = f" ({100 * total.get(o, 0) / n_all:.0f}%)" if n_all else ""
    c[i].metric(
        o,
        f"{total.get(o, 0):,}{share}",
        help="labels where present, grades otherwise; error: the server or harness failed, not the model",
    )

if kind_rows:
    event = st.altair_chart(failure_kind_chart(kind_rows), width="stretch", on_select="rerun", key="kinds")
    picked = (event.selection.get(KIND_PICK) if event and event.selection else None) or []
    if picked and picked[0].get("kind"):
        st.switch_page(
            "views/trajectories.py", query_params={"run": str(picked[0]["run_id"]), "kind": str(picked[0]["kind"])}
        )
    st.dataframe(
        [
            {
                "open": "trajectories?" + urlencode({"run": r["run_id"], "kind": r["kind"]}),
                "run": r["run"],
                "kind": r["kind"],
                "failures": r["n"],
                "what it means": r["definition"],
            }
            for r in kind_rows
        ],
        hide_index=True,
        width="stretch",
        key="kind-table",
        column_config={"open": st.column_config.LinkColumn("list", display_text="open", width="small")},
    )
    st.caption("Click a bar (or open) to list those failures.")
else:
    st.caption("No diagnosed failures in these runs.")

left, right = st.columns(2)
with left:
    if outcome_rows:
        st.altair_chart(
            counts_chart(outcome_rows, x="run", color="outcome", title="Outcomes (labels, else grades)"),
            width="stretch",
        )
with right:
    if mode_rows:
        st.altair_chart(
            counts_chart(mode_rows, x="failure kind", color="run", title="Failure kinds (labels)"), width="stretch"
        )
    elif labelled:
        elsewhere = ", ".join(f"run {r} ({n})" for r, n in list(labelled.items())[:5])
        st.caption(f"No failure kinds labelled in these runs; labelled in {elsewhere}: add it to Runs above.")
    else:
        st.caption("No failure kinds labelled yet: the Label queue assigns them.")

sample = [
    {
        "role": "model" if r["role"] == "actor" else "tool",
        "tool": (r["tool_name"] or "(none)") if r["role"] == "tool" else f"→ {r['tool_name'] or 'answer'}",
        "latency_ms": r["latency_ms"],
    }
    for r in step_latency_sample(store=S, run_ids=chosen)
]
if sample:
    l2, r2 = st.columns(2)
    with l2:
        st.altair_chart(latency_boxplot(sample, "role", "Latency per step kind"), width="stretch")
    with r2:
        st.altair_chart(latency_boxplot(sample, "tool", "Latency per tool / model decision"), width="stretch")
    st.caption(f"From {len(sample):,} timed steps of the most recent trajectories.")

filters = {"run_id": chosen}
t1, t2 = st.columns(2)
for col, sort, title in ((t1, "latency_ms", "Slowest"), (t2, "n_steps", "Longest")):
    with col:
        st.markdown(f"**{title}**")
        page = list_trajectories(sort=sort, limit=10, store=S, **filters)
        st.dataframe(
            [
                {
                    "open": "trajectory?" + urlencode({"id": r.id}),
                    "run": r.run_id,
                    "goal": short(r.goal, 50),
                    "grade": r.outcome,
                    "steps": r.n_steps,
                    "latency ms": round(r.latency_ms, 1),
                }
                for r in page.rows
            ],
            hide_index=True,
            width="stretch",
            column_config={"open": st.column_config.LinkColumn("id", display_text=r"id=(\d+)")},
        )

ann = label_counts_by_annotator(store=S, run_ids=chosen)
if ann:
    st.markdown("**Labels by annotator**")
    st.dataframe(ann, hide_index=True)

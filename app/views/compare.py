"""Compare: two runs case by case (`?a=1&b=2`), and one case's two trajectories aligned (`&case=q0003`).

The counts pair the cases both runs graded; cases graded in one run only are counted and listed apart,
never dropped. The same run on both sides (`?a=3&b=3&case=...`) sets two attempts of a case side by side.
The URL always names both runs (a link keeps its meaning when newer runs arrive); a run not named is
paired with the newest other run of the same suite (run config `suite`, else the same case set), else
with the run before it. The two runs' config keys that differ are listed (no secret: the store holds none).
"""

import json

import streamlit as st
from components.data import store
from components.filters import url_int
from components.runlevel_panels import render_predictors
from components.runlevel_view import change_rows, default_attempts, kind_shift_rows, only_cases
from components.runs_view import run_title
from components.safe import md_escape, show_pre
from components.side_by_side import render_side_by_side

from evalrx.config import comparable_config
from evalrx.reports import compare_attempts
from evalrx.store import annotator_labels, attempts_of, get_trajectory, is_secret_name, list_runs

S = store()
OTHER_CASES = 200  # unchanged cases offered in the picker besides every changed one


@st.cache_data(ttl=10, show_spinner=False)
def _runs(url: str) -> dict:
    return {r.id: r for r in list_runs(limit=500, store=S)}


# Keyed by the runs' progress, so a finished run's figures never go stale; held as objects (cache_resource),
# not pickled copies: a 50k-case comparison would cost a copy per rerun. Pages only read them.
@st.cache_resource(ttl=600, max_entries=64, show_spinner=False)
def _attempts(run_id: int, n_done: int, url: str) -> dict:
    return attempts_of(run_id, store=S)


@st.cache_resource(ttl=600, max_entries=64, show_spinner="Comparing…")
def _compare(a: int, b: int, stamp: tuple, url: str) -> dict:
    return compare_attempts(_attempts(a, stamp[0], url), _attempts(b, stamp[1], url))


st.title("Compare")
runs = _runs(S.url)
wanted_runs = {st.query_params.get(k) for k in ("a", "b")} - {None}
if any(url_int(w) not in runs for w in wanted_runs):
    _runs.clear()  # a run newer than the cached list (or a bad id: then the pickers say so)
    runs = _runs(S.url)
if not runs:
    st.info("No runs yet.")
    st.stop()
ids = list(runs)  # most recent first: B is the newest run, A its partner
CASE_SET_SCAN = 20  # runs without a suite: how many recent runs are compared by their case set


def _suite(rid: int) -> "str | None":
    return (runs[rid].config or {}).get("suite") or None


def _same_suite(rid: int, other: int, n_seen: int) -> bool:
    """Both runs name the same suite, or (one names none: an import) they hold the same cases."""
    mine, theirs = _suite(rid), _suite(other)
    if mine and theirs:
        return mine == theirs
    if n_seen >= CASE_SET_SCAN:
        return False
    return set(_attempts(rid, runs[rid].n_done, S.url)) == set(_attempts(other, runs[other].n_done, S.url))


def _partner(rid: int, fallback: int) -> int:
    """The newest other run of `rid`'s suite, else `fallback`."""
    others = [i for i in ids if i != rid]
    return next((i for n, i in enumerate(others) if _same_suite(rid, i, n)), fallback)


def _url_run(key: str) -> "int | None":
    v = st.query_params.get(key)
    return url_int(v) if url_int(v) in runs else None


if st.session_state.get("a") not in runs or st.session_state.get("b") not in runs:  # the URL decides
    url_a, url_b = _url_run("a"), _url_run("b")
    if url_b is None:
        url_b = ids[0] if url_a is None else _partner(url_a, next((i for i in ids if i != url_a), url_a))
    if url_a is None:
        older = [i for i in ids if i < url_b] or [i for i in ids if i != url_b] or [url_b]
        url_a = _partner(url_b, older[0])
    st.session_state["a"], st.session_state["b"] = url_a, url_b
pick_a, pick_b = st.columns(2)
a = pick_a.selectbox("Run A (before)", ids, key="a", format_func=lambda i: run_title(runs[i]))
b = pick_b.selectbox("Run B (after)", ids, key="b", format_func=lambda i: run_title(runs[i]))
# Both runs always in the URL, defaults included (a bound widget drops its default from it, and a shared
# `compare?a=4&case=...` would then pair run 4 with whatever run is newest when it is opened). Written only
# when they change: a rewrite on every rerun raced the case picker's own `?case=` update.
if (st.query_params.get("a"), st.query_params.get("b")) != (str(a), str(b)):
    st.query_params["a"], st.query_params["b"] = str(a), str(b)
att_a, att_b = _attempts(a, runs[a].n_done, S.url), _attempts(b, runs[b].n_done, S.url)


def _flat(cfg: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in (cfg or {}).items():
        name = f"{prefix}{k}"
        if is_secret_name(k):
            continue  # never shown, even if a foreign store held one (the store's own rule for secret names)
        if isinstance(v, dict) and v:
            out.update(_flat(v, name + "."))
        else:
            out[name] = v
    return out


SHOWN_CHARS = 200  # a long value (a system prompt) is cut in the table


def _shown(v: object) -> str:
    """A config value as inert text: st.table renders Markdown, and an imported config is anyone's text."""
    if v is None:
        return "(not set)"
    text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, sort_keys=True)
    return md_escape(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + " …")


def config_differences(cfg_a: dict, cfg_b: dict) -> list[dict]:
    """The config keys (dotted paths) whose values differ between two runs, with both values as text."""
    fa, fb = _flat(comparable_config(cfg_a)), _flat(comparable_config(cfg_b))
    keys = sorted(k for k in set(fa) | set(fb) if fa.get(k, None) != fb.get(k, None))
    return [{"key": md_escape(k), "A": _shown(fa.get(k)), "B": _shown(fb.get(k))} for k in keys]


if a != b:
    differences = config_differences(runs[a].config or {}, runs[b].config or {})
    if differences:
        with st.expander(f"Config differences, A → B ({len(differences)})", expanded=True):
            st.table(differences)  # a few keys: a static table (the changed-cases grid stays the page's first)
    else:
        st.caption("The two runs' configs are the same.")


def _open_case() -> None:
    picked = st.session_state["changes"].selection.rows
    if picked:  # the table's rows are stored with it: the case picker below is bound to ?case=
        st.session_state["case"] = st.session_state["change-cases"][picked[0]]


if a == b:
    st.info(f"Run {a} on both sides: pick a case to set two of its attempts side by side.")
    flaky = sorted(c for c in att_a if len({o for _, o, _, _ in att_a[c]}) > 1)
    others = sorted(set(att_a) - set(flaky))
    wanted = st.query_params.get("case")
    cases = flaky + others[:OTHER_CASES] + ([wanted] if wanted in others[OTHER_CASES:] else [])  # flaky first
else:
    cmp = _compare(a, b, (runs[a].n_done, runs[b].n_done), S.url)
    c = st.columns(6)
    c[0].metric("paired cases", f"{cmp['n_paired']:,}")
    c[1].metric("both pass", f"{cmp['both_pass']:,}")
    c[2].metric("both fail", f"{cmp['both_fail']:,}")
    c[3].metric("regressions", f"{cmp['regressions']:,}", help="passed every attempt in A, failed every one in B")
    c[4].metric("fixes", f"{cmp['fixes']:,}", help="failed every attempt in A, passed every one in B")
    c[5].metric("mixed", f"{cmp['mixed']:,}", help="some attempts pass and some fail in A or in B")
    d = st.columns(3)
    if cmp["diff"] is None:
        d[0].metric("success rate B − A", "—")
    else:
        d[0].metric(
            "success rate B − A",
            f"{100 * cmp['diff']:+.1f} pp",
            help="mean over paired cases of B's success rate minus A's (percentage points)",
        )
        d[1].metric(
            "95% interval",
            f"{100 * cmp['diff_ci_low']:+.1f} to {100 * cmp['diff_ci_high']:+.1f} pp",
            help="paired bootstrap over cases",
        )
    d[2].metric("McNemar p", f"{cmp['mcnemar_p']:.3g}", help="exact test on regressions against fixes")
    only_a, only_b = only_cases(att_a, att_b)
    if only_a or only_b:
        st.warning(
            f"{len(only_a)} case(s) only in A and {len(only_b)} only in B: not paired, so not in the counts above."
        )
        for side, names in (("A", only_a), ("B", only_b)):
            if names:
                with st.expander(f"Cases only in {side} ({len(names)})"):
                    show_pre(", ".join(names))
    rows = change_rows(cmp, a, b)
    st.session_state["change-cases"] = [r["case"] for r in rows]
    left, right = st.columns([3, 2])
    with left:
        st.markdown(f"**Cases that changed ({len(rows)})**: click a row to set its two trajectories side by side.")
        if rows:
            st.dataframe(
                rows,
                hide_index=True,
                width="stretch",
                key="changes",
                on_select=_open_case,
                selection_mode="single-row",
                column_config={"open": st.column_config.LinkColumn("link", display_text="link", width="small")},
            )
        else:
            st.caption("No paired case changed.")
    with right:
        shift = kind_shift_rows(cmp)
        st.markdown("**Failure kinds, A → B** (failed attempts on paired cases)")
        if shift:
            st.dataframe(shift, hide_index=True, width="stretch", key="kind-shift")
        else:
            st.caption("No failures on the paired cases.")
    changed = {r["case"] for r in rows}
    # The picker lists the changed cases, then a few others (a 50k-case list would weigh on every rerun);
    # any case opens by its URL (?case=...).
    others = sorted((set(att_a) | set(att_b)) - changed)
    wanted = st.query_params.get("case")
    cases = [r["case"] for r in rows] + others[:OTHER_CASES] + ([wanted] if wanted in others[OTHER_CASES:] else [])

predict = st.expander(
    "What predicts failure" + (f" in runs {a} and {b}" if a != b else f" in run {a}"), key="predict", on_change="rerun"
)
with predict:
    if predict.open:  # ranked only when asked: two seconds on two 50k-trajectory runs
        render_predictors(sorted({a, b}), url=S.url, link_run=b, stamp=(runs[a].n_done, runs[b].n_done))

st.subheader("Side by side")
case = st.selectbox(
    "Case", cases, index=None, key="case", bind="query-params", placeholder="pick a case (or click a changed one above)"
)
if case is None:
    st.stop()
rows_a, rows_b = att_a.get(case, []), att_b.get(case, [])
if not rows_a or not rows_b:
    side, tid = ("A", rows_a[0][3]) if rows_a else ("B", rows_b[0][3])
    st.info(f"Case {md_escape(case)} was graded in run {side} only: there is nothing to set beside it.")
    st.page_link("views/trajectory.py", label=f"Trajectory {tid}", query_params={"id": str(tid)})
    st.stop()
if a == b and len(rows_a) < 2:
    st.info(f"Case {md_escape(case)} has one graded attempt in run {a}: there is no other attempt to set beside it.")
    st.page_link("views/trajectory.py", label=f"Trajectory {rows_a[0][3]}", query_params={"id": str(rows_a[0][3])})
    st.stop()
first_a, first_b = default_attempts(rows_a, rows_b, same_run=a == b)  # one run: rows_b is rows_a


def _attempt(col, side: str, rows: list, default: int) -> tuple:
    """The attempt shown on one side: picked when the case has several, else its only one."""
    wanted = st.query_params.get("t" + side.lower())  # ?ta=2&tb=3 opens those attempts
    numbers = [r[0] for r in rows]
    start = url_int(wanted) if url_int(wanted) in numbers else default
    if len(rows) == 1:
        return rows[0]
    n = col.selectbox(
        f"Attempt in {side}",
        numbers,
        index=numbers.index(start),
        key=f"att-{side}-{a}-{b}-{case}",
        format_func=lambda x: f"attempt {x} · " + next(r[1] for r in rows if r[0] == x),
    )
    return next(r for r in rows if r[0] == n)


pa, pb = st.columns(2)
row_a = _attempt(pa, "A", rows_a, first_a)
row_b = _attempt(pb, "B", rows_b, first_b)
detail_a, detail_b = get_trajectory(row_a[3], store=S), get_trajectory(row_b[3], store=S)
words = annotator_labels([row_a[3], row_b[3]], store=S)
render_side_by_side(
    detail_a, detail_b, words=words, titles=(f"A · run {a} · attempt {row_a[0]}", f"B · run {b} · attempt {row_b[0]}")
)

"""Fast page tests with Streamlit's AppTest on a real, filled SQLite store.

AppTest runs the real scripts in-process (no browser): filters from the URL, clicks on
label buttons, the queue's order, launching and cancelling runs, and escaping.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))  # appdata

from appdata import XSS_IMG, XSS_SCRIPT, add_xss_run, fill_run  # noqa: E402
from apppages import MAIN, list_cells, listed, open_page, pre_texts, row_htmls, store_url, texts  # noqa: E402,F401  (store_url: a fixture)

import evalrx.store as S  # noqa: E402


@pytest.fixture
def seeded(store_url):
    run_id, ids = fill_run(
        store_url,
        12,
        seed=1,
        name="seeded",
        outcomes=["pass", "fail", "fail", "pass", "fail", "pass", "fail", "fail", "pass", "pass", "fail", "pass"],
    )
    xss_run, xss_id = add_xss_run(store_url)
    return {"url": store_url, "run": run_id, "ids": ids, "xss_run": xss_run, "xss": xss_id}


def svg_images(at) -> list[str]:
    """The SVG documents a page shows as images (the trajectory's charts)."""
    import base64

    head = "data:image/svg+xml;base64,"
    return [
        base64.b64decode(img.url[len(head) :]).decode()
        for el in at.get("image")
        for img in el.proto.imgs
        if img.url.startswith(head)
    ]


def current(url: str, tid: int):
    return next((l for l in S.current_labels(tid, store=url) if l.step_idx is None), None)


# ------------------------------------------------------------------ Trajectories


def test_trajectories_filter_comes_from_the_url(seeded):
    at = open_page("trajectories", outcome="fail", run=seeded["run"])
    want = S.list_trajectories(run_id=seeded["run"], outcome="fail", store=seeded["url"]).rows
    rows = listed(at)
    assert [tid for tid, _ in rows] == [r.id for r in want] and len(want) == 6
    assert all(r.outcome == "fail" for r in want)
    # Each row links to its trajectory with the filter kept for previous/next.
    assert all(
        q["id"] == str(tid) and q["in_outcome"] == "fail" and q["in_run"] == str(seeded["run"]) for tid, q in rows
    )
    assert [cells[1] for cells in list_cells(at)] == ["fail"] * 6  # each row's grade
    at.selectbox(key="outcome").set_value("pass").run()
    passed = {r.id for r in S.list_trajectories(outcome="pass", store=seeded["url"]).rows}
    assert {tid for tid, _ in listed(at)} == passed and {cells[1] for cells in list_cells(at)} == {"pass"}


def test_trajectories_text_search_and_sort(seeded):
    at = open_page("trajectories", q="question 7:")
    (only,) = listed(at)
    assert S.get_trajectory(only[0], store=seeded["url"]).row.sample_id == "q00007"
    at = open_page("trajectories", sort="latency", asc="true", run=seeded["run"])
    lat = [S.get_trajectory(tid, store=seeded["url"]).row.latency_ms for tid, _ in listed(at)]
    assert lat == sorted(lat) and len(lat) == 12


def test_trajectories_paginate(store_url):
    fill_run(store_url, 120, seed=3, name="big")
    at = open_page("trajectories", page=3)
    ids = [tid for tid, _ in listed(at)]
    assert len(ids) == 20  # 120 rows, 50 per page
    assert "page 3 of 3" in texts(at)
    assert ids == sorted(ids, reverse=True) and max(ids) == 20
    at = open_page("trajectories", page=2, per=100)
    assert "page 2 of 2" in texts(at) and [tid for tid, _ in listed(at)] == list(range(20, 0, -1))


def test_trajectories_list_is_inert_and_loads_no_table_library(seeded):
    """The list escapes what it shows, and draws no Arrow table (pandas and pyarrow stay out of the server)."""
    at = open_page("trajectories", run=seeded["xss_run"])
    assert listed(at)
    for m in at.markdown:
        v = str(m.value)
        assert not re.search(r"(?<!\\)<", v), v
        assert "](javascript" not in v and ":red[red]" not in v, v
    (row,) = row_htmls(at)  # the hostile goal and answer are text in the row's HTML, never a tag
    assert "<script" not in row and "<img" not in row and "&lt;script&gt;" in row, row
    assert XSS_SCRIPT[:20] in list_cells(at)[0][0]
    assert not at.dataframe and not at.table


# ------------------------------------------------------------------ Trajectory


def test_trajectory_page_shows_case_steps_calls_and_charts(seeded):
    tid = seeded["ids"][1]
    detail = S.get_trajectory(tid, store=seeded["url"])
    at = open_page("trajectory", id=tid)
    assert at.title[0].value == f"Trajectory {tid}"
    shown = texts(at)
    for step in detail.trajectory.steps:
        if step.role.value == "actor":
            assert step.content in pre_texts(at)
        for call in step.tool_calls:
            assert f"calls **{call.name}**" in shown
    charts = svg_images(at)
    assert len(charts) == 2 and "Latency waterfall (ms)" in charts[0] and "Tokens per model turn" in charts[1]
    from components.viewmodel import token_rows, waterfall_rows

    # one bar per timed step, one per (turn, prompt or completion)
    assert charts[0].count("<rect") == len(waterfall_rows(detail.trajectory)) > 0
    assert charts[1].count("<rect") == len(token_rows(detail.trajectory)) > 0


def test_trajectory_prev_next_follow_the_filter(seeded):
    fails = S.list_trajectories(run_id=seeded["run"], outcome="fail", store=seeded["url"]).rows
    mid = fails[2]
    at = open_page("trajectory", id=mid.id, in_run=seeded["run"], in_outcome="fail")
    assert "graded fail" in texts(at)
    from components.filters import neighbours  # the page's own helper, checked against the list order

    prev_id, next_id = neighbours(mid, {"run": str(seeded["run"]), "outcome": "fail"}, store=S.connect(seeded["url"]))
    assert (prev_id, next_id) == (fails[1].id, fails[3].id)
    first = open_page("trajectory", id=fails[0].id, in_run=seeded["run"], in_outcome="fail")
    assert first.button(key="prev").disabled and not first.button(key="next").disabled
    assert "run " + str(seeded["run"]) in texts(first) and "graded fail" in texts(first)  # "Within: ..." caption


def test_untrusted_output_is_escaped_everywhere(seeded):
    at = open_page("trajectory", id=seeded["xss"])
    # Code blocks carry the raw text (the browser shows it as text) ...
    codes = pre_texts(at)
    assert any(XSS_SCRIPT in c for c in codes) and any(XSS_IMG in c for c in codes)
    # ... and no Markdown element carries a live tag, link or Streamlit directive.
    for m in list(at.markdown) + list(at.caption):
        v = str(m.value)
        assert not re.search(r"(?<!\\)<", v), v  # every < is backslash-escaped
        assert "](javascript" not in v and ":red[red]" not in v, v
    assert "calls **lookup\\<img" in texts(at)
    for body in [h.proto.body for h in at.get("html")] + svg_images(at):  # tables and charts: escaped too
        assert "<img" not in body and "<script>window" not in body


def test_missing_trajectory_says_so(seeded):
    at = open_page("trajectory", id=999999)
    assert any("no trajectory 999999" in e.value for e in at.error)


# ------------------------------------------------------------------ labelling


def test_label_buttons_save_and_keep_history(seeded):
    tid, url = seeded["ids"][2], seeded["url"]
    at = open_page("trajectory", id=tid)
    at.text_input(key="annotator").set_value("ana")
    at.button(key="tl-mode-3").click().run()  # key 3: fail with the third failure mode
    lab = current(url, tid)
    assert (lab.outcome, lab.failure_kind, lab.annotator) == (
        "fail",
        "wrong_tool",
        "ana",
    )  # key 3 of the default taxonomy
    at.button(key="tl-pass").click().run()
    hist = S.label_history(tid, store=url)
    assert [h.outcome for h in hist] == ["fail", "pass"]
    assert not hist[0].is_current and hist[0].superseded_by == hist[1].id
    assert "**pass**" in texts(at)


def test_first_wrong_step_then_mode_is_two_presses(seeded):
    tid, url = seeded["ids"][4], seeded["url"]
    detail = S.get_trajectory(tid, store=url)
    first_actor = next(s.idx for s in detail.trajectory.steps if s.role.value == "actor")
    at = open_page("trajectory", id=tid)
    at.text_input(key="annotator").set_value("ana")
    at.button(key="tl-cycle").click().run()  # W
    at.button(key="tl-mode-2").click().run()  # 2
    lab = current(url, tid)
    assert (lab.outcome, lab.failure_kind, lab.first_wrong_step) == ("fail", "misread_observation", first_actor)


def test_label_queue_moves_on_skips_and_goes_back(seeded):
    url = seeded["url"]
    ids = seeded["ids"]
    at = open_page("label", run=seeded["run"], annotator="ana")
    assert "Trajectory " + str(ids[0]) in texts(at)
    at.button(key="lq-pass").click().run()
    assert current(url, ids[0]).outcome == "pass"
    assert "Trajectory " + str(ids[1]) in texts(at)
    at.button(key="lq-skip").click().run()
    assert "Trajectory " + str(ids[2]) in texts(at) and current(url, ids[1]) is None
    at.button(key="lq-mode-1").click().run()
    assert (current(url, ids[2]).outcome, current(url, ids[2]).failure_kind) == ("fail", "bad_arguments")
    assert "Trajectory " + str(ids[3]) in texts(at)
    at.button(key="lq-back").click().run()  # back to the one just labelled, to change it
    assert "Trajectory " + str(ids[2]) in texts(at)
    at.button(key="lq-unknown").click().run()
    assert current(url, ids[2]).outcome == "unknown"
    assert len(S.label_history(ids[2], store=url)) == 2


def test_label_queue_only_failures_and_blind(seeded):
    url = seeded["url"]
    first_fail = S.list_trajectories(run_id=seeded["run"], outcome="fail", sort="id", descending=False, store=url).rows[
        0
    ]
    at = open_page("label", run=seeded["run"], fails="true", blind="true")
    shown = texts(at)
    assert f"Trajectory {first_fail.id}" in shown
    assert "graded" not in shown  # blind hides the automatic grade
    at = open_page("label", run=seeded["run"], fails="true")
    assert "graded fail" in texts(at)


def test_label_queue_empty_says_done(store_url):
    fill_run(store_url, 1, name="one")
    at = open_page("label", annotator="ana")
    at.button(key="lq-fail").click().run()
    assert any("Nothing left to label" in s.value for s in at.success)


def test_taxonomy_edit_changes_the_keys(seeded):
    S.save_kind("tool_timeout", "the tool took too long", hotkey="1", store=seeded["url"])
    at = open_page("label", run=seeded["run"], annotator="ana")
    labels = {b.key: b.label for b in at.button if b.key and b.key.startswith("lq-mode-")}
    assert labels["lq-mode-1"] == "1 · tool\\_timeout" and labels["lq-mode-2"] == "2 · misread\\_observation"
    at.button(key="lq-mode-1").click().run()
    assert current(seeded["url"], seeded["ids"][0]).failure_kind == "tool_timeout"


# ------------------------------------------------------------------ runs


def test_new_run_enqueues_the_demo_spec_on_a_suite(store_url):
    at = open_page("new_run")
    assert at.selectbox(key="spec").value == "evalrx-tiny"
    assert at.radio(key="backend").value == "hf_local"
    at.number_input(key="limit").set_value(3)
    at.number_input(key="max_new_tokens").set_value(48)
    at.text_input(key="name").set_value("smoke")
    at.button(key="launch").click().run()
    assert not at.exception
    (run,) = S.list_runs(store=store_url)
    assert (run.name, run.n_cases, run.status, run.spec_key, run.backend) == (
        "smoke",
        3,
        "queued",
        "evalrx-tiny",
        "hf_local",
    )
    assert run.config["suite"] == "demo/arithmetic_easy" and run.config["runtime"]["max_new_tokens"] == 48
    assert run.config["tools"] == ["calculator", "lookup"]


def test_new_run_with_repeated_sampled_attempts(store_url):
    at = open_page("new_run")
    at.number_input(key="limit").set_value(2)
    at.number_input(key="repeats").set_value(3)
    at.number_input(key="temperature").set_value(0.7)
    at.number_input(key="seed").set_value(11)
    at.button(key="launch").click().run()
    assert not at.exception
    (run,) = S.list_runs(store=store_url)
    assert run.n_cases == 6  # two cases, three attempts each
    assert (run.config["repeats"], run.config["seed"], run.config["runtime"]["temperature"]) == (3, 11, 0.7)


def test_new_run_api_key_never_reaches_the_store(store_url, monkeypatch):
    import components.launch as launch

    started = []
    monkeypatch.setattr(launch, "start_api_worker", lambda store, run_id, key, log: started.append((run_id, key)) or 1)
    at = open_page("new_run")
    at.selectbox(key="spec").set_value("gpt-4o-mini").run()
    assert at.radio(key="backend").options == ["api"]
    at.text_input(key="base_url").set_value("http://127.0.0.1:9/v1")
    at.text_input(key="api_key").set_value("sk-very-secret-123")
    at.number_input(key="limit").set_value(1)
    at.button(key="launch").click().run()
    (run,) = S.list_runs(store=store_url)
    assert run.backend == "api" and run.config["base_url"] == "http://127.0.0.1:9/v1"
    assert started == [(run.id, "sk-very-secret-123")]  # a worker for this run alone holds the key
    from evalrx.store import schema as t

    with S.connect(store_url).read() as s:
        assert s.get(t.Run, run.id).key_bound  # no other worker claims it
    db = Path(store_url[len("sqlite:///") :])
    blob = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    assert b"sk-very-secret-123" not in blob


def test_bad_case_file_is_explained_before_enqueueing():
    sys.path.insert(0, str(ROOT / "app"))
    from components.launch import cases_from_upload

    from evalrx.suites import CaseFileError

    with pytest.raises(CaseFileError) as err:
        cases_from_upload("mine.jsonl", b'{"prompt": "ok", "expected": 1}\n{"prompt": \n')
    assert err.value.line == 2 and "bad JSON" in err.value.problem
    cases = cases_from_upload("mine.jsonl", b'{"prompt": "2+2?", "expected": 4}\n')
    assert cases[0].inputs.prompt == "2+2?"


def test_runs_page_lists_progress_and_cancels_a_queued_run(seeded):
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import enqueue_run

    url = seeded["url"]
    rid = enqueue_run(
        RunConfig(model=ModelConfig("evalrx-tiny"), tools=["calculator"], suite="demo/arithmetic_easy"), store=url
    )
    at = open_page("runs")
    assert "In progress" in [s.value for s in at.subheader]
    table = at.dataframe[0].value
    assert set(table["id"]) == {rid, seeded["run"], seeded["xss_run"]}
    at.button(key=f"cancel-{rid}").click().run()
    assert S.get_run(rid, store=url).status == "cancelled"
    assert "In progress" not in [s.value for s in at.subheader]


def test_runs_page_details_show_stats(seeded):
    at = open_page("runs", run=seeded["run"])
    metrics = {m.label: m.value for m in at.metric}
    stats = S.run_stats(seeded["run"], store=seeded["url"])
    assert metrics["success"] == f"{100 * stats.success_rate:.1f}%"
    assert metrics["cases"] == "12/12"


def test_runs_page_shows_a_dash_for_times_and_tokens_an_import_did_not_record(store_url):
    from appdata import fill_run

    from evalrx.store import schema as t

    rid, ids = fill_run(store_url, 2, name="imported")
    with S.connect(store_url).write() as s:  # what an import without timings or token counts stores
        for tid in ids:
            s.get(t.Trajectory, tid).latency_ms = 0.0
            row = s.get(t.Trajectory, tid)
            row.prompt_tokens = row.completion_tokens = 0
    at = open_page("runs", run=rid)
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["latency p50"], metrics["latency p95"], metrics["tokens"]) == ("—", "—", "—")
    (table,) = [d.value for d in at.dataframe if "p50 ms" in d.value.columns]
    assert table["p50 ms"].isna().all() and table["tokens"].isna().all()  # shown as the table's "-"


def test_dashboard_counts_labels_over_grades(seeded):
    url = seeded["url"]
    passed = S.list_trajectories(run_id=seeded["run"], outcome="pass", store=url).rows[0].id
    S.set_label(passed, "fail", failure_kind="wrong_tool", store=url)  # a human overrides the grader
    at = open_page("dashboard", run=seeded["run"])
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["fail"].startswith("7 ") and metrics["pass"].startswith("5 ")
    assert len(at.get("vega_lite_chart")) >= 3


def test_dashboard_shows_an_old_labelled_run_beside_the_newest_ten(seeded):
    url = seeded["url"]
    failed = S.list_trajectories(run_id=seeded["run"], outcome="fail", store=url).rows[0].id
    S.set_label(failed, "fail", failure_kind="wrong_tool", store=url)  # the only labelled run is the oldest
    newer = [fill_run(url, 1, seed=i, name=f"newer {i}")[0] for i in range(10)]
    at = open_page("dashboard")
    # The ten newest runs and the labelled one; an older unlabelled run stays out.
    assert set(at.multiselect(key="dash-runs").value) == {*newer, seeded["run"]}
    assert "No failure kinds labelled" not in texts(at)
    # Left out by hand, it is named with the way back.
    at.multiselect(key="dash-runs").set_value(newer).run()
    assert f"labelled in run {seeded['run']} (1): add it" in texts(at)


def test_dashboard_counts_failures_by_diagnosed_kind_with_links_to_the_list(seeded):
    from evalrx.runner import rediagnose

    url, run = seeded["url"], seeded["run"]
    rediagnose(run_id=run, store=url)
    counts = S.failure_kind_counts(run, store=url)
    assert sum(counts.values()) == 6  # every graded failure of the seeded run has a diagnosis
    at = open_page("dashboard", run=run)
    table = next(d.value for d in at.dataframe if "kind" in d.value.columns)
    assert dict(zip(table["kind"], table["failures"])) == counts
    assert all(link == f"trajectories?run={run}&kind={k}" for link, k in zip(table["open"], table["kind"]))
    at = open_page("trajectories", run=run, kind=next(iter(counts)))
    assert f"**{counts[next(iter(counts))]} trajectories**" in texts(at)


def test_long_output_is_collapsed_and_errors_shown(store_url):
    from evalrx.core import FailureCase, Inputs, Step, StepRole, Trajectory
    from evalrx.store import runs
    from evalrx.store.queries import pending_cases

    long_text = "\n".join(f"line {i} " + "x" * 80 for i in range(400))
    case = FailureCase(inputs=Inputs(prompt="long"), id="long-1")
    traj = Trajectory(
        sample_id="long-1",
        goal="long",
        steps=[
            Step(0, StepRole.USER, "long"),
            Step(1, StepRole.ACTOR, long_text, span={"latency_ms": 5.0, "turn": 1}),
        ],
        metrics={"terminated": "error", "error": "RuntimeError: CUDA out of memory"},
    )
    store = S.connect(store_url)
    with store.write() as s:
        rid = runs.create_run(s, name="long", cases=[case], status="done")
        ((_, cid, _),) = pending_cases(s, rid)
        tid = runs.save_trajectory(s, rid, cid, traj)
    at = open_page("trajectory", id=tid)
    codes = pre_texts(at)
    assert long_text not in codes[:3]  # not inline ...
    assert any(c.endswith("\n…") and len(c) < 2000 for c in codes)
    assert long_text in codes  # ... but one click away
    assert any(e.label == f"Show all {len(long_text):,} characters" for e in at.expander)
    assert "RuntimeError: CUDA out of memory" in codes


def test_new_run_api_call_budget_reaches_the_run_config(store_url, monkeypatch):
    import components.launch as launch

    monkeypatch.setattr(launch, "start_api_worker", lambda store, run_id, key, log: 1)
    at = open_page("new_run")
    assert not [n for n in at.number_input if n.key in ("timeout", "retries")]  # local backend: no such fields
    at.selectbox(key="spec").set_value("gpt-4o-mini").run()
    assert at.number_input(key="timeout").value == 60.0 and at.number_input(key="retries").value == 3
    at.number_input(key="timeout").set_value(12.5)
    at.number_input(key="retries").set_value(1)
    at.number_input(key="limit").set_value(1)
    at.button(key="launch").click().run()
    assert not at.exception
    (run,) = S.list_runs(store=store_url)
    assert run.config["runtime"] == {"timeout": 12.5, "max_retries": 1}  # the settings off their defaults


def test_runtime_settings_check_the_call_budget():
    sys.path.insert(0, str(ROOT / "app"))
    from components.launch import runtime_settings

    assert runtime_settings(max_new_tokens=9, backend="hf_local", timeout=0, retries=99) == {"max_new_tokens": 9}
    with pytest.raises(ValueError, match="timeout"):
        runtime_settings(max_new_tokens=9, backend="api", timeout=0, retries=1)
    with pytest.raises(ValueError, match="max_retries"):
        runtime_settings(max_new_tokens=9, backend="api", timeout=5, retries=11)


def test_the_app_is_private_by_default_and_refuses_a_network_address_without_a_login(store_url, monkeypatch):
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    ENV_OPEN = "EVALRX_ALLOW_UNAUTHENTICATED"
    assert config.get_option("server.address") == "127.0.0.1"  # .streamlit/config.toml binds loopback
    monkeypatch.delenv(ENV_OPEN, raising=False)
    config.set_option("server.address", "0.0.0.0")
    try:
        at = AppTest.from_file(MAIN, default_timeout=60)
        at.run()
        assert [e.value for e in at.error] and "served on 0.0.0.0 without a login" in at.error[0].value
        assert not at.title  # nothing of the store is shown
        monkeypatch.setenv(ENV_OPEN, "1")  # e.g. behind an authenticating proxy
        at.run()
        assert not at.error and at.title
    finally:
        config.set_option("server.address", "127.0.0.1")


def test_a_tool_marked_on_the_trajectory_page_is_what_the_diagnosis_reads(seeded):
    tid = seeded["ids"][1]
    detail = S.get_trajectory(tid, store=seeded["url"])
    name = next(c.name for s in detail.trajectory.steps for c in s.tool_calls)
    at = open_page("trajectory", id=tid)
    assert any(m.value.startswith(f"**{name}** · ") for m in at.markdown)
    box = next(b for b in at.selectbox if b.label == f"Mark {name}")
    assert box.value == "as the tool says"
    box.set_value("write").run()
    assert not at.exception
    assert S.tool_marks(store=seeded["url"]) == {name: "write"}
    assert any(m.value.startswith(f"**{name}** · changes state · a person marked it write") for m in at.markdown)
    next(b for b in at.selectbox if b.label == f"Mark {name}").set_value("as the tool says").run()
    assert S.tool_marks(store=seeded["url"]) == {}


def test_a_bad_tool_mark_is_one_line():
    with pytest.raises(ValueError, match="marked 'read' or 'write'"):
        S.mark_tool("lookup", "sometimes", store="sqlite:///:memory:")


def test_the_card_shows_each_sources_proposal_with_its_agreement_with_people(store_url, tmp_path):
    from evalrx.interop import import_file

    def call(i, name, **args):
        return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

    row = {
        "id": "loan-1",
        "outcome": 0,
        "metadata": {"reference_calls": [{"name": "renew_loan", "arguments": {"loan_id": "L-1", "weeks": 2}}]},
        "messages": [
            {"role": "user", "content": "Renew loan L-1 for two weeks."},
            {"role": "assistant", "content": None, "tool_calls": [call(1, "renew_loan", loan_id="L-1", weeks=3)]},
            {"role": "tool", "tool_call_id": "c1", "name": "renew_loan", "content": "Error: at most 2"},
            {"role": "assistant", "content": "Sorry, I could not renew it."},
            {"role": "user", "content": "Renew it for 2 weeks then."},
            {"role": "assistant", "content": None, "tool_calls": [call(2, "renew_loan", loan_id="L-1", weeks=5)]},
            {"role": "tool", "tool_call_id": "c2", "name": "renew_loan", "content": '{"ok": true}'},
            {"role": "assistant", "content": "Done."},
        ],
    }
    path = tmp_path / "loans.jsonl"
    path.write_text(json.dumps(row) + "\n")
    run_id = import_file(path, store=store_url).run_ids[0]
    (tid,) = [r.id for r in S.list_trajectories(run_id=run_id, store=store_url).rows]
    at = open_page("trajectory", id=tid)
    shown = texts(at)
    assert "**Each source's proposal**" in shown
    assert "reference: **bad\\_arguments** · step **5**" in shown
    assert "heuristic: **bad\\_arguments** · step **1**" in shown
    assert "no people's labels for this suite yet" in shown.replace("\\", "")
    S.set_label(tid, "fail", failure_kind="bad_arguments", first_wrong_step=5, annotator="ana", store=store_url)
    at = open_page("trajectory", id=tid)
    assert "agrees with people on the kind 100%, on the step 100% (n=1)" in texts(at).replace("\\", "")


@pytest.mark.parametrize(
    "view, query",
    [
        ("trajectory", {"id": "²"}),
        ("trajectories", {"run": "²"}),
        ("dashboard", {"run": "²"}),
        ("compare", {"a": "²", "b": "³"}),
        ("label", {"run": "²"}),
        ("adjudicate", {"run": "²"}),
    ],
)
def test_a_superscript_digit_in_the_url_is_no_id(store_url, view, query):
    fill_run(store_url, 2, name="one")
    open_page(view, **query)  # "²".isdigit() is True and int("²") raises: the pages read ids with url_int


def test_the_import_page_says_the_upload_size_limit_set_in_the_apps_config(store_url):
    import tomllib

    config = tomllib.loads((Path(MAIN).parents[1] / ".streamlit" / "config.toml").read_text())
    limit = config["server"]["maxUploadSize"]
    at = open_page("import_data")
    assert f"Up to {limit} MB a file; import a larger one with `evalrx import FILE`" in texts(at)


def test_a_label_the_store_cannot_write_is_an_error_box_and_changes_nothing(seeded, monkeypatch):
    """The store opened read-only (SQLite's `file:...?mode=ro` URI: chmod does not stop root in CI)."""
    tid, url = seeded["ids"][2], seeded["url"]
    before = S.label_history(tid, store=url)
    read_only = f"sqlite:///file:{url.removeprefix('sqlite:///')}?mode=ro&uri=true"
    monkeypatch.setenv("EVALRX_DATABASE_URL", read_only)
    at = open_page("trajectory", id=tid)
    at.text_input(key="annotator").set_value("ana")
    at.button(key="tl-pass").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (error,) = [e.value for e in at.error]
    assert error.startswith("Not saved: the store at ") and "cannot be written" in error and "\n" not in error
    assert S.label_history(tid, store=url) == before
    S.forget(read_only)

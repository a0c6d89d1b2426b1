"""The app's pure-Python pieces: escaping, collapsing, filters, the diagnosis card, chart rows, worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "app"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from apppages import store_url  # noqa: E402,F401  (a fixture)
from components.diagnosis_card import diagnosis_view  # noqa: E402
from components.filters import carry, describe, neighbours, sort_args, store_filters  # noqa: E402
from components.labelling import proposal_of, shortcut_rows  # noqa: E402
from components.safe import collapse, md_escape  # noqa: E402
from components.viewmodel import actor_steps, grade_text, step_views, token_rows, waterfall_rows  # noqa: E402

import evalrx.store as S  # noqa: E402
from evalrx.core import Step, StepRole, Trajectory  # noqa: E402


def test_md_escape_leaves_no_markup():
    hostile = "<img src=x onerror=alert(1)> [a](javascript:x) :red[r] **b** $x$ `c`\nnext"
    out = md_escape(hostile)
    assert "\n" not in out
    for i, ch in enumerate(out):  # every punctuation character is preceded by a backslash
        if ch in "<>[]():*$`":
            assert out[i - 1] == "\\", (i, out)
    assert out.replace("\\", "") == hostile.replace("\n", " ")


def test_collapse_cuts_long_text_only():
    assert collapse("short") == ("short", False)
    head, cut = collapse("x" * 5000)
    assert cut and len(head) == 1500
    head, cut = collapse("\n".join(str(i) for i in range(100)))
    assert cut and head.count("\n") == 24


def test_filters_round_trip_through_the_url():
    params = {
        "run": "3",
        "outcome": "fail",
        "label": "unlabelled",
        "mode": "wrong_tool",
        "term": "max_turns",
        "tool": "lookup",
        "kind": "repeated_calls",
        "margin": "0.5",
        "q": "timeout",
        "sort": "latency",
        "asc": True,
        "page": "4",
        "id": "9",
    }
    assert store_filters(params) == {
        "run_id": 3,
        "outcome": "fail",
        "label": "none",
        "label_kind": "wrong_tool",
        "terminated": "max_turns",
        "tool": "lookup",
        "diagnosis_kind": "repeated_calls",
        "max_margin": 0.5,
        "text": "timeout",
    }
    assert sort_args(params) == ("latency_ms", False)
    kept = carry(params)
    assert "page" not in kept and "id" not in kept and kept["asc"] == "true"
    assert store_filters(kept) == store_filters(params) and sort_args(kept) == sort_args(params)
    assert sort_args({}) == ("id", True) and store_filters({"outcome": "bogus", "run": "x"}) == {}
    assert "graded fail" in describe(params) and "sorted by latency ↑" in describe(params)


def test_neighbours_match_the_list_order(tmp_path):
    from appdata import fill_run

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    fill_run(url, 30, seed=2)
    store = S.connect(url)
    for params in ({"sort": "latency"}, {"sort": "steps", "asc": "true"}, {"outcome": "fail"}, {}):
        sort, desc = sort_args(params)
        rows = S.list_trajectories(sort=sort, descending=desc, limit=100, store=store, **store_filters(params)).rows
        for i, row in enumerate(rows):
            prev_id, next_id = neighbours(row, params, store=store)
            assert prev_id == (rows[i - 1].id if i else None)
            assert next_id == (rows[i + 1].id if i + 1 < len(rows) else None)
    S.forget(url)


def test_diagnosis_card_sets_expected_against_actual_and_answer_against_observation():
    from evalrx.core import Diagnosis

    d = Diagnosis(
        "bad_arguments",
        1,
        {
            "text": "calculator got '50 - 5'",
            "expected": {"name": "calculator", "args": {"expression": "50 - 9"}},
            "actual": {"name": "calculator", "args": {"expression": "50 - 5"}},
            "diff": [{"arg": "expression", "expected": "50 - 9", "actual": "50 - 5"}],
        },
        0.95,
        "reference",
    )
    view = diagnosis_view(d, {"bad_arguments": "right tool, wrong arguments"})
    assert (view["kind"], view["step"], view["definition"]) == ("bad_arguments", 1, "right tool, wrong arguments")
    assert view["pairs"][0][0] == "Expected call" and view["pairs"][0][3]["args"]["expression"] == "50 - 5"
    assert view["diff"] == [{"arg": "expression", "expected": "50 - 9", "actual": "50 - 5"}]
    ignored = diagnosis_view(
        Diagnosis("ignored_observation", 3, {"answer": "24", "observation": "42"}, 0.6, "heuristic"), {}
    )
    assert ignored["pairs"] == [("Final answer", "24", "Observation it contradicts", "42")]


def test_the_source_line_says_what_the_case_gave_the_diagnosis_to_compare_with():
    from evalrx.core import Diagnosis

    rules = Diagnosis("ignored_tool_error", 3, {"text": "answered as if the call had succeeded"}, 0.6, "heuristic")
    calls = {"prompt": "refund", "meta": {"reference_calls": [{"name": "refund", "arguments": {}}]}}
    target = {"prompt": "Find missing", "expected": "7", "meta": {}}  # an Inspect sample's target
    talk = {"prompt": "hi", "meta": {"turns": [{"prompt": "hi", "expected": 4}, {"prompt": "and?", "expected": 5}]}}

    def line(d, case, outcome="fail"):
        return diagnosis_view(d, {}, case=case, outcome=outcome)["source_text"]

    assert line(rules, {"prompt": "hi", "meta": {}}) == "model-free rules on the steps (no reference)"
    assert "reference calls were compared and show no divergence" in line(rules, calls)
    assert "expected answer grades the run but names no step" in line(rules, target)
    assert "no reference" not in line(rules, target, "unknown") and "not compared" in line(rules, calls, "unknown")
    turn = Diagnosis(
        "wrong_final_answer", 7, {"user_turn": 1, "answer": "3", "expected_answer": "5"}, 0.95, "reference"
    )
    view = diagnosis_view(turn, {}, case=talk, outcome="fail")
    assert view["source_text"] == "compared with each user turn's expected answer"
    assert view["pairs"] == [("Answer (turn 2)", "3", "Expected answer (turn 2)", "5")]


def test_the_label_form_proposes_model_failures_only_and_lists_every_key():
    from types import SimpleNamespace

    from evalrx.core import Diagnosis

    def detail(*kinds):
        return SimpleNamespace(diagnoses=[Diagnosis(k, 2, {}, 0.5, "heuristic") for k in kinds])

    assert proposal_of(detail("wrong_tool", "bad_arguments")).kind == "wrong_tool"
    assert proposal_of(detail("infra_error")) is None and proposal_of(detail()) is None
    keys = [r["key"] for r in shortcut_rows()]
    assert {"Enter", "P", "F", "U", "1–9", "W", "?"} <= set(keys)


def _traj() -> Trajectory:
    return Trajectory(
        sample_id="s",
        goal="g",
        steps=[
            Step(0, StepRole.USER, "g"),
            Step(
                1,
                StepRole.ACTOR,
                "<tool_call>..",
                tool_calls=[{"name": "calculator", "args": {"expression": "1+1"}}],
                span={"latency_ms": 100.0, "prompt_tokens": 50, "completion_tokens": 10, "turn": 1},
            ),
            Step(
                2,
                StepRole.TOOL,
                "calculator",
                observation={"text": "2", "n_images": 1},
                span={"latency_ms": 0.5, "repeat_blocked": True},
            ),
            Step(3, StepRole.ACTOR, "bad", parse_error="Expecting value", span={"latency_ms": 40.0, "turn": 2}),
            Step(4, StepRole.TOOL, "", observation="fix your call", span={"parse_error": True}),
            Step(
                5,
                StepRole.ACTOR,
                "2",
                span={"latency_ms": 20.0, "turn": 3, "forced_final": True, "prompt_tokens": 90, "completion_tokens": 1},
            ),
        ],
    )


def test_step_views_carry_calls_observations_and_badges():
    views = step_views(_traj())
    assert [v.role for v in views] == ["user", "actor", "tool", "actor", "tool", "actor"]
    assert views[1].calls == [("calculator", {"expression": "1+1"})] and views[1].title == "Model, turn 1"
    assert (views[2].observation, views[2].n_pictures, views[2].badges) == ("2", 1, ["repeat blocked"])
    assert views[3].badges == ["parse error"] and views[3].parse_error == "Expecting value"
    assert views[4].title == "Feedback to the model" and views[4].badges == ["parse error"]
    assert views[5].badges == ["forced final answer"]
    assert actor_steps(_traj()) == [1, 3, 5]


def test_a_conversations_user_turns_carry_their_expected_answer_and_grade():
    from types import SimpleNamespace

    case = {
        "prompt": "a",
        "meta": {"turns": [{"prompt": "a", "expected": 4}, {"prompt": "b"}, {"prompt": "c", "expected": 9}]},
    }
    steps = [
        Step(0, StepRole.USER, "a", span={"user_turn": 0}),
        Step(1, StepRole.ACTOR, "It is 4.", span={"user_turn": 0}),
        Step(2, StepRole.USER, "b", span={"user_turn": 1}),
        Step(3, StepRole.ACTOR, "Fine.", span={"user_turn": 1}),
        Step(4, StepRole.USER, "c", span={"user_turn": 2}),
        Step(5, StepRole.ACTOR, "It is 8.", span={"user_turn": 2}),
    ]
    traj = Trajectory("talk", "a", steps=steps, final_answer="It is 8.")
    users = [v for v in step_views(traj, case) if v.role == "user"]
    assert [(v.title, v.expected, v.turn_grade) for v in users] == [
        ("User, turn 1", "4", "pass"),
        ("User, turn 2", None, None),  # a turn that says no expected answer is not graded
        ("User, turn 3", "9", "fail"),
    ]
    assert all(v.expected is None for v in step_views(traj)), "without its case a trajectory shows no grades"
    row = SimpleNamespace(outcome="fail", grade_turn=2)
    assert grade_text(row) == "fail (turn 3)" and grade_text(SimpleNamespace(outcome="fail", grade_turn=None)) == "fail"


def test_waterfall_lays_steps_end_to_end():
    rows = waterfall_rows(_traj())
    assert [r["step"] for r in rows] == [1, 2, 3, 5]  # the user turn and the untimed feedback are not timed
    assert [(r["start_ms"], r["end_ms"]) for r in rows] == [
        (0.0, 100.0),
        (100.0, 100.5),
        (100.5, 140.5),
        (140.5, 160.5),
    ]
    assert [r["kind"] for r in rows] == ["model", "tool", "model", "model"]
    assert rows[0]["label"] == "1 model → calculator" and rows[2]["label"] == "3 model (parse error)"
    assert token_rows(_traj()) == [
        {"step": 1, "turn": 1, "kind": "prompt", "tokens": 50},
        {"step": 1, "turn": 1, "kind": "completion", "tokens": 10},
        {"step": 5, "turn": 3, "kind": "prompt", "tokens": 90},
        {"step": 5, "turn": 3, "kind": "completion", "tokens": 1},
    ]


def test_worker_status_when_turned_off(tmp_path, monkeypatch):
    from components.worker import ensure_local_worker

    url = f"sqlite:///{tmp_path / 'w.sqlite'}"
    S.upgrade(url)
    monkeypatch.setenv("EVALRX_NO_LOCAL_WORKER", "1")
    status = ensure_local_worker(S.connect(url))
    assert status.state == "disabled" and status.workers == [] and status.pid is None
    S.forget(url)


_ENSURE = """
import sys, time
sys.path.insert(0, {app!r})
import evalrx.store as S
from components.worker import ensure_local_worker
time.sleep(max(0.0, {start} - time.time()))  # all callers at once
st = ensure_local_worker(S.connect({url!r}))
print("STATE", st.state, st.pid, flush=True)
sys.stdin.read()  # an app process lives on until the test ends it: its worker follows it
"""


def test_concurrent_app_processes_start_one_worker(tmp_path, monkeypatch):
    """Four app processes check at the same moment: exactly one starts a worker, which then heartbeats
    and stops when the app process that started it exits."""
    from evalrx.runner.parent_watch import pid_alive

    url = f"sqlite:///{tmp_path / 'w.sqlite'}"
    S.upgrade(url)
    monkeypatch.delenv("EVALRX_NO_LOCAL_WORKER", raising=False)
    start = time.time() + 3.0
    code = _ENSURE.format(app=str(ROOT / "app"), url=url, start=start)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        for _ in range(4)
    ]
    started: list = []
    try:
        outs = [p.stdout.readline() for p in procs]  # "" when a process died before it answered
        states = [line.split()[1:] for line in outs if line.startswith("STATE")]
        started = [int(pid) for state, pid in states if state == "started"]
        assert len(states) == 4 and len(started) == 1, outs
        assert sorted(s for s, _ in states) == ["alive", "alive", "alive", "started"]
        deadline = time.time() + 90
        while time.time() < deadline:  # the worker replaces the pre-registered row's heartbeat with its own
            alive = S.alive_workers(store=url)
            if any(w["pid"] == started[0] and w["status"] in ("idle", "busy") for w in alive):
                break
            time.sleep(0.5)
        assert [w["pid"] for w in S.alive_workers(store=url)] == started
        starter = next(p for p, line in zip(procs, outs) if line.split()[1] == "started")
        starter.stdin.close()
        starter.wait(30)
        deadline = time.time() + 15
        while pid_alive(started[0]) and time.time() < deadline:
            time.sleep(0.2)
        assert not pid_alive(started[0]), "the worker outlived the app process that started it"
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(30)
        for pid in started:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        S.forget(url)


# ---------------------------------------------------------------- white-box panels
#
# The panels get what the Trajectory page gets: real result objects, saved as the worker saves
# them and read back with `load_analyses`, then decoded by the panels' own `decode`.

_VOCAB = {"1": " calc", "2": " look", "3": "{", "4": " London", "5": "\n"}


@pytest.fixture(scope="module")
def analysis_store(tmp_path_factory):
    """A store with one trajectory to keep analysis results on: (url, trajectory id)."""
    from appdata import fill_run

    url = f"sqlite:///{tmp_path_factory.mktemp('analyses') / 'a.sqlite'}"
    S.upgrade(url)
    _, ids = fill_run(url, 1)
    yield url, ids[0]
    S.forget(url)


def _stored(analysis_store, result) -> dict:
    """`result` stored as the worker stores it, and its record as the Trajectory page loads it."""
    from evalrx.runner.analysis import AnalysisRecord
    from evalrx.store.analyses import replace_analyses

    url, tid = analysis_store
    name = result.meta["analyzer"]
    with S.connect(url).write() as s:
        replace_analyses(s, tid, [AnalysisRecord(name, arrays=result.to_arrays(), meta=dict(result.meta))])
    (rec,) = S.load_analyses(tid, name, store=url)
    return rec


def _decoded(analysis_store, result):
    from components.analysis_panels import decode

    return decode(_stored(analysis_store, result))


def _lens_result(n_layers: int, vocab: dict = _VOCAB):
    """A lens result of two decision tokens at step 3 (and one at step 5) over `n_layers` rows."""
    from evalrx.analyzers import LensResult

    positions = 3
    topk_ids = np.zeros((n_layers, positions, 3), dtype=np.int32)
    topk_lp = np.log(np.tile([0.6, 0.3, 0.1], (n_layers, positions, 1))).astype(np.float32)
    topk_ids[:] = [2, 1, 3]  # early layers: the alternative " look" leads, the chosen " calc" second
    topk_ids[-1] = [1, 2, 3]  # the output layer picks " calc"; " look" is then the top alternative
    per_layer = np.zeros((n_layers, positions), dtype=np.float32)
    labels = {
        "label_step": [3, 3, 5],
        "label_kind": [0, 1, 0],
        "label_call": [0, 0, 0],
        "label_piece": [0, 0, 0],
        "label_pass": [0, 0, 0],
        "label_token_index": [10, 11, 20],
        "label_arg": ["", "x", ""],
    }
    return LensResult(
        positions=[9, 10, 19],
        token_ids=[3, 1, 3],
        target_ids=[1, 1, 1],
        target_is_actual=[True] * positions,
        topk_ids=topk_ids,
        topk_logprobs=topk_lp,
        entropy=per_layer,
        target_logprob=np.log(np.full((n_layers, positions), 0.3, dtype=np.float32)),
        target_rank=np.ones((n_layers, positions), dtype=np.int32),
        hidden_norm=per_layer,
        labels=labels,
        info={"model": "test"},
        vocab=vocab,
    )


def test_panels_decode_stored_records_into_their_result_classes(analysis_store):
    from components.analysis_panels import panel_results

    from evalrx.analyzers import LensResult, ToolDecisionResult

    lens, decision = _stored(analysis_store, _lens_result(3)), _stored(analysis_store, _decision_result())
    failed = {"analyzer": "attention", "meta": {"error": "RuntimeError: no eager attention"}, "arrays": {}}
    results, unreadable = panel_results({"tool_decision": decision, "logit_lens": lens, "attention": failed})
    assert list(results) == ["logit_lens", "tool_decision"] and unreadable == {}  # panel order; no failed one
    assert isinstance(results["logit_lens"], LensResult) and isinstance(results["tool_decision"], ToolDecisionResult)
    swapped = {"logit_lens": dict(decision, analyzer="logit_lens"), "attention": dict(lens, arrays={})}
    results, unreadable = panel_results(swapped)
    assert results == {} and "ToolDecisionResult, not a LensResult" in unreadable["logit_lens"]
    assert unreadable["attention"].startswith("KeyError")  # the lens arrays it needs are gone


def test_lens_rows_carry_the_top_alternative_to_the_chosen_token(analysis_store):
    from evalrx.analyzers import lens_rows

    rows = lens_rows(_decoded(analysis_store, _lens_result(5)), 3)
    assert len(rows) == 2 * 5 and {r["order"] for r in rows} == {0, 1}
    assert {r["kind"] for r in rows} == {"tool_name", "arg_value"}
    assert all(r["chosen"] == "·calc" and r["alternative"] == "·look" for r in rows)
    assert all(r["alternative"] != r["chosen"] for r in rows)
    early = next(r for r in rows if r["layer"] == 0)
    assert early["p_alternative"] == pytest.approx(0.6)  # above p(chosen): the lens prefers the alternative
    last = next(r for r in rows if r["layer"] == 4)
    assert last["p_alternative"] == pytest.approx(0.3) and last["p_chosen"] == pytest.approx(0.3)


def test_lens_heatmap_height_grows_with_the_layer_count_and_labels_stay_short(analysis_store):
    from components.analysis_panels import lens_chart

    from evalrx.analyzers import lens_rows
    from evalrx.analyzers.panel_rows import TICK_CHARS

    long_name = _lens_result(5, vocab=dict(_VOCAB, **{"1": " a_very_long_tool_name_that_would_eat_the_plot"}))
    small, large = (
        lens_chart(lens_rows(_decoded(analysis_store, r), 3)).to_dict() for r in (long_name, _lens_result(33))
    )
    assert small["height"] >= 100 and large["height"] > small["height"] + 200
    # Labels are drawn below the plot, not squeezed into its height (Streamlit's default "fit").
    assert small["autosize"]["type"] == "fit-x"
    ticks = small["data"]["values"]
    assert all(len(r["token"]) <= len("00 ") + TICK_CHARS for r in ticks)
    assert any("a_very_long_tool_name" in r["label"] for r in ticks)  # the full text is in the tooltip
    tooltip = {t["field"] for t in small["encoding"]["tooltip"]}
    assert {"label", "chosen", "p_chosen", "alternative", "p_alternative"} <= tooltip


def test_a_long_turns_lens_labels_stand_upright_and_leave_out_those_that_would_overlap():
    from components.analysis_panels import LENS_ALL_LABELS, lens_chart

    def axis(n_tokens: int) -> dict:
        rows = [
            {"layer": layer, "order": i, "token": f"{i:02d} tok{i}", "label": f"{i:02d} tok{i}", "p_chosen": 0.5}
            for i in range(n_tokens)
            for layer in range(2)
        ]
        return lens_chart(rows).to_dict()["encoding"]["x"]["axis"]

    short, long = axis(LENS_ALL_LABELS), axis(80)
    assert (short["labelAngle"], short["labelOverlap"]) == (-45, False)  # every label drawn
    assert (long["labelAngle"], long["labelOverlap"]) == (-90, "greedy")  # not drawn over each other


def test_case_ticks_tell_cases_apart_when_their_ids_share_a_long_start():
    from components.runlevel_view import case_rate_rows, case_ticks, common_stem
    from components.safe import counted

    names = [f"two_step_paraphrase_distractor-{i:03d}" for i in (7, 12, 30)]
    assert common_stem(names) == "two_step_paraphrase_distractor-"
    assert case_ticks(names) == ["007", "012", "030"]
    long = [f"shared/{'x' * 30}{i}" for i in range(3)]  # differ only at their very end
    ticks = case_ticks(long)
    assert len(set(ticks)) == 3 and all(len(t) <= 18 and t.endswith(str(i)) for i, t in enumerate(ticks))
    assert case_ticks(["only-one"]) == ["only-one"]

    class Rate:
        def __init__(self, name):
            self.sample_id, self.rate, self.passes, self.n = name, 0.5, 1, 2

    class Rel:
        case_rates = [Rate(n) for n in names]

    assert [r["tick"] for r in case_rate_rows(Rel())] == ["007", "012", "030"]
    assert (counted(1, "case"), counted(2, "case"), counted(1, "trajectory", "trajectories")) == (
        "1 case",
        "2 cases",
        "1 trajectory",
    )


def _decision_result(tool_candidates: tuple = ("calculator", "lookup", "search")):
    from evalrx.analyzers import RUNNER_UP, ToolDecisionResult

    layers = 3
    lp = np.full((2, layers, 3), np.nan, dtype=np.float32)
    lp[0, :, 0] = np.log([0.2, 0.5, 0.6])  # calculator, chosen
    lp[0, :, 1] = np.log([0.7, 0.4, 0.6 / np.exp(0.42)])  # lookup, the strongest alternative at the output
    lp[0, :, 2] = np.log([0.1, 0.1, 0.05])  # search
    lp[1, :, 0] = np.log([0.5, 0.8, 0.9])  # "<b>Paris</b>", chosen (no enum)
    lp[1, :, 1] = np.log([0.4, 0.1, 0.05])  # the best other token
    margin = np.zeros((2, layers), dtype=np.float32)
    margin[0] = lp[0, :, 0] - np.nanmax(lp[0, :, 1:], axis=1)
    margin[1] = lp[1, :, 0] - lp[1, :, 1]
    if len(tool_candidates) == 1:
        lp[0, :, 1:] = np.nan
        margin[0] = np.inf  # the analyzer's margin when nothing competes
    decisions = [
        {
            "step": 1,
            "call": 0,
            "kind": "tool_name",
            "arg": "",
            "chosen": "calculator",
            "candidates": list(tool_candidates),
            "token_index": 12,
        },
        {
            "step": 1,
            "call": 0,
            "kind": "arg_value",
            "arg": "city",
            "chosen": "<b>Paris</b>",
            "candidates": ["<b>Paris</b>", RUNNER_UP],
            "token_index": 20,
        },
    ]
    zeros = np.zeros((2, layers), dtype=np.float32)
    return ToolDecisionResult(
        decisions, lp, lp, margin, zeros, zeros, np.full((2, layers), 4), info={"model": "test"}, vocab=_VOCAB
    )


def test_decision_rows_and_caption_name_the_strongest_alternative(analysis_store):
    """Decisions shaped as results stored before they named their token (no `token`, `piece`) still draw."""
    from components.analysis_panels import decision_chart, decision_summary

    from evalrx.analyzers import decision_rows

    rows = decision_rows(_decoded(analysis_store, _decision_result()), 1)
    tool = [r for r in rows if r["decision"] == 0]
    assert {r["alternative"] for r in tool if r["layer"] == 0} == {"lookup"}
    assert next(r for r in tool if r["layer"] == 2)["p_alternative"] == pytest.approx(0.6 / np.exp(0.42), abs=1e-4)
    assert decision_summary(tool) == (
        "tool name \\(call 0\\): chosen “calculator” vs alternative “lookup”, "
        "margin 0.42 nats at the output (p 0.60 vs 0.39)"
    )
    arg = [r for r in rows if r["decision"] == 1]
    assert {r["alternative"] for r in arg} == {"·London"}  # the runner-up token itself, not a placeholder
    summary = decision_summary(arg)
    assert "<b>" not in summary and "\\<b\\>Paris\\<\\/b\\>" in summary and "“·London”" in summary
    spec = decision_chart(tool).to_dict()
    assert {"chosen: calculator", "lookup", "search"} == {r["series"] for r in spec["data"]["values"]}
    assert {"chosen_name", "alternative", "p_alternative"} <= {t["field"] for t in spec["encoding"]["tooltip"]}
    assert decision_rows(_decoded(analysis_store, _decision_result()), 2) == []  # another turn


def test_decision_rows_label_the_token_a_value_was_measured_at(analysis_store):
    """A result naming its decided tokens: the argument's line and caption are that token (its place in the
    value), not the whole value; a tool name says where the names part. Older results read as above."""
    from components.analysis_panels import decision_chart, decision_summary

    from evalrx.analyzers import RUNNER_UP, decision_rows

    result = _decision_result()
    result.decisions[0].update(token="calc", piece=0)
    result.decisions[1].update(candidates=["Par", RUNNER_UP], token="Par", piece=3)
    rows = decision_rows(_decoded(analysis_store, result), 1)
    arg = [r for r in rows if r["decision"] == 1]
    assert {r["chosen_name"] for r in arg} == {"Par"} and {r["alternative"] for r in arg} == {"·London"}
    summary = decision_summary(arg)
    assert "at token 4 “Par” of “\\<b\\>Paris\\<\\/b\\>”: chosen “Par” vs alternative “·London”" in summary
    assert {"chosen: Par", RUNNER_UP} == {r["series"] for r in decision_chart(arg).to_dict()["data"]["values"]}
    tool = decision_summary([r for r in rows if r["decision"] == 0])
    assert tool.startswith("tool name \\(call 0\\) at token 1 “calc” of “calculator”: chosen “calculator” vs")


def test_decision_without_alternatives_says_so(analysis_store):
    from components.analysis_panels import decision_summary

    from evalrx.analyzers import decision_rows

    rows = decision_rows(_decoded(analysis_store, _decision_result(("calculator",))), 1)
    tool = [r for r in rows if r["decision"] == 0]
    assert all(r["margin"] is None and r["alternative"] == "" for r in tool)
    assert decision_summary(tool).endswith("no alternative scored")


def test_attention_chart_labels_every_segment_in_conversation_order(analysis_store):
    from components.analysis_panels import attention_chart

    from evalrx.analyzers import AttentionResult, attention_rows

    segs = [
        {"kind": k, "step": None, "label": x}
        for k, x in (
            ("system", "system"),
            ("user", "user"),
            ("image", "image"),
            ("turn", "turn@1"),
            ("image", "image"),
            ("observation", "tool@2"),
        )
    ]
    labels = {"label_step": np.array([1, 1, 4]), "label_kind": np.array([0, 1, 0]), "label_arg": ["", "x", ""]}
    result = AttentionResult([5, 6, 30], [1, 2, 3], np.full((3, 4, 6), 1 / 6, dtype=np.float32), segs, labels)
    rows = attention_rows(_decoded(analysis_store, result), 1)
    assert {r["layer"] for r in rows} == {1, 2, 3, 4} and all(r["mass"] == pytest.approx(1 / 6) for r in rows)
    spec = attention_chart(rows).to_dict()
    x = spec["encoding"]["x"]
    assert x["sort"] == ["system", "user", "image #1", "turn@1", "image #2", "tool@2"]  # repeats stay apart
    assert x["axis"]["labelOverlap"] is False and x["axis"]["labelLimit"] >= 120
    assert spec["height"] >= 100 and spec["autosize"]["type"] == "fit-x"


def test_attention_lists_only_the_segments_before_the_step(analysis_store):
    """A decision at step 1 cannot attend to step 2's observation or step 3's turn: they are not its columns."""
    from evalrx.analyzers import AttentionResult, attention_rows

    segs = [
        {"kind": "system", "step": None, "label": "system"},
        {"kind": "user", "step": None, "label": "user"},
        {"kind": "turn", "step": 1, "label": "turn@1"},
        {"kind": "observation", "step": 2, "label": "observation@2"},
        {"kind": "turn", "step": 3, "label": "turn@3"},
    ]
    mass = np.zeros((3, 2, 5), dtype=np.float32)
    mass[:2, :, :3] = 1 / 3  # step 1's positions: causal, nothing on later segments
    mass[2] = 1 / 5
    labels = {"label_step": np.array([1, 1, 3]), "label_kind": np.array([0, 1, 0]), "label_arg": ["", "x", ""]}
    result = _decoded(analysis_store, AttentionResult([5, 6, 30], [1, 2, 3], mass, segs, labels))
    assert [r["segment"] for r in attention_rows(result, 1) if r["layer"] == 1] == ["system", "user", "turn@1"]
    assert len({r["segment"] for r in attention_rows(result, 3)}) == 5
    # The forced-final nudge is a message of no step just before the final turn: only that turn attends to it.
    nudged = segs[:4] + [{"kind": "user", "step": None, "label": "nudge"}] + segs[4:]
    mass = np.zeros((3, 2, 6), dtype=np.float32)
    mass[:] = 1 / 6
    result = _decoded(analysis_store, AttentionResult([5, 6, 30], [1, 2, 3], mass, nudged, labels))
    assert [r["segment"] for r in attention_rows(result, 1) if r["layer"] == 1] == ["system", "user", "turn@1"]
    assert "nudge" in {r["segment"] for r in attention_rows(result, 3)}


def _diagnosed_lens():
    """A lens over step 1's argument `city`: its first token (index 20) and a later one (index 22) where the
    last layer wrote " London" (4) though mid-way layers predicted " look" (2)."""
    from evalrx.analyzers import LensResult

    layers, positions = 3, 2
    topk_ids = np.zeros((layers, positions, 3), dtype=np.int32)
    topk_lp = np.log(np.tile([0.6, 0.3, 0.1], (layers, positions, 1))).astype(np.float32)
    topk_ids[:, 0] = [1, 2, 3]
    topk_ids[:, 1] = [2, 4, 3]  # mid-way: " look" leads, " London" second
    topk_ids[-1, 1] = [4, 2, 3]  # the output writes " London"
    target_lp = np.log(np.array([[0.6, 0.3], [0.6, 0.3], [0.6, 0.6]], dtype=np.float32))
    per_layer = np.zeros((layers, positions), dtype=np.float32)
    labels = {
        "label_step": [1, 1],
        "label_kind": [1, 1],
        "label_call": [0, 0],
        "label_piece": [0, 2],
        "label_pass": [0, 0],
        "label_token_index": [20, 22],
        "label_arg": ["city", "city"],
    }
    return LensResult(
        positions=[19, 21],
        token_ids=[3, 1],
        target_ids=[1, 4],
        target_is_actual=[True, True],
        topk_ids=topk_ids,
        topk_logprobs=topk_lp,
        entropy=per_layer,
        target_logprob=target_lp,
        target_rank=np.zeros((layers, positions), dtype=np.int32),
        hidden_norm=per_layer,
        labels=labels,
        info={"model": "test"},
        vocab=_VOCAB,
    )


def _token_diagnosis(token_index: int = 22):
    from evalrx.core import Diagnosis

    evidence = {"text": "lost it", "chosen": "london", "alternative": "look", "layer": 1, "chosen_id": 4}
    evidence.update(alternative_id=2, token_index=token_index, call=0, arg="city", **{"pass": 0})
    return Diagnosis(kind="bad_arguments", first_wrong_step=1, evidence=evidence, confidence=0.4, source="whitebox")


def test_tool_decision_shows_the_alternatives_at_the_diagnosed_token(analysis_store):
    """The diagnosis names token 22 of argument `city`: the panel reads the lens there, not the first token (20)."""
    from components.analysis_panels import decision_summary

    from evalrx.analyzers import decision_rows, diagnosed_token

    decision = _decoded(analysis_store, _decision_result())
    lens = _decoded(analysis_store, _diagnosed_lens())
    focus = diagnosed_token([_token_diagnosis()])
    assert focus is not None and focus["token_index"] == 22 and focus["step"] == 1
    rows = decision_rows(decision, 1, lens=lens, focus=focus)
    tool = [r for r in rows if r["what"].startswith("tool name")]
    assert tool and {r["alternative"] for r in tool if r["layer"] == 0} == {"lookup"}  # untouched
    arg = [r for r in rows if r["what"].startswith("argument city")]
    assert arg and all(r["token_index"] == 22 for r in arg)
    assert {r["chosen_name"] for r in arg} == {"·London"} and "Paris" not in str(arg)
    mid = next(r for r in arg if r["layer"] == 1 and r["chosen"])
    assert mid["alternative"] == "·look" and mid["p_alternative"] == pytest.approx(0.6)
    assert {r["series"] for r in arg} == {"chosen: ·London", "·look"}
    summary = decision_summary(arg)
    assert "token 22" in summary and "·look" in summary and "diagnos" in summary
    # No diagnosis, one naming no token, one for another step, or a token the lens lacks: as before.
    before = decision_rows(decision, 1)
    assert decision_rows(decision, 1, lens=lens, focus=None) == before
    assert diagnosed_token([_token_diagnosis().__class__(kind="bad_arguments", first_wrong_step=1)]) is None
    assert decision_rows(decision, 2, lens=lens, focus=focus) == []
    assert decision_rows(decision, 1, lens=lens, focus=diagnosed_token([_token_diagnosis(99)])) == before


def test_trajectory_analysis_heads_only_what_is_there_and_reads_the_diagnosed_token(store_url):
    """Stored results (the run analysed it) are not headed "No analysis requested yet", and the tool-decision
    panel shows the alternatives at the token the diagnosis names; a trajectory with neither says so."""
    from appdata import fill_run
    from apppages import open_page, texts

    from evalrx.runner.analysis import AnalysisRecord
    from evalrx.store.analyses import replace_analyses
    from evalrx.store.diagnoses import save_diagnoses

    _, (analysed, bare) = fill_run(store_url, 2, outcomes=["fail", "fail"])
    with S.connect(store_url).write() as s:
        records = [
            AnalysisRecord(r.meta["analyzer"], arrays=r.to_arrays(), meta=dict(r.meta))
            for r in (
                _diagnosed_lens(),
                _decision_result(),
            )
        ]
        replace_analyses(s, analysed, records)
        save_diagnoses(s, analysed, [_token_diagnosis()])
    shown = texts(open_page("trajectory", id=analysed))
    assert "No analysis requested yet" not in shown
    caption = next(line for line in shown.splitlines() if line.startswith("argument city"))
    assert "at token 22" in caption and "where the diagnosis says it went wrong" in caption and "·look" in caption
    assert "Paris" not in shown.split("Tool decision")[-1]  # the first argument token's value is not the one shown
    assert "No analysis requested yet" in texts(open_page("trajectory", id=bare))


def test_uncertainty_shades_the_turns_tokens_with_their_text_escaped(analysis_store):
    from components.analysis_panels import uncertainty_html

    from evalrx.analyzers import TokenUncertaintyResult

    result = TokenUncertaintyResult(
        token_ids=[7, 8, 9],
        logprob=np.log([0.9, 0.2, 0.5]),
        entropy=[0.1, 1.5, 0.7],
        rank=[0, 3, 0],
        step=[1, 1, 3],
        position=[4, 5, 9],
        tokens=["<b>", "x\n", "later"],
        source="teacher_forced",
    )
    body = uncertainty_html(_decoded(analysis_store, result), 1)
    assert body.count("<span") == 2 and "later" not in body
    assert "&lt;b&gt;" in body and "<b>" not in body and "x↵" in body
    assert 'title="p=0.200 entropy=1.50 rank=3"' in body and "rgba(220,60,60,0.80)" in body
    assert uncertainty_html(_decoded(analysis_store, result), 2) is None


def test_a_real_analysis_of_a_demo_trajectory_fills_every_panel(analysis_store):
    """The four analyzers on the bundled demo model, stored and decoded as the page does, give each panel rows."""
    from components.analysis_panels import panel_results, uncertainty_html

    import evalrx
    from evalrx.analyzers import analyze, attention_rows, decision_rows, lens_rows
    from evalrx.models.agent import Agent
    from evalrx.suites import load_cases
    from evalrx.tools import get_tools

    handle = evalrx.load("evalrx-tiny")
    case = load_cases("demo/lookup_easy")[0]
    tools = get_tools(["calculator", "lookup"], case=case)
    traj = Agent(handle, tools).run(case)
    names = ["logit_lens", "tool_decision", "attention", "token_uncertainty"]
    analysed = analyze(handle, traj, names, tools=[t.to_openai() for t in tools])
    results, unreadable = panel_results({n: _stored(analysis_store, analysed[n]) for n in names})
    assert list(results) == names and unreadable == {}
    calling = next(s for s in traj.steps if s.tool_calls)  # the model's turn that calls a tool
    turn = calling.idx
    assert lens_rows(results["logit_lens"], turn) and attention_rows(results["attention"], turn)
    assert calling.tool_call.name in {r["chosen_name"] for r in decision_rows(results["tool_decision"], turn)}
    assert uncertainty_html(results["token_uncertainty"], turn).count("<span") > 1


def test_every_analysis_panel_has_a_how_to_read_line():
    from components.analysis_panels import HOW_TO_READ

    assert set(HOW_TO_READ) == {"logit_lens", "tool_decision", "attention", "pictures", "token_uncertainty"}
    assert all("\n" not in line and len(line) > 60 for line in HOW_TO_READ.values())


def test_serving_beyond_loopback_needs_a_login_or_an_explicit_yes():
    from components.access import exposure_problem

    assert exposure_problem("127.0.0.1", auth=False, allowed=False) is None
    assert exposure_problem("::1", auth=False, allowed=False) is None
    assert "every network interface" in exposure_problem("", auth=False, allowed=False)
    assert "EVALRX_ALLOW_UNAUTHENTICATED=1" in exposure_problem("0.0.0.0", auth=False, allowed=False)
    assert exposure_problem("0.0.0.0", auth=True, allowed=False) is None
    assert exposure_problem("0.0.0.0", auth=False, allowed=True) is None


def test_a_list_row_says_one_step_and_one_call_in_the_singular():
    from types import SimpleNamespace

    from components.trajectory_list import row_html

    row = SimpleNamespace(
        sample_id="c1", run_id=1, goal="g", final_answer=None, outcome="fail", grade_turn=None,
        diagnosis_kind=None, diagnosis_agent=None, label=None, label_kind=None, terminated="final",
        n_steps=1, n_tool_calls=1, n_parse_errors=0, latency_ms=0, prompt_tokens=0, completion_tokens=0,
    )  # fmt: skip
    html = row_html(row)
    assert "1 step · 1 call ·" in html and "calls" not in html and "steps" not in html
    assert "3 steps · 2 calls" in row_html(SimpleNamespace(**{**vars(row), "n_steps": 3, "n_tool_calls": 2}))


def test_a_stored_call_with_wire_arguments_shows_them():
    """An older import stored a wire call as written ({"name", "arguments"}): the step still shows its arguments."""
    traj = Trajectory(
        sample_id="w",
        goal="g",
        steps=[Step(0, StepRole.ACTOR, "", tool_calls=[{"name": "lookup", "arguments": {"q": "x"}}])],
    )
    (view,) = step_views(traj)
    assert view.calls == [("lookup", {"q": "x"})]

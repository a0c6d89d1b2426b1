"""Analyzers wired into the worker, on SQLite with the bundled demo model (evalrx-tiny).

A real run with analyzers stores compact results per trajectory and the facts the
Trajectories page filters on (failure kind, smallest tool margin); analysis requests
for stored trajectories (including an API model's, replayed on the demo model) are
served by an idle worker and report their status.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sqlalchemy import select

import evalrx.store as S
from evalrx import core, reports
from evalrx.analyzers import analysis_scores
from evalrx.config import ModelConfig, RunConfig
from evalrx.core import Step, StepRole, Trajectory
from evalrx.runner import Worker, enqueue_run
from evalrx.store import analyses as A
from evalrx.store.runs import create_run, save_trajectory
from evalrx.suites import load_cases


def _worker(store):
    return Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5)


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    """One demo-model run of one failing case with lens, tool decision and attention."""
    url = f"sqlite:///{tmp_path_factory.mktemp('wiring') / 'store.sqlite'}"
    S.upgrade(url)
    store = S.connect(url)
    case = next(c for c in load_cases("demo/lookup_easy") if c.id == "lookup_easy-015")  # a misread
    cfg = RunConfig(
        model=ModelConfig("evalrx-tiny"),
        tools=["calculator", "lookup"],
        analyzers=["logit_lens", "tool_decision", "attention"],
    )
    run_id = enqueue_run(cfg, [case], store=store)
    assert _worker(store).run() == 1
    tid = S.list_trajectories(run_id=run_id, store=store).rows[0].id
    yield store, run_id, tid
    S.forget(url)


def test_a_run_with_analyzers_stores_compact_results_and_a_diagnosis(demo_store):
    store, run_id, tid = demo_store
    got = {a["analyzer"]: a for a in S.load_analyses(tid, store=store)}
    assert set(got) == {"logit_lens", "tool_decision", "attention"}
    top = S.get_diagnoses(tid, store=store)[0]
    # The model copies the home city wrongly from the lookup's observation into its answer.
    assert (top.kind, top.source) == ("misread_observation", "reference") and top.first_wrong_step == 3
    assert S.list_trajectories(run_id=run_id, store=store).rows[0].diagnosis_kind == "misread_observation"
    assert not any(a["meta"].get("error") for a in got.values())
    lens = got["logit_lens"]["arrays"]
    layers, positions, k = lens["topk_ids"].shape
    assert layers == 5 and k == 10 and positions == lens["positions"].shape[0] > 0  # 4 layers + embeddings
    assert lens["topk_logprobs"].dtype == np.float32
    assert got["attention"]["arrays"]["mass"].shape[1:] == (4, len(got["attention"]["meta"]["segments"]))


def test_tool_margin_is_indexed_and_filters_the_list(demo_store):
    from evalrx.analyzers import result_from_arrays

    store, run_id, tid = demo_store
    rec = S.load_analyses(tid, "tool_decision", store=store)[0]
    result = result_from_arrays(rec["arrays"], rec["meta"])
    names = [i for i, d in enumerate(result.decisions) if d["kind"] == "tool_name"]
    expected = float(min(result.final_margin[i] for i in names))
    with store.read() as s:
        from evalrx.store import schema as t

        stored = s.get(t.TrajectoryScore, (tid, core.MARGIN_SCORE)).value
    assert math.isclose(stored, expected, rel_tol=1e-6)
    ids = lambda **f: [r.id for r in S.list_trajectories(run_id=run_id, store=store, **f).rows]  # noqa: E731
    assert ids(max_margin=expected + 1e-3) == [tid]
    assert ids(max_margin=expected - 1e-3) == []


def test_lens_and_attention_numbers_are_indexed_for_the_predictors(demo_store):
    from evalrx.analyzers import result_from_arrays

    store, run_id, tid = demo_store
    rec = S.load_analyses(tid, "logit_lens", store=store)[0]
    lens = result_from_arrays(rec["arrays"], rec["meta"])
    tool = np.array(lens.kinds) == "tool_name"
    settle = lens.settles_at[tool]
    expected_settle = float(np.where(settle < 0, lens.num_layers + 1, settle).max())
    decision = np.isin(lens.kinds, ["tool_name", "arg_value"])
    expected_entropy = float(np.nanmean(lens.entropy[-1][decision]))
    with store.read() as s:
        from evalrx.store import schema as t

        scores = dict(
            s.execute(
                select(t.TrajectoryScore.name, t.TrajectoryScore.value).where(t.TrajectoryScore.trajectory_id == tid)
            ).all()
        )
    assert scores[core.LENS_SETTLE_SCORE] == expected_settle and 0 <= expected_settle <= lens.num_layers + 1
    assert math.isclose(scores[core.ENTROPY_SCORE], expected_entropy, rel_tol=1e-6)
    # Its only attention positions are the lookup call's, before any observation: no share to record.
    assert core.OBS_ATTENTION_SCORE not in scores
    # The predictors table reads the same stored numbers (one failing trajectory: no AUROC, but the rows exist).
    signals = {r["signal"] for r in reports.predictor_table([run_id], store=store)}
    assert {core.MARGIN_SCORE, core.LENS_SETTLE_SCORE, core.ENTROPY_SCORE} <= signals


def test_attention_share_on_the_latest_observation():
    from evalrx.analyzers import AttentionResult

    segments = [
        {"kind": "system", "step": None, "label": "system"},
        {"kind": "observation", "step": 2, "label": "o2"},
        {"kind": "observation", "step": 4, "label": "o4"},
        {"kind": "turn", "step": 5, "label": "t5"},
    ]
    # Two positions: step 1 (before any observation) and step 5 (latest observation: step 4). Layers: 2.
    mass = np.zeros((2, 2, 4), dtype=np.float32)
    mass[1, -1] = [0.1, 0.2, 0.6, 0.1]
    mass[1, 0] = [0.0, 0.0, 0.1, 0.9]  # an earlier layer does not count
    result = AttentionResult([3, 40], [7, 8], mass, segments, labels={"label_step": [1, 5], "label_kind": [0, 0]})
    scores = analysis_scores("attention", result.meta, result.to_arrays())
    assert scores == {core.OBS_ATTENTION_SCORE: pytest.approx(0.6)}


def _repeating_trajectory() -> Trajectory:
    call = {"name": "calculator", "args": {"expression": "2+2"}, "id": "c1"}
    steps = [Step(idx=0, role=StepRole.USER, content="What is 2+2?")]
    for i in range(2):
        steps.append(Step(idx=len(steps), role=StepRole.ACTOR, content="", tool_calls=[dict(call, id=f"c{i}")]))
        steps.append(Step(idx=len(steps), role=StepRole.TOOL, content="4", observation="4"))
    steps.append(Step(idx=len(steps), role=StepRole.ACTOR, content="The answer is 4."))
    return Trajectory(
        sample_id="api-1",
        goal="What is 2+2?",
        steps=steps,
        final_answer="The answer is 4.",
        ground_truth=4,
        metrics={"terminated": "final"},
    )


def test_requested_analysis_of_an_api_trajectory_replays_on_the_demo_model(demo_store, monkeypatch):
    monkeypatch.setenv(
        "EVALRX_REPLAY_MODEL", "evalrx-tiny"
    )  # fast here; tests/integration/test_smollm2.py replays on the real one
    store, _, _ = demo_store
    case = load_cases("demo/arithmetic_easy")[0]
    with store.write() as s:
        run_id = create_run(
            s,
            name="api run",
            config={"model": {"name": "gpt-4o-mini", "backend": "api"}, "tools": ["calculator", "lookup"]},
            cases=[case],
            source="import",
            status="done",
        )
        from sqlalchemy import select

        from evalrx.store import schema as t

        case_id = s.execute(select(t.RunCase.case_row_id).where(t.RunCase.run_id == run_id)).scalar_one()
        tid = save_trajectory(s, run_id, case_id, _repeating_trajectory())
    assert S.list_trajectories(diagnosis_kind="repeated_calls", store=store).rows == []  # not diagnosed yet
    ok = A.request_analysis(tid, ["logit_lens", "tool_decision"], store=store)
    bad = A.request_analysis(tid, ["nope"], store=store)
    assert A.get_request(ok, store=store)["status"] == "queued"
    assert _worker(store).run() == 0  # no run jobs: the idle worker serves the requests
    assert A.get_request(ok, store=store)["status"] == "done"
    failed = A.get_request(bad, store=store)
    assert failed["status"] == "failed" and "Unknown analyzer 'nope'" in failed["error"]
    assert [r["id"] for r in A.requests_for(tid, store=store)] == [bad, ok]
    got = {a["analyzer"]: a for a in S.load_analyses(tid, store=store)}
    assert got["logit_lens"]["meta"]["scored_on"] == "evalrx-tiny" == A.default_replay_model()
    assert got["logit_lens"]["meta"]["source_model"] == "gpt-4o-mini on api"
    assert got["logit_lens"]["arrays"]["topk_ids"].shape[0] == 5
    # The finished request diagnoses the trajectory again: the repeated call, at its second call.
    assert [r.id for r in S.list_trajectories(diagnosis_kind="repeated_calls", store=store).rows] == [tid]
    assert S.get_diagnoses(tid, store=store)[0].first_wrong_step == 3
    # A second request replaces the results instead of piling them up.
    A.request_analysis(tid, ["tool_decision"], store=store)
    _worker(store).run()
    assert [a["analyzer"] for a in S.load_analyses(tid, store=store)].count("tool_decision") == 1


def test_request_for_a_missing_trajectory_is_refused(demo_store):
    store, _, _ = demo_store
    with pytest.raises(ValueError, match="no trajectory 999999"):
        A.request_analysis(999999, store=store)
    with pytest.raises(ValueError, match="at least one analyzer"):
        A.request_analysis(1, [], store=store)

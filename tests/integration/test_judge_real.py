"""A real model as the judge, end to end: SmolLM2-135M through hf_local and through `evalrx serve` + the api
backend, on three failed tau-bench runs that AgentRx labelled (`../shared/data/agentrx_tau_retail`).

A 135M model's verdicts are poor; what is tested is that the whole path runs on a real model and that the
checks hold: every answer is either a diagnosis whose kind is in the vocabulary, whose step exists and whose
quote is in that step, or a refusal in one line; verdicts are stored as source `judge` and cached. The prompt
shows a short view of each run (4 steps, 120 characters each) and the answer is cut at 48 tokens, to keep
both paths within about half a minute on two cores (three runs: the path and the checks, not the
verdicts' quality, are what is tested).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from servehelpers import serving

import evalrx.store as S
from evalrx.core import FAILURE_KINDS
from evalrx.diagnosis.judge import check_verdict
from evalrx.interop import import_file
from evalrx.runner.judging import judge_targets, judge_trajectories
from evalrx.specs import SMOLLM2_KEY, get_spec, weights_installed

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "agentrx_tau_retail"
SHORT = {"max_new_tokens": 48, "max_steps": 4, "max_step_chars": 120}


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    if not weights_installed(get_spec(SMOLLM2_KEY)):
        pytest.fail(f"{SMOLLM2_KEY} is not installed: {get_spec(SMOLLM2_KEY).install_hint}", pytrace=False)
    url = f"sqlite:///{tmp_path_factory.mktemp('judge') / 'judge.sqlite'}"
    S.upgrade(url)
    run_id = import_file(DATA / "tau_dataset_failed.json", store=url).run_ids[0]
    yield url, judge_targets(run_id, limit=3, store=url)
    S.forget(url)


def _holds(url: str, judged: list) -> None:
    """Every answer is a checked diagnosis stored as `judge`, or a one-line refusal."""
    assert len(judged) == 3 and not [j for j in judged if j.failed]
    kinds = [(k.key, k.definition) for k in S.list_kinds(store=url)]
    for j in judged:
        if j.diagnosis is None:
            assert j.refusal and "\n" not in j.refusal
            continue
        traj = S.get_trajectory(j.trajectory_id, store=url).trajectory
        verdict = {
            "kind": j.diagnosis.kind,
            "first_wrong_step": j.diagnosis.first_wrong_step,
            "evidence": j.diagnosis.summary,  # the quote, as the judge gave it
            "explanation": "",
            "confidence": j.diagnosis.confidence,
        }
        assert j.diagnosis.kind is None or j.diagnosis.kind in FAILURE_KINDS
        check_verdict(verdict, traj, kinds)  # raises if the stored verdict would not hold
        stored = [d for d in S.get_diagnoses(j.trajectory_id, store=url) if d.source == "judge"]
        assert stored and stored[0].kind == j.diagnosis.kind


def test_smollm2_judges_three_agentrx_runs_in_process_and_the_checks_hold(three):
    import evalrx

    url, ids = three
    model = evalrx.load(SMOLLM2_KEY, device="cpu")
    judged = judge_trajectories(ids, model, store=url, **SHORT)
    _holds(url, judged)
    again = judge_trajectories(ids, model, store=url, **SHORT)
    assert all(j.cached for j in again)  # the same question again costs nothing


def test_smollm2_judges_through_evalrx_serve_and_the_api_backend(three, tmp_path):
    import evalrx

    url, ids = three
    with serving(SMOLLM2_KEY, tmp_path / "serve.log", max_new_tokens=SHORT["max_new_tokens"]) as base_url:
        model = evalrx.load(
            SMOLLM2_KEY, backend="api", base_url=base_url, api_key="sk-not-needed", max_retries=0, timeout=120
        )
        judged = judge_trajectories(ids, model, server=base_url, store=url, **SHORT)
    _holds(url, judged)
    assert all(not j.cached for j in judged)  # another backend is another judge: asked afresh

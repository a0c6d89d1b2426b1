"""The app's judge pages with AppTest on a real SQLite store: the "sources disagree" filter from the URL, and
"Diagnose with a judge" (an estimate, then a confirm, then a queued judge job; its progress and cancel on the Runs
page; off beyond loopback unless the operator allows commands)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))  # appdata

from appdata import fill_run  # noqa: E402
from apppages import listed, open_page, pre_texts, store_url, texts  # noqa: E402,F401  (store_url: a fixture)

import evalrx.store as S  # noqa: E402
from evalrx.core.failures import Diagnosis  # noqa: E402

OUTCOMES = ["fail", "fail", "pass", "fail", "pass", "fail"]


@pytest.fixture
def run(store_url):
    run_id, ids = fill_run(store_url, len(OUTCOMES), seed=2, name="judged", outcomes=OUTCOMES)
    return {"url": store_url, "run": run_id, "ids": ids}


def _d(kind, step, source) -> Diagnosis:
    return Diagnosis(kind, step, {"text": "x"}, 0.5, source)


def test_the_sources_disagree_url_parameter_filters_the_list(run):
    url, ids = run["url"], run["ids"]
    with S.connect(url).write() as s:
        S.save_diagnoses(s, ids[0], [_d("bad_arguments", 1, "reference"), _d("bad_arguments", 1, "heuristic")])
        S.save_diagnoses(s, ids[1], [_d("bad_arguments", 1, "reference"), _d("wrong_tool", 1, "judge")])
        S.save_diagnoses(s, ids[3], [_d("wrong_tool", 2, "heuristic"), _d("wrong_tool", 3, "judge")])
    at = open_page("trajectories", run=run["run"], disagree="true")
    rows = listed(at)
    assert sorted(tid for tid, _ in rows) == [ids[1], ids[3]]
    assert at.toggle(key="disagree").value is True
    assert "sources disagree" in texts(at)
    assert all(q["in_disagree"] == "true" for _, q in rows)  # previous/next keep the filter
    at.toggle(key="disagree").set_value(False).run()
    assert len(listed(at)) == len(OUTCOMES)


def _fill(at, key: str, **fields) -> None:
    for name, value in fields.items():
        at.text_input(key=f"{key}-{name}").set_value(value)


def _plain(text: str) -> str:
    return text.replace("\\", "")  # md_escape's backslashes


def test_the_judge_form_estimates_then_queues_only_after_the_confirm(run, monkeypatch):
    from evalrx.runner import JudgeConfig, estimate_judge

    monkeypatch.setenv("JUDGE_KEY", "sk-never-in-the-store-123")
    url, rid = run["url"], run["run"]
    key = f"judge-run-{rid}"
    at = open_page("runs", run=rid)
    _fill(at, key, spec="gpt-4o-mini", **{"base-url": "http://127.0.0.1:9/v1", "key-env": "JUDGE_KEY"})
    at.button(key=f"{key}-estimate").click().run()
    assert not at.exception and not at.error
    failed = [tid for tid, o in zip(run["ids"], OUTCOMES) if o == "fail"]
    config = JudgeConfig("gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key_env="JUDGE_KEY").checked()
    want = estimate_judge(config, failed, store=url)
    shown = _plain(at.info[0].value)
    assert f"bout {want.tokens:,} tokens for 4 trajectories" in shown and "characters / 4" in shown
    assert S.list_judge_jobs(store=url) == []  # an estimate queues nothing
    at.button(key=f"{key}-confirm").click().run()
    (job,) = S.list_judge_jobs(store=url)
    assert (job.run_id, job.status, job.trajectory_ids, job.spec, job.backend) == (
        rid,
        "queued",
        failed,
        "gpt-4o-mini",
        "api",
    )
    assert (job.base_url, job.api_key_env, job.with_findings) == ("http://127.0.0.1:9/v1", "JUDGE_KEY", False)
    # Its progress and its cancel button are where the run's progress is shown.
    assert "In progress" in [s.value for s in at.subheader]
    assert f"Judge job {job.id}" in _plain(texts(at))
    at.button(key=f"cancel-judge-{job.id}").click().run()
    assert S.get_judge_job(job.id, store=url).status == "cancelled"


def test_nothing_is_queued_without_the_confirm_and_a_changed_field_asks_for_a_new_estimate(run):
    url, rid = run["url"], run["run"]
    key = f"judge-run-{rid}"
    at = open_page("runs", run=rid)
    _fill(at, key, spec="gpt-4o-mini", **{"base-url": "http://127.0.0.1:9/v1"})
    at.button(key=f"{key}-estimate").click().run()
    assert [b for b in at.button if b.key == f"{key}-confirm"]
    at.toggle(key=f"{key}-passing").set_value(True).run()  # the estimate shown no longer fits
    assert not [b for b in at.button if b.key == f"{key}-confirm"]
    at.run()
    assert S.list_judge_jobs(store=url) == []


def test_bad_judge_input_is_one_line_and_queues_nothing(run):
    url, rid = run["url"], run["run"]
    key = f"judge-run-{rid}"
    at = open_page("runs", run=rid)
    _fill(at, key, spec="gpt-4o-mini", **{"key-env": "sk-this-is-a-key-not-a-name"})
    at.button(key=f"{key}-estimate").click().run()
    assert "NAME of an environment variable" in _plain(at.error[0].value)
    assert "sk-this-is-a-key-not-a-name" not in _plain(texts(at))
    assert not [b for b in at.button if b.key == f"{key}-confirm"] and S.list_judge_jobs(store=url) == []


def test_the_filtered_trajectories_list_queues_its_failed_trajectories(run):
    url, rid, ids = run["url"], run["run"], run["ids"]
    with S.connect(url).write() as s:  # two failed trajectories whose sources disagree
        S.save_diagnoses(s, ids[0], [_d("bad_arguments", 1, "reference"), _d("wrong_tool", 1, "heuristic")])
        S.save_diagnoses(s, ids[5], [_d("bad_arguments", 1, "reference"), _d("wrong_tool", 1, "heuristic")])
    at = open_page("trajectories", run=rid, disagree="true")
    _fill(at, "judge-list", spec="gpt-4o-mini", **{"base-url": "http://127.0.0.1:9/v1"})
    at.button(key="judge-list-estimate").click().run()
    assert "tokens for 2 trajectories" in _plain(at.info[0].value)
    at.button(key="judge-list-confirm").click().run()
    (job,) = S.list_judge_jobs(store=url)
    assert job.trajectory_ids == [ids[0], ids[5]] and job.run_id == rid
    assert job.scope == f"run {rid}, sources disagree"


def test_the_judge_form_is_off_beyond_loopback_unless_the_operator_allows_commands(run, monkeypatch):
    from streamlit import config

    monkeypatch.setenv("EVALRX_ALLOW_UNAUTHENTICATED", "1")
    monkeypatch.delenv("EVALRX_APP_COMMANDS", raising=False)
    key = f"judge-run-{run['run']}"
    config.set_option("server.address", "0.0.0.0")
    try:
        at = open_page("runs", run=run["run"])
        assert at.button(key=f"{key}-estimate").disabled and at.text_input(key=f"{key}-key-env").disabled
        assert "the operator can set EVALRX_APP_COMMANDS=1" in _plain(texts(at))
        monkeypatch.setenv("EVALRX_APP_COMMANDS", "1")
        at.run()
        assert not at.button(key=f"{key}-estimate").disabled
    finally:
        config.set_option("server.address", "127.0.0.1")


def test_the_judge_form_queues_the_strategy_chosen(run):
    url, rid = run["url"], run["run"]
    key = f"judge-run-{rid}"
    at = open_page("runs", run=rid)
    box = at.selectbox(key=f"{key}-strategy")
    assert box.options == ["All at once (one call)", "Step by step", "Binary search"]  # all_at_once first
    _fill(at, key, spec="gpt-4o-mini", **{"base-url": "http://127.0.0.1:9/v1"})
    box.set_value("binary_search").run()
    at.button(key=f"{key}-estimate").click().run()
    assert not at.exception and not at.error
    at.button(key=f"{key}-confirm").click().run()
    (job,) = S.list_judge_jobs(store=url)
    assert job.options.get("strategy") == "binary_search"


def test_the_judge_form_queues_its_budget_and_the_estimate_counts_it(run):
    url, rid = run["url"], run["run"]
    key = f"judge-run-{rid}"
    at = open_page("runs", run=rid)
    _fill(at, key, spec="gpt-4o-mini", **{"base-url": "http://127.0.0.1:9/v1"})
    for name, value in (("max_new_tokens", 96), ("max_steps", 12), ("max_step_chars", 200)):
        at.number_input(key=f"{key}-{name}").set_value(value)
    at.button(key=f"{key}-estimate").click().run()
    assert not at.exception and not at.error
    assert "(96 each)" in _plain(at.info[0].value)  # the answer's limit, as the CLI's --max-new-tokens
    at.button(key=f"{key}-confirm").click().run()
    (job,) = S.list_judge_jobs(store=url)
    assert job.options == {"max_new_tokens": 96, "max_steps": 12, "max_step_chars": 200}


def test_the_trajectory_page_queues_a_judge_for_that_trajectory_and_shows_a_refusal_inert(run):
    url, rid, ids = run["url"], run["run"], run["ids"]
    tid, key = ids[2], f"judge-traj-{ids[2]}"  # a passing one: a single trajectory is judged whatever its grade
    at = open_page("trajectory", id=tid)
    _fill(at, key, spec="gpt-4o-mini", **{"base-url": "http://127.0.0.1:9/v1"})
    at.button(key=f"{key}-estimate").click().run()
    assert "tokens for 1 trajectory;" in _plain(at.info[0].value)
    at.button(key=f"{key}-confirm").click().run()
    (job,) = S.list_judge_jobs(store=url)
    assert (job.trajectory_ids, job.run_id, job.scope) == ([tid], rid, f"trajectory {tid}")
    # A worker's refusal, with what the judge wrote: hostile text, shown as text.
    said = '{"kind": "nope"} <img src=x onerror=alert(1)> **bold**'
    store = S.connect(url)
    S.claim_job(store, "w1", S.JobKind.JUDGE)
    note = f"trajectory {tid} (c): refused: unknown kind"
    S.record_judged(store, job.job_id, "w1", refused=True, note=note, trajectory_id=tid, answer=said)
    S.finish_job(store, job.job_id, "w1", S.JobStatus.DONE)
    at.run()
    assert f"Judge job {job.id}" in _plain(texts(at)) and "refused" in _plain(texts(at))
    (box,) = [e for e in at.expander if "unknown kind" in _plain(e.label)]
    assert said in pre_texts(box)  # escaped into a <pre>, unescaped here: the very words, not markup
    # The run's panel shows the same refusal with its answer.
    at = open_page("runs", run=rid)
    assert said in pre_texts(at)

"""A judge on teams of agents, and Who&When's three ways to read a log (`evalrx diagnose RUN --judge SPEC
--judge-strategy all_at_once|step_by_step|binary_search`), against a real loopback OpenAI-compatible server with
scripted answers: on an imported Who&When run and on a small hand-made team log, the verdict names the step and
the agent the script chose; step_by_step asks the steps in order and stops at the first yes; binary_search asks
log2(n) halving questions, then for the verdict on the one step left; a quote not in the step, or another agent's
step, is refused in one line; each strategy's verdict is cached apart; the queued path carries the strategy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from loopback import ScriptedChatServer, completion
from test_diagnosis_store import misread, store_run

import evalrx.store as S
from evalrx.cli import main
from evalrx.interop import import_file
from evalrx.runner import Worker

WHOWHEN = Path(__file__).resolve().parents[4] / "shared" / "data" / "whowhen_algorithm_generated"

# Who&When Algorithm-Generated 34: 8 steps, each by an agent; its people put the mistake at step 4.
WW_STEP, WW_AGENT = 4, "Locomotive_Expert"
WW_QUOTE = "calculate the total number of wheels for each configuration"

# A small team log written here (Magentic-One's form): a person's question (no agent), then 8 agents' steps.
# The population read as 12,415 is copied as 12451 by the Coder at step 5.
HAND = {
    "is_correct": False,
    "question": "What is the population of Vafa city times 3?",
    "question_ID": "hand-team-1",
    "ground_truth": "37245",
    "history": [
        {"role": "human", "content": "What is the population of Vafa city times 3?"},
        {"role": "Orchestrator (thought)", "content": "Plan: WebSurfer finds the population, Coder multiplies it."},
        {"role": "Orchestrator (-> WebSurfer)", "content": "Find the population of Vafa city."},
        {"role": "WebSurfer", "content": "The city page says: population 12,415 (2020 census)."},
        {"role": "Orchestrator (-> Coder)", "content": "Multiply the population by 3."},
        {"role": "Coder", "content": "print(12451 * 3)"},
        {"role": "ComputerTerminal", "content": "37353"},
        {"role": "Orchestrator (thought)", "content": "The terminal printed 37353."},
        {"role": "Orchestrator (final answer)", "content": "FINAL ANSWER: 37353"},
    ],
    "mistake_agent": "Coder",
    "mistake_step": "5",
    "mistake_reason": "Copied 12,415 as 12451.",
}
HAND_STEP, HAND_AGENT, HAND_QUOTE = 5, "Coder", "12451 * 3"


@pytest.fixture(autouse=True)
def _no_ambient_openai(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("EVALRX_KEY_HOSTS", raising=False)


def answer(obj) -> dict:
    return completion(obj if isinstance(obj, str) else json.dumps(obj))


def verdict(step: int, agent: "str | None", quote: str, **more) -> dict:
    out = {
        "kind": "bad_arguments",
        "first_wrong_step": step,
        "evidence": quote,
        "explanation": "the number was copied wrong",
        "confidence": 0.8,
    }
    if agent is not None:
        out["agent"] = agent
    return {**out, **more}


def no() -> dict:
    return answer({"decisive": False, "kind": None, "evidence": "", "explanation": "fine so far", "confidence": 0.9})


def yes(agent: "str | None", quote: str) -> dict:
    body = {k: v for k, v in verdict(0, agent, quote).items() if k != "first_wrong_step"}
    return answer({"decisive": True, **body})


def half(which: str) -> dict:
    return answer({"half": which, "explanation": f"the {which} half"})


def whowhen_run(url: str) -> "tuple[int, int]":
    run_id = import_file(WHOWHEN / "34.json", store=url).run_ids[0]
    (tid,) = S.matching_ids(run_id=run_id, store=url)
    return run_id, tid


def hand_run(url: str, tmp_path: Path) -> "tuple[int, int]":
    path = tmp_path / "hand-team.json"
    path.write_text(json.dumps(HAND))
    run_id = import_file(path, store=url).run_ids[0]
    (tid,) = S.matching_ids(run_id=run_id, store=url)
    return run_id, tid


def judge_cli(url: str, run_id: int, server: ScriptedChatServer, *extra: str) -> int:
    return main(
        ["diagnose", str(run_id), "--judge", "gpt-4o-mini", "--base-url", server.url, "--url", url, "--no-progress"]
        + list(extra)
    )


def judged(url: str, tid: int) -> list:
    return [d for d in S.get_diagnoses(tid, store=url) if d.source == "judge"]


def asked(server: ScriptedChatServer) -> "list[str]":
    """The question each request ended with (the user message's last paragraph)."""
    return [r["body"]["messages"][-1]["content"].rsplit("\n\n", 1)[-1] for r in server.requests]


def formats(server: ScriptedChatServer) -> "list[str]":
    return [r["body"]["response_format"]["json_schema"]["name"] for r in server.requests]


# ---------------------------------------------------------------- each strategy on a team's log


@pytest.mark.parametrize("strategy", ["all_at_once", "step_by_step", "binary_search"])
def test_each_strategy_names_the_step_and_agent_the_script_chose_on_a_whowhen_run(sqlite_url, capsys, strategy):
    run_id, tid = whowhen_run(sqlite_url)
    script = {
        "all_at_once": [answer(verdict(WW_STEP, WW_AGENT, WW_QUOTE))],
        # steps 0-3 no, step 4 yes; the answers after it are never asked for
        "step_by_step": [no()] * WW_STEP + [yes(WW_AGENT, WW_QUOTE)] + [yes(WW_AGENT, WW_QUOTE)] * 3,
        # 0-7 -> second (4-7) -> first (4-5) -> first (4): log2(8) = 3 halvings, then the verdict on step 4
        "binary_search": [half("second"), half("first"), half("first"), answer(verdict(WW_STEP, WW_AGENT, WW_QUOTE))],
    }[strategy]
    with ScriptedChatServer(script) as server:
        assert judge_cli(sqlite_url, run_id, server, "--judge-strategy", strategy) == 0
    out = capsys.readouterr().out
    assert f"trajectory {tid} (" in out and f"bad_arguments at step {WW_STEP}" in out
    (d,) = judged(sqlite_url, tid)
    assert (d.kind, d.first_wrong_step, d.agent) == ("bad_arguments", WW_STEP, WW_AGENT)
    assert d.evidence["text"] == WW_QUOTE and d.evidence["quote_in"] == "content"
    meta = d.evidence["judge"]
    # every prompt shows each step's agent, never the single agent's role word
    for r in server.requests:
        prompt = r["body"]["messages"][-1]["content"]
        assert "=== step 0 · CSVProcessing_Expert · " in prompt and " · agent · " not in prompt
    assert f"=== step {WW_STEP} · {WW_AGENT} · " in server.requests[-1]["body"]["messages"][-1]["content"]
    if strategy == "all_at_once":
        assert len(server.requests) == 1 and "strategy" not in meta
        schema = server.requests[0]["body"]["response_format"]["json_schema"]["schema"]
        assert WW_AGENT in schema["properties"]["agent"]["enum"] and "agent" in schema["required"]
    elif strategy == "step_by_step":
        assert len(server.requests) == WW_STEP + 1  # stopped at the first yes
        assert [q.split(" (")[0] for q in asked(server)] == [f"Is step {i}" for i in range(WW_STEP + 1)]
        assert (
            asked(server)[-1]
            == f"Is step {WW_STEP} ({WW_AGENT}) the decisive mistake? Answer with the JSON object only."
        )
        assert set(formats(server)) == {"decisive_step"}
        # the log so far: the step asked about is the last one shown
        first = server.requests[0]["body"]["messages"][-1]["content"]
        assert "=== step 0 · " in first and "=== step 1 · " not in first
        assert (meta["strategy"], meta["questions"], meta["asked"]) == ("step_by_step", 5, [0, 1, 2, 3, 4])
    else:
        assert len(server.requests) == 3 + 1  # log2(8) halvings, then the verdict on the step left
        assert asked(server)[:3] == [
            "The decisive mistake is in steps 0-7. Is it in the first half (steps 0-3) or the second half "
            "(steps 4-7)? Answer with the JSON object only.",
            "The decisive mistake is in steps 4-7. Is it in the first half (steps 4-5) or the second half "
            "(steps 6-7)? Answer with the JSON object only.",
            "The decisive mistake is in steps 4-5. Is it in the first half (step 4) or the second half (step 5)? "
            "Answer with the JSON object only.",
        ]
        assert formats(server) == ["search_half"] * 3 + ["diagnosis_verdict"]
        assert (meta["strategy"], meta["questions"], meta["asked"], meta["narrowed_to"]) == (
            "binary_search",
            4,
            [[0, 7], [4, 7], [4, 5]],
            4,
        )


@pytest.mark.parametrize("strategy", ["all_at_once", "step_by_step", "binary_search"])
def test_each_strategy_on_a_hand_made_team_log_skips_the_persons_step(sqlite_url, tmp_path, capsys, strategy):
    run_id, tid = hand_run(sqlite_url, tmp_path)
    script = {
        "all_at_once": [answer(verdict(HAND_STEP, HAND_AGENT, HAND_QUOTE))],
        # step 0 is the person's (no agent): never asked about; steps 1-4 no, step 5 yes
        "step_by_step": [no()] * 4 + [yes(HAND_AGENT, HAND_QUOTE), yes(HAND_AGENT, HAND_QUOTE)],
        # the agents' steps 1-8 -> second (5-8) -> first (5-6) -> first (5): 3 halvings, then the verdict
        "binary_search": [half("second"), half("first"), half("first"), answer(verdict(HAND_STEP, None, HAND_QUOTE))],
    }[strategy]
    with ScriptedChatServer(script) as server:
        assert judge_cli(sqlite_url, run_id, server, "--judge-strategy", strategy) == 0
    (d,) = judged(sqlite_url, tid)
    assert (d.kind, d.first_wrong_step, d.agent) == ("bad_arguments", HAND_STEP, HAND_AGENT)
    prompt = server.requests[0]["body"]["messages"][-1]["content"]
    assert "=== step 0 · user · " in prompt and "=== step 1 · Orchestrator · " in prompt
    assert "## Team: the agents" in prompt and "- ComputerTerminal" in prompt
    if strategy == "step_by_step":
        assert d.evidence["judge"]["asked"] == [1, 2, 3, 4, 5] and len(server.requests) == 5
    if strategy == "binary_search":
        # the verdict left out the agent: the step the search chose gives it
        assert d.evidence["judge"]["asked"] == [[1, 8], [5, 8], [5, 6]] and len(server.requests) == 4


def test_a_single_agents_log_under_each_strategy_names_no_agent(sqlite_url, capsys):
    run_id, tids = store_run(S.connect(sqlite_url), [misread()])
    tid = tids["two_step-001"]
    quote = "7951 + 821"
    with ScriptedChatServer([no(), no(), no(), yes(None, quote)]) as server:
        assert judge_cli(sqlite_url, run_id, server, "--judge-strategy", "step_by_step") == 0
    assert [q.split(" the")[0] for q in asked(server)] == ["Is step 0", "Is step 1", "Is step 2", "Is step 3"]
    schema = server.requests[0]["body"]["response_format"]["json_schema"]["schema"]
    assert "agent" not in schema["properties"]
    assert "=== step 0 · user · " in server.requests[0]["body"]["messages"][-1]["content"]
    (d,) = judged(sqlite_url, tid)
    assert (d.first_wrong_step, d.agent, d.evidence["quote_in"]) == (3, None, "call")
    # six steps: 0-5 -> second (3-5) -> first (3): two halvings here (floor(log2 6); ceil is 3), then the verdict
    with ScriptedChatServer([half("second"), half("first"), answer(verdict(3, None, quote))]) as server:
        assert judge_cli(sqlite_url, run_id, server, "--judge-strategy", "binary_search") == 0
    assert len(server.requests) == 3 and "agent" not in json.dumps(server.requests[-1]["body"]["response_format"])
    (d,) = judged(sqlite_url, tid)
    assert (d.first_wrong_step, d.agent, d.evidence["judge"]["asked"]) == (3, None, [[0, 5], [3, 5]])


# ---------------------------------------------------------------- what is refused


@pytest.mark.parametrize(
    "strategy, script, reason",
    [
        (
            "all_at_once",
            [answer(verdict(WW_STEP, WW_AGENT, "12 wheels each"))] * 2,
            "the evidence '12 wheels each' is not a quote from step 4",
        ),
        (
            "step_by_step",
            [no()] * WW_STEP + [yes(WW_AGENT, "12 wheels each")] * 2,
            "step_by_step at step 4: the evidence '12 wheels each' is not a quote from step 4",
        ),
        (
            "binary_search",
            [half("second"), half("first"), half("first")] + [answer(verdict(WW_STEP, WW_AGENT, "12 wheels each"))] * 2,
            "binary_search at step 4: the evidence '12 wheels each' is not a quote from step 4",
        ),
    ],
    ids=["all_at_once", "step_by_step", "binary_search"],
)
def test_a_quote_not_in_the_step_is_asked_again_once_then_refused_in_one_line(
    sqlite_url, capsys, strategy, script, reason
):
    run_id, tid = whowhen_run(sqlite_url)
    before = [d.to_dict() for d in S.get_diagnoses(tid, store=sqlite_url)]
    with ScriptedChatServer(script) as server:
        assert judge_cli(sqlite_url, run_id, server, "--judge-strategy", strategy) == 0
    assert len(server.requests) == len(script)  # the bad verdict asked again once, with the reason
    assert reason.split(": ")[-1] in server.requests[-1]["body"]["messages"][-1]["content"]
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith(f"trajectory {tid}")]
    assert line.endswith(f"refused: {reason}")
    assert "judged 1 trajectory: 0 verdicts, 1 refused, 0 from the cache" in out
    assert [d.to_dict() for d in S.get_diagnoses(tid, store=sqlite_url)] == before  # nothing stored


@pytest.mark.parametrize(
    "bad, reason",
    [
        (
            verdict(WW_STEP, "Verification_Expert", WW_QUOTE),
            "step 4 was taken by Locomotive_Expert, not Verification_Expert",
        ),
        (verdict(WW_STEP, "Zed", WW_QUOTE), "the agent 'Zed' is not an agent of this team (CSVProcessing_Expert,"),
        (
            verdict(WW_STEP, None, WW_QUOTE),
            "a team's verdict must name the agent to blame (one of CSVProcessing_Expert,",
        ),
    ],
    ids=["another-agents-step", "not-in-the-team", "no-agent"],
)
def test_a_teams_verdict_must_name_the_agent_of_its_step(sqlite_url, capsys, bad, reason):
    run_id, tid = whowhen_run(sqlite_url)
    with ScriptedChatServer([answer(bad)] * 2) as server:
        assert judge_cli(sqlite_url, run_id, server) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith(f"trajectory {tid}")]
    assert f"refused: {reason}" in line
    assert judged(sqlite_url, tid) == []


def test_the_strategy_needs_a_judge_and_is_one_of_three(sqlite_url, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "1", "--judge-strategy", "step_by_step", "--url", sqlite_url])
    assert exc.value.code == 2 and "--judge-strategy need --judge SPEC" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "1", "--judge", "gpt-4o-mini", "--judge-strategy", "halving", "--url", sqlite_url])
    assert exc.value.code == 2 and "invalid choice: 'halving'" in capsys.readouterr().err


# ---------------------------------------------------------------- the cache and the queue


def test_each_strategys_verdict_is_cached_apart(sqlite_url, capsys):
    run_id, tid = whowhen_run(sqlite_url)
    with ScriptedChatServer([answer(verdict(WW_STEP, WW_AGENT, WW_QUOTE))]) as server:
        assert judge_cli(sqlite_url, run_id, server) == 0
    with ScriptedChatServer([]) as again:  # all_at_once again: from the cache (its key is the one it always had)
        assert judge_cli(sqlite_url, run_id, again, "--judge-strategy", "all_at_once") == 0
    assert again.requests == []
    bs = [half("second"), half("first"), half("first"), answer(verdict(WW_STEP, WW_AGENT, WW_QUOTE))]
    with ScriptedChatServer(bs) as server:  # another strategy is another question
        assert judge_cli(sqlite_url, run_id, server, "--judge-strategy", "binary_search") == 0
    assert len(server.requests) == 4
    capsys.readouterr()
    with ScriptedChatServer([]) as again:
        assert judge_cli(sqlite_url, run_id, again, "--judge-strategy", "binary_search") == 0
    assert again.requests == []
    assert "bad_arguments at step 4 (cached)" in capsys.readouterr().out
    with ScriptedChatServer([no()] * WW_STEP + [yes(WW_AGENT, WW_QUOTE)]) as server:
        assert judge_cli(sqlite_url, run_id, server, "--judge-strategy", "step_by_step") == 0
    assert len(server.requests) == 5
    (d,) = judged(sqlite_url, tid)
    assert d.evidence["judge"]["strategy"] == "step_by_step" and d.agent == WW_AGENT


def test_a_queued_judge_job_carries_the_strategy_to_the_worker(sqlite_url, capsys):
    run_id, tid = whowhen_run(sqlite_url)
    bs = [half("second"), half("first"), half("first"), answer(verdict(WW_STEP, WW_AGENT, WW_QUOTE))]
    with ScriptedChatServer(bs) as server:
        args = ["--queue", "--judge-strategy", "binary_search"]
        assert judge_cli(sqlite_url, run_id, server, *args) == 0
        (job,) = S.list_judge_jobs(run_id=run_id, store=sqlite_url)
        assert job.options == {"strategy": "binary_search"} and server.requests == []
        Worker(S.connect(sqlite_url), exit_when_idle=True, heartbeat_s=0.2).run()
    job = S.get_judge_job(job.id, store=sqlite_url)
    assert (job.status, job.n_verdicts, job.n_refused) == ("done", 1, 0)
    assert len(server.requests) == 4 and formats(server) == ["search_half"] * 3 + ["diagnosis_verdict"]
    (d,) = judged(sqlite_url, tid)
    assert (d.first_wrong_step, d.agent, d.evidence["judge"]["strategy"]) == (WW_STEP, WW_AGENT, "binary_search")


def test_the_estimate_counts_each_strategys_questions_at_most(sqlite_url):
    from evalrx.diagnosis.judge import MAX_ANSWER_TOKENS
    from evalrx.runner import JudgeConfig, estimate_judge

    run_id, tid = whowhen_run(sqlite_url)
    with ScriptedChatServer([answer(verdict(WW_STEP, WW_AGENT, WW_QUOTE))]) as server:
        est = {
            s: estimate_judge(
                JudgeConfig("gpt-4o-mini", base_url=server.url, strategy=s).checked(), [tid], store=sqlite_url
            )
            for s in ("all_at_once", "step_by_step", "binary_search")
        }
        # 8 steps: all_at_once 1 question, step_by_step up to 8, binary_search log2(8) + 1 = 4
        assert [est[s].answer_tokens for s in est] == [MAX_ANSWER_TOKENS * q for q in (1, 8, 4)]
        assert abs(est["binary_search"].prompt_tokens - 4 * est["all_at_once"].prompt_tokens) <= 2  # rounded once
        assert judge_cli(sqlite_url, run_id, server) == 0
        after = estimate_judge(JudgeConfig("gpt-4o-mini", base_url=server.url).checked(), [tid], store=sqlite_url)
        other = estimate_judge(
            JudgeConfig("gpt-4o-mini", base_url=server.url, strategy="binary_search").checked(), [tid], store=sqlite_url
        )
    assert (after.cached, other.cached) == (1, 0)  # a verdict of one strategy does not answer another's
    with pytest.raises(
        ValueError, match="the judge's strategy must be one of all_at_once, step_by_step, binary_search"
    ):
        JudgeConfig("gpt-4o-mini", strategy="halving").checked()
    assert JudgeConfig("gpt-4o-mini", strategy="all_at_once").checked().strategy is None  # the default: no option

"""A judge model as a diagnosis source, end to end through `evalrx diagnose RUN --judge SPEC` and a real
loopback OpenAI-compatible server with scripted answers: a checked verdict is stored as source `judge`, shown
and exported; bad answers are asked again once, then refused with a one-line reason; the deadline and a 429
hold; the key reaches only the judge's server; the cache makes a second run free."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from loopback import ScriptedChatServer, completion
from test_diagnosis_store import misread, passing, store_run

import evalrx.interop as X
import evalrx.store as S
from evalrx.cli import main
from evalrx.diagnosis import PROMPT_VERSION
from evalrx.runner.diagnose import rediagnose

KEY = "sk-judge-0123456789-secret"
VALID = {
    "kind": "misread_observation",
    "first_wrong_step": 3,
    "evidence": "7951  +\n821",  # whitespace differs from the call's arguments: normalised, still a quote
    "explanation": "The height 7915 was copied as 7951.",
    "confidence": 0.8,
}


@pytest.fixture(autouse=True)
def _no_ambient_openai(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def answer(obj) -> dict:
    return completion(obj if isinstance(obj, str) else json.dumps(obj))


def one_failed_run(url: str) -> "tuple[int, int]":
    """A run with the misread trajectory (failed: rules say misread_observation at 3) and a passing one."""
    run_id, tids = store_run(S.connect(url), [misread(), passing()])
    return run_id, tids["two_step-001"]


def judge_cli(url: str, run_id: int, server: ScriptedChatServer, *extra: str) -> int:
    return main(
        ["diagnose", str(run_id), "--judge", "gpt-4o-mini", "--base-url", server.url, "--url", url, "--no-progress"]
        + list(extra)
    )


def judged(url: str, tid: int) -> list:
    return [d for d in S.get_diagnoses(tid, store=url) if d.source == "judge"]


# ---------------------------------------------------------------- a verdict that holds


def test_a_valid_verdict_is_stored_as_source_judge_shown_and_exported(sqlite_url, tmp_path, capsys):
    run_id, tid = one_failed_run(sqlite_url)
    before = S.get_diagnoses(tid, store=sqlite_url)
    with ScriptedChatServer([answer(VALID)]) as server:
        assert judge_cli(sqlite_url, run_id, server) == 0
    out = capsys.readouterr().out
    assert f"trajectory {tid} (two_step-001): misread_observation at step 3" in out
    assert "judged 1 trajectory: 1 verdict, 0 refused, 0 from the cache" in out
    assert len(server.requests) == 1  # only the failed trajectory; the passing one needs --all
    sent = server.requests[0]["body"]
    assert sent["response_format"]["type"] == "json_schema"  # the api backend asks for the schema
    assert "misread_observation" in sent["response_format"]["json_schema"]["schema"]["properties"]["kind"]["enum"]
    assert sent["temperature"] == 0.0

    got = S.get_diagnoses(tid, store=sqlite_url)
    assert [d.to_dict() for d in got[:-1]] == [d.to_dict() for d in before]  # the rules' rank first, unchanged
    j = got[-1]
    assert (j.source, j.kind, j.first_wrong_step, j.confidence) == ("judge", "misread_observation", 3, 0.8)
    assert j.evidence["text"] == "7951 + 821" and j.evidence["quote_in"] == "call"
    assert j.evidence["explanation"] == "The height 7915 was copied as 7951."
    meta = j.evidence["judge"]
    assert (meta["spec"], meta["backend"], meta["prompt_version"], meta["variant"]) == (
        "gpt-4o-mini",
        "api",
        PROMPT_VERSION,
        "plain",
    )
    assert (meta["prompt_tokens"], meta["completion_tokens"], meta["tries"]) == (50, 20, 1)
    assert meta["latency_ms"] > 0 and meta["server"] == server.url
    assert S.get_trajectory(tid, store=sqlite_url).diagnoses[-1].source == "judge"

    path = tmp_path / "judged.jsonl"
    X.export_run(run_id, path, store=sqlite_url)
    row = next(r for r in map(json.loads, path.read_text().splitlines()) if r["case_id"] == "two_step-001")
    assert row["diagnosis"]["source"] == "reference"  # the top keeps the fixed order of sources
    assert [d["source"] for d in row["diagnoses"]] == [d.source for d in got]
    assert row["diagnoses"][-1] == j.to_dict()


def test_a_judge_on_a_passing_trajectory_is_kept_but_never_counted_as_a_failure(sqlite_url, capsys):
    run_id, tid = one_failed_run(sqlite_url)
    alarm = {**VALID, "kind": "wrong_final_answer", "first_wrong_step": 3, "evidence": "1124"}
    with ScriptedChatServer([answer(VALID), answer(alarm)]) as server:
        assert judge_cli(sqlite_url, run_id, server, "--all") == 0
    assert len(server.requests) == 2
    passing_tid = next(r.id for r in S.list_trajectories(run_id=run_id, store=sqlite_url).rows if r.id != tid)
    assert [d.kind for d in S.get_diagnoses(passing_tid, store=sqlite_url)] == ["wrong_final_answer"]
    assert S.failure_kind_counts(run_id, store=sqlite_url) == {"misread_observation": 1}


def test_a_custom_kind_of_the_store_is_in_the_vocabulary(sqlite_url, capsys):
    S.save_kind("copied_wrong_digit", "swapped two digits of a number it read", store=sqlite_url)
    run_id, tid = one_failed_run(sqlite_url)
    with ScriptedChatServer([answer({**VALID, "kind": "copied_wrong_digit"})]) as server:
        assert judge_cli(sqlite_url, run_id, server) == 0
    assert (
        "- copied_wrong_digit: swapped two digits of a number it read"
        in (server.requests[0]["body"]["messages"][0]["content"])
    )
    assert judged(sqlite_url, tid)[0].kind == "copied_wrong_digit"


# ---------------------------------------------------------------- answers that do not hold


@pytest.mark.parametrize(
    "bad, reason",
    [
        ('{"kind": "misread_observation", "first_wrong_step": 3,', "the answer is not JSON"),
        ({**VALID, "kind": "bad_vibes"}, "the kind 'bad_vibes' is not in the vocabulary"),
        ({**VALID, "first_wrong_step": 42}, "step 42 is not a step of this trajectory (its steps are 0-5)"),
        ({**VALID, "evidence": "7915 + 821"}, "the evidence '7915 + 821' is not a quote from step 3"),
    ],
    ids=["invalid-json", "kind-outside-vocabulary", "no-such-step", "quote-not-in-step"],
)
def test_a_bad_answer_is_asked_again_once_then_refused_with_its_reason(sqlite_url, capsys, bad, reason):
    run_id, tid = one_failed_run(sqlite_url)
    before = [d.to_dict() for d in S.get_diagnoses(tid, store=sqlite_url)]
    with ScriptedChatServer([answer(bad), answer(bad)]) as server:
        assert judge_cli(sqlite_url, run_id, server) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith(f"trajectory {tid}"))
    assert f"refused: {reason}" in line
    assert "judged 1 trajectory: 0 verdicts, 1 refused, 0 from the cache" in out
    assert len(server.requests) == 2  # asked once more, with the reason
    retry = server.requests[1]["body"]["messages"]
    assert retry[-2]["role"] == "assistant" and retry[-1]["role"] == "user"
    assert reason in retry[-1]["content"]
    assert [d.to_dict() for d in S.get_diagnoses(tid, store=sqlite_url)] == before  # nothing stored


def test_a_bad_answer_fixed_on_the_retry_is_stored(sqlite_url, capsys):
    run_id, tid = one_failed_run(sqlite_url)
    with ScriptedChatServer([answer("Sure! The kind is misread."), answer(f"```json\n{json.dumps(VALID)}\n```")]) as s:
        assert judge_cli(sqlite_url, run_id, s) == 0
    assert judged(sqlite_url, tid)[0].evidence["judge"]["tries"] == 2
    assert judged(sqlite_url, tid)[0].evidence["judge"]["prompt_tokens"] == 100  # both calls counted


# ---------------------------------------------------------------- the server's failures


def test_a_hanging_judge_ends_at_the_deadline_and_nothing_is_stored_or_cached(sqlite_url, capsys):
    run_id, tid = one_failed_run(sqlite_url)
    before = [d.to_dict() for d in S.get_diagnoses(tid, store=sqlite_url)]
    with ScriptedChatServer([(200, answer(VALID), {}, 30.0)]) as server:
        started = time.monotonic()
        assert judge_cli(sqlite_url, run_id, server, "--timeout", "1") == 1
        took = time.monotonic() - started
    assert took < 10
    captured = capsys.readouterr()
    line = next(x for x in captured.out.splitlines() if x.startswith(f"trajectory {tid}"))
    assert "failed: the judge's call failed:" in line and "did not answer within 1 s" in line
    assert "1 failed calls (nothing stored for them; run again to retry)" in captured.out
    assert "Traceback" not in captured.err
    assert [d.to_dict() for d in S.get_diagnoses(tid, store=sqlite_url)] == before
    with ScriptedChatServer([answer(VALID)]) as again:  # not cached: the next run asks
        assert judge_cli(sqlite_url, run_id, again) == 0
    assert len(again.requests) == 1 and judged(sqlite_url, tid)


def test_a_429_with_retry_after_is_waited_out_then_the_verdict_stored(sqlite_url, capsys):
    run_id, tid = one_failed_run(sqlite_url)
    busy = (429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"Retry-After": "1"})
    with ScriptedChatServer([busy, answer(VALID)]) as server:
        started = time.monotonic()
        assert judge_cli(sqlite_url, run_id, server) == 0
        took = time.monotonic() - started
    assert len(server.requests) == 2 and took >= 1.0
    assert judged(sqlite_url, tid)[0].kind == "misread_observation"


def test_a_server_without_json_schema_is_asked_again_without_it(sqlite_url, capsys):
    run_id, tid = one_failed_run(sqlite_url)
    refuse = (400, {"error": {"message": "response_format is not supported", "type": "invalid_request_error"}})
    with ScriptedChatServer([refuse, answer(VALID)]) as server:
        assert judge_cli(sqlite_url, run_id, server) == 0
    assert "response_format" in server.requests[0]["body"]
    assert "response_format" not in server.requests[1]["body"]
    assert judged(sqlite_url, tid)[0].evidence["judge"]["json_schema"] is False


# ---------------------------------------------------------------- the key and the cache


def test_the_key_reaches_only_the_judges_server_never_the_store_output_or_export(
    sqlite_url, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    run_id, tid = one_failed_run(sqlite_url)
    with ScriptedChatServer([answer(VALID)]) as other:  # the server the run's own model would use
        with S.connect(sqlite_url).write() as s:
            from evalrx.store import schema as t

            run = s.get(t.Run, run_id)
            run.config = {**run.config, "base_url": other.url}
        with ScriptedChatServer([answer(VALID)]) as server:
            assert judge_cli(sqlite_url, run_id, server, "--api-key-env", "JUDGE_KEY") == 0
    assert [r["headers"].get("authorization") for r in server.requests] == [f"Bearer {KEY}"]
    assert other.requests == []
    captured = capsys.readouterr()
    assert KEY not in captured.out + captured.err
    path = tmp_path / "out.jsonl"
    X.export_run(run_id, path, store=sqlite_url)
    assert KEY not in path.read_text()
    S.forget(sqlite_url)
    assert KEY.encode() not in Path(sqlite_url.removeprefix("sqlite:///")).read_bytes()
    assert judged(sqlite_url, tid)


def test_an_unset_key_variable_is_one_line(sqlite_url, capsys, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    run_id, _ = one_failed_run(sqlite_url)
    with ScriptedChatServer([]) as server:
        assert judge_cli(sqlite_url, run_id, server, "--api-key-env", "NO_SUCH_KEY") == 2
    err = capsys.readouterr().err
    assert err.strip() == "evalrx: error: --api-key-env NO_SUCH_KEY: that environment variable is empty or unset"
    assert server.requests == []


def test_judge_flags_without_a_judge_are_refused(sqlite_url, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "1", "--all", "--limit", "2", "--url", sqlite_url])
    assert exc.value.code == 2
    assert "--limit, --all need --judge SPEC" in capsys.readouterr().err


def test_a_second_run_reads_the_cache_and_makes_no_request(sqlite_url, capsys):
    run_id, tid = one_failed_run(sqlite_url)
    with ScriptedChatServer([answer(VALID)]) as server:
        assert judge_cli(sqlite_url, run_id, server) == 0
    first = [d.to_dict() for d in judged(sqlite_url, tid)]
    capsys.readouterr()
    with ScriptedChatServer([]) as again:
        assert judge_cli(sqlite_url, run_id, again) == 0
    assert again.requests == []
    out = capsys.readouterr().out
    assert "misread_observation at step 3 (cached)" in out and "1 from the cache" in out
    assert [d.to_dict() for d in judged(sqlite_url, tid)] == first
    with ScriptedChatServer([answer({**VALID, "confidence": 0.5})]) as other:  # another judge is asked
        assert (
            main(
                [
                    "diagnose",
                    str(run_id),
                    "--judge",
                    "gpt-4.1",
                    "--base-url",
                    other.url,
                    "--url",
                    sqlite_url,
                    "--no-progress",
                ]
            )
            == 0
        )
    assert len(other.requests) == 1
    assert [(d.evidence["judge"]["spec"], d.confidence) for d in judged(sqlite_url, tid)] == [("gpt-4.1", 0.5)]


def test_a_refusal_is_cached_too(sqlite_url, capsys):
    run_id, _ = one_failed_run(sqlite_url)
    bad = answer({**VALID, "first_wrong_step": 42})
    with ScriptedChatServer([bad, bad]) as server:
        judge_cli(sqlite_url, run_id, server)
    capsys.readouterr()
    with ScriptedChatServer([]) as again:
        assert judge_cli(sqlite_url, run_id, again) == 0
    assert again.requests == []
    assert "refused: step 42 is not a step of this trajectory" in capsys.readouterr().out


# ---------------------------------------------------------------- beside the other sources


def test_rediagnose_keeps_the_judges_candidate_and_a_new_judge_replaces_only_its_own(sqlite_url, capsys):
    run_id, tid = one_failed_run(sqlite_url)
    with ScriptedChatServer([answer(VALID)]) as server:
        judge_cli(sqlite_url, run_id, server)
    with_judge = [d.to_dict() for d in S.get_diagnoses(tid, store=sqlite_url)]
    assert rediagnose([tid], store=sqlite_url) == 1
    assert [d.to_dict() for d in S.get_diagnoses(tid, store=sqlite_url)] == with_judge

    other = {**VALID, "kind": "bad_arguments", "evidence": "calculator", "confidence": 0.6}
    with ScriptedChatServer([answer(other)]) as server:
        judge_cli(sqlite_url, run_id, server, "--with-findings")
    prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert "What automatic checks found" in prompt and "misread_observation at step 3 (reference)" in prompt
    after = S.get_diagnoses(tid, store=sqlite_url)
    assert [d.to_dict() for d in after if d.source != "judge"] == [d for d in with_judge if d["source"] != "judge"]
    assert [(d.kind, d.evidence["judge"]["variant"]) for d in after if d.source == "judge"] == [
        ("bad_arguments", "with_findings")
    ]


def test_export_then_import_keeps_every_sources_candidates(sqlite_url, tmp_path, capsys):
    run_id, tid = one_failed_run(sqlite_url)
    with ScriptedChatServer([answer(VALID)]) as server:
        judge_cli(sqlite_url, run_id, server)
    path = tmp_path / "judged.jsonl"
    X.export_run(run_id, path, store=sqlite_url)
    res = X.import_file(path, store=sqlite_url, run_name="again")
    new_tid = S.find_trajectory(res.run_ids[0], "two_step-001", store=sqlite_url)
    assert [d.to_dict() for d in S.get_diagnoses(new_tid, store=sqlite_url)] == [
        d.to_dict() for d in S.get_diagnoses(tid, store=sqlite_url)
    ]
    again = tmp_path / "again.jsonl"
    X.export_run(res.run_ids[0], again, store=sqlite_url)
    rows = [json.loads(x) for x in again.read_text().splitlines()]
    assert [r["diagnoses"] for r in rows] == [json.loads(x)["diagnoses"] for x in path.read_text().splitlines()]


def test_the_answer_limit_and_the_prompt_size_are_the_users_to_set(sqlite_url, capsys):
    run_id, tid = one_failed_run(sqlite_url)
    with ScriptedChatServer([answer(VALID)]) as wide:
        assert judge_cli(sqlite_url, run_id, wide) == 0
    with ScriptedChatServer([answer(VALID)]) as narrow:  # a smaller prompt is another question: not cached
        extra = ("--max-new-tokens", "40", "--max-steps", "2", "--max-step-chars", "40")
        assert judge_cli(sqlite_url, run_id, narrow, *extra) == 0
    sent = [s.requests[0]["body"] for s in (wide, narrow)]
    assert sent[0]["max_tokens"] == 512 and sent[1]["max_tokens"] == 40
    prompts = [b["messages"][-1]["content"] for b in sent]
    assert "steps 1-4 left out" in prompts[1] and len(prompts[1]) < len(prompts[0])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        judge_cli(sqlite_url, run_id, narrow, "--max-steps", "1")
    assert exc.value.code == 2
    assert "argument --max-steps: must be a whole number from 2 to 10000" in capsys.readouterr().err

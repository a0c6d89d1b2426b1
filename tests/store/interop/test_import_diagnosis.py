"""Imports get a diagnosis from the model-free rules: a real Inspect AI log and OpenAI chat JSONL.

The Inspect log is written by `inspect_ai` itself (its `mockllm/model` provider, offline),
not by hand, so the test breaks when Inspect's log format drifts away from what
`evalrx.interop` reads.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import tool

import evalrx.interop as X
import evalrx.store as S
from evalrx.core.case import StepRole

# inspect_ai's own retry setup calls tenacity with a deprecated argument; not this project's warning
pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")

_ARITHMETIC = re.compile(r"^[\d\s+\-*/().]+$")

# question -> (the calculator call the mock model makes, its final answer after the tool said 42)
SCRIPT = {
    "What is 6 * 7?": ("6 * 7", "The answer is 24."),  # ignores the tool's 42: scored incorrect
    "What is 40 + 2?": ("40 + 2", "The answer is 42."),  # correct
}


@tool
def calculator():
    async def execute(expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: The expression, e.g. "6 * 7".

        Returns:
            The value of the expression.
        """
        if not _ARITHMETIC.match(expression):
            raise ValueError(f"not arithmetic: {expression!r}")
        value = eval(expression, {"__builtins__": {}}, {})  # noqa: S307 - digits and operators only
        return str(int(value) if float(value).is_integer() else value)

    return execute


def _usage() -> ModelUsage:
    # Set so mockllm does not count tokens itself (that loads a tiktoken encoding, which may need the network).
    return ModelUsage(input_tokens=20, output_tokens=8, total_tokens=28)


def _mock_model(messages, tools, tool_choice, config) -> ModelOutput:
    """The mock model: calls the calculator once, then answers from SCRIPT (per sample, in any order)."""
    question = next(m.text for m in messages if m.role == "user")
    expression, answer = SCRIPT[question]
    if not any(m.role == "tool" for m in messages):
        out = ModelOutput.for_tool_call(
            "mockllm/model", "calculator", {"expression": expression}, content="Let me use the calculator."
        )
    else:
        out = ModelOutput.from_content("mockllm/model", answer)
    out.usage = _usage()
    return out


@pytest.fixture
def inspect_log(tmp_path, monkeypatch):
    """A JSON eval log that inspect_ai wrote for two samples (one answers 24 after the tool said 42)."""
    monkeypatch.setenv("INSPECT_DISPLAY", "none")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))  # Inspect's traces, not the developer's
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    task = Task(
        dataset=[
            Sample(id="ignored", input="What is 6 * 7?", target="42"),
            Sample(id="correct", input="What is 40 + 2?", target="42"),
        ],
        solver=[use_tools(calculator()), generate()],
        scorer=includes(),
        name="calculator_task",
    )
    # In a thread of its own: Inspect starts an event loop, and another test's browser may hold this thread's.
    with ThreadPoolExecutor(1) as pool:
        logs = pool.submit(
            inspect_eval,
            task,
            model="mockllm/model",
            model_args={"custom_outputs": _mock_model},
            log_dir=str(tmp_path / "logs"),
            log_format="json",
            display="none",
        ).result()
    assert len(logs) == 1 and logs[0].status == "success", logs[0].error
    files = list((tmp_path / "logs").glob("*.json"))
    assert len(files) == 1, files
    return files[0]


def _rows(run_id, store):
    return {r.sample_id: r for r in S.list_trajectories(run_id=run_id, store=store, descending=False).rows}


def test_real_inspect_log_gets_ignored_observation(inspect_log, store_url):
    # what Inspect wrote: the scorer graded the 24 incorrect and the 42 correct
    raw = json.loads(inspect_log.read_text())
    assert {s["id"]: next(iter(s["scores"].values()))["value"] for s in raw["samples"]} == {
        "ignored": "I",
        "correct": "C",
    }

    res = X.import_file(inspect_log, store=store_url)
    assert res.format == "inspect" and res.n_trajectories == 2 and len(res.run_ids) == 1
    rows = _rows(res.run_ids[0], store_url)
    assert set(rows) == {"ignored", "correct"}
    assert rows["ignored"].outcome == "fail" and rows["correct"].outcome == "pass"

    t = S.get_trajectory(rows["ignored"].id, store=store_url).trajectory
    tool_steps = [s for s in t.steps if s.role is StepRole.TOOL]
    assert [s.observation.value for s in tool_steps] == ["42"]  # the calculator's real output, as Inspect logged it
    assert t.final_answer == "The answer is 24."
    last_actor = max(s.idx for s in t.steps if s.role is StepRole.ACTOR)

    found = S.get_diagnoses(rows["ignored"].id, store=store_url)
    assert found, "the failed sample has no diagnosis"
    top = found[0]
    assert (top.kind, top.first_wrong_step, top.source) == ("ignored_observation", last_actor, "heuristic"), top
    assert "42" in json.dumps(top.evidence), top.evidence
    assert rows["ignored"].diagnosis_kind == "ignored_observation"

    assert rows["correct"].diagnosis_kind is None
    assert S.get_diagnoses(rows["correct"].id, store=store_url) == []


def _call(call_id: str, expression: str) -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})},
    }


OPENAI_ROWS = [
    # the tool said 42, the answer says 24: graded fail by whoever wrote the transcript
    {
        "id": "contradicts",
        "expected": "42",
        "outcome": "fail",
        "messages": [
            {"role": "system", "content": "Use the calculator for arithmetic."},
            {"role": "user", "content": "What is 6 * 7?"},
            {"role": "assistant", "content": None, "tool_calls": [_call("call_1", "6 * 7")]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            {"role": "assistant", "content": "The answer is 24."},
        ],
    },
    # the same call twice (steps 1 and 3); no verdict in the transcript, the rules still run
    {
        "id": "repeats",
        "messages": [
            {"role": "user", "content": "What is 12 + 30?"},
            {"role": "assistant", "content": "", "tool_calls": [_call("call_a", "12 + 30")]},
            {"role": "tool", "tool_call_id": "call_a", "content": "42"},
            {"role": "assistant", "content": "Let me check that again.", "tool_calls": [_call("call_b", "12 + 30")]},
            {"role": "tool", "tool_call_id": "call_b", "content": "42"},
            {"role": "assistant", "content": "The answer is 42."},
        ],
    },
    # right answer, graded pass: no diagnosis
    {
        "id": "fine",
        "expected": "42",
        "outcome": "pass",
        "messages": [
            {"role": "user", "content": "What is 40 + 2?"},
            {"role": "assistant", "content": None, "tool_calls": [_call("call_x", "40 + 2")]},
            {"role": "tool", "tool_call_id": "call_x", "content": "42"},
            {"role": "assistant", "content": "It is 42."},
        ],
    },
]


def test_openai_chat_jsonl_gets_rule_diagnoses(store_url, tmp_path):
    f = tmp_path / "chats.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in OPENAI_ROWS))
    res = X.import_file(f, store=store_url)
    assert res.format == "openai" and res.n_trajectories == 3
    rows = _rows(res.run_ids[0], store_url)

    # contradicts: user 0, call 1, tool 2, answer 3
    t = S.get_trajectory(rows["contradicts"].id, store=store_url).trajectory
    assert [s.role for s in t.steps] == [StepRole.USER, StepRole.ACTOR, StepRole.TOOL, StepRole.ACTOR]
    top = S.get_diagnoses(rows["contradicts"].id, store=store_url)[0]
    assert (top.kind, top.first_wrong_step, top.source) == ("ignored_observation", 3, "heuristic"), top
    assert "42" in json.dumps(top.evidence) and "24" in json.dumps(top.evidence), top.evidence
    assert rows["contradicts"].diagnosis_kind == "ignored_observation"

    # repeats: user 0, call 1, tool 2, the same call 3, tool 4, answer 5
    assert rows["repeats"].outcome == "unknown"
    top = S.get_diagnoses(rows["repeats"].id, store=store_url)[0]
    assert (top.kind, top.first_wrong_step, top.source) == ("repeated_calls", 3, "heuristic"), top
    assert top.evidence["actual"] == {"name": "calculator", "args": {"expression": "12 + 30"}}
    assert "first at step 1" in top.evidence["text"]
    assert rows["repeats"].diagnosis_kind == "repeated_calls"

    assert rows["fine"].diagnosis_kind is None and S.get_diagnoses(rows["fine"].id, store=store_url) == []
    assert S.failure_kind_counts(res.run_ids[0], store=store_url) == {"ignored_observation": 1, "repeated_calls": 1}


def test_parallel_calls_answered_out_of_order_pair_by_tool_call_id(sqlite_url, tmp_path):
    """Two calls in one turn whose results come back in the other order (OpenAI allows it: tool_call_id says which)."""
    row = {
        "id": "parallel",
        "expected": "42 and 4",
        "outcome": "fail",
        "messages": [
            {"role": "user", "content": "What is 6 * 7, and what is 2 + 2?"},
            {"role": "assistant", "content": None, "tool_calls": [_call("call_a", "6 * 7"), _call("call_b", "2 + 2")]},
            {"role": "tool", "tool_call_id": "call_b", "content": "4"},
            {"role": "tool", "tool_call_id": "call_a", "content": "42"},
            {"role": "assistant", "content": "6 * 7 is 42 and 2 + 2 is 5."},
        ],
    }
    f = tmp_path / "parallel.jsonl"
    f.write_text(json.dumps(row) + "\n")
    res = X.import_file(f, store=sqlite_url)
    tid = _rows(res.run_ids[0], sqlite_url)["parallel"].id
    # the last call (2 + 2) returned 4 and the answer says 5: the same as when the results come in call order
    top = S.get_diagnoses(tid, store=sqlite_url)[0]
    assert (top.kind, top.first_wrong_step, top.evidence.get("observation")) == ("ignored_observation", 4, "4"), top

"""Core types, the spec registry and capability negotiation (no model weights)."""

import json

import pytest

import evalrx
from evalrx.core import Capability, CapabilityError, FailureCase, Label, Step, StepRole, Trajectory
from evalrx.core.tool import ToolCall
from evalrx.models import resolve_spec_key
from evalrx.models.compose import compose
from evalrx.specs import REGISTRY, ModelSpec, get_spec, register_spec


def test_capability_parse_accepts_names_values_and_members():
    assert Capability.parse("hidden_states") is Capability.HIDDEN_STATES
    assert Capability.parse("HIDDEN_STATES") is Capability.HIDDEN_STATES
    assert Capability.parse(Capability.VISION) is Capability.VISION
    with pytest.raises(ValueError, match="Known: generate"):
        Capability.parse("telepathy")


def test_capability_error_names_caller_model_and_missing():
    err = CapabilityError("LogitLensAnalyzer", "gpt-4o-mini on api", {Capability.HIDDEN_STATES, Capability.LOGITS})
    msg = str(err)
    assert "LogitLensAnalyzer" in msg and "gpt-4o-mini on api" in msg
    assert "hidden_states" in msg and "logits" in msg
    assert err.missing == {Capability.HIDDEN_STATES, Capability.LOGITS}


def test_a_steps_calls_are_tool_calls_that_write_back_the_dicts_they_were_read_from():
    """An imported call keeps its extra keys, odd values and key order: stored and exported text is unchanged."""
    calls = [
        {"name": "f", "args": {"x": 1}, "raw": "f(x=1", "id": "c1", "type": "function"},
        {"id": 7, "name": "g", "args": "not an object", "raw": None},
        {"name": "h", "args": {}},
        {"args": 1},  # a nameless call an old import kept
    ]
    step = Step.from_dict({"idx": 1, "role": "actor", "tool_calls": calls})
    assert [type(c) for c in step.tool_calls] == [ToolCall] * 4
    assert step.tool_call is not None and (step.tool_call.name, step.tool_call.id) == ("f", "c1")
    assert step.tool_calls[0].extra == {"type": "function"} and step.tool_calls[1].args == {}
    assert json.dumps(step.to_dict()["tool_calls"]) == json.dumps(calls)
    with pytest.raises(ValueError, match="a tool call must be an object"):
        Step(1, StepRole.ACTOR, tool_calls=["f()"])  # type: ignore[list-item]


def test_trajectory_round_trip_is_lossless():
    traj = Trajectory(
        sample_id="c1",
        goal="What is 2+2?",
        steps=[
            Step(0, StepRole.USER, "What is 2+2?", span={"has_image": False}),
            Step(
                1,
                StepRole.ACTOR,
                "<tool_call>...",
                tool_calls=[{"name": "calculator", "args": {"expression": "2+2"}}],
                span={"latency_ms": 3.2, "prompt_tokens": 10},
            ),
            Step(2, StepRole.TOOL, "calculator", observation={"text": "4", "n_images": 0}),
            Step(3, StepRole.ACTOR, "oops", parse_error="unclosed <tool_call>"),
        ],
        final_answer="4",
        ground_truth=4,
        outcome=Label.PASS,
        metrics={"terminated": "final", "n_turns": 2},
    )
    again = Trajectory.from_dict(traj.to_dict())
    assert again == traj
    assert again.steps[1].tool_call == ToolCall("calculator", {"expression": "2+2"})
    assert again.to_dict() == traj.to_dict()
    assert again.terminated == "final"
    assert Trajectory.from_dict(__import__("json").loads(traj.to_json())) == traj


def test_failure_case_ids_are_stable():
    a, b = FailureCase.from_prompt("same"), FailureCase.from_prompt("same")
    assert a.id == b.id and a.id.startswith("case-")
    assert FailureCase.from_prompt("other").id != a.id


def test_registry_has_required_specs_and_aliases():
    for key in [
        "qwen2.5-0.5b-instruct",
        "qwen2.5-1.5b-instruct",
        "qwen2.5-3b-instruct",
        "qwen2.5-7b-instruct",
        "qwen2.5-vl-7b-instruct",
        "llama-3.1-8b-instruct",
        "mistral-7b-instruct-v0.3",
    ]:
        assert key in REGISTRY
    assert any(s.family.startswith("gemma") for s in REGISTRY.values())
    assert any(s.family == "phi3" for s in REGISTRY.values())
    assert sum(1 for s in REGISTRY.values() if s.api_only) >= 2
    assert resolve_spec_key("qwen") == "qwen2.5-7b-instruct"
    assert resolve_spec_key("Qwen2.5-7B") == "qwen2.5-7b-instruct"


def test_unknown_spec_error_lists_known_keys():
    with pytest.raises(ValueError) as exc:
        evalrx.load("qwen9-unknown")
    msg = str(exc.value)
    assert "qwen9-unknown" in msg and "qwen2.5-7b-instruct" in msg and "register_spec" in msg


def test_users_can_register_their_own_spec():
    spec = register_spec(ModelSpec("My-Org/Custom-1B", "llama", "/nonexistent/custom"), replace=True)
    try:
        assert spec.key == "my-org/custom-1b"
        assert resolve_spec_key("My-Org/Custom-1B") == "my-org/custom-1b"
        with pytest.raises(ValueError, match="already registered"):
            register_spec(ModelSpec("my-org/custom-1b", "llama"))
    finally:
        REGISTRY.pop("my-org/custom-1b", None)


def test_compose_refuses_missing_capability_before_building():
    built = []
    from evalrx.models import backends

    info = backends.BackendInfo(
        name="probe",
        description="records builds",
        provides=lambda spec: frozenset({Capability.GENERATE}),
        build=lambda spec, rt, want: built.append(spec),
    )
    backends.register_backend(info)
    try:
        with pytest.raises(CapabilityError, match="hidden_states"):
            compose(get_spec("qwen2.5-7b-instruct"), "probe", want={Capability.HIDDEN_STATES})
        assert built == []  # negotiation happened before any weight or network access
    finally:
        backends.BACKENDS.pop("probe")


def test_unknown_backend_lists_known_ones():
    with pytest.raises(ValueError) as exc:
        evalrx.load("qwen2.5-7b-instruct", backend="tpu_magic")
    assert "tpu_magic" in str(exc.value)
    for name in ("api", "hf_local", "vllm_offline"):  # other tests may register more
        assert name in str(exc.value).split("Known backends:")[1]


def test_api_only_spec_refuses_local_backends():
    with pytest.raises(ValueError, match="API-only"):
        compose(get_spec("gpt-4o-mini"), "hf_local")


def test_vllm_missing_gives_install_hint(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "vllm", None)  # behave as if vllm were not installed
    with pytest.raises(ImportError, match="pip install vllm"):
        evalrx.load("qwen2.5-0.5b-instruct", backend="vllm_offline")


def test_run_config_validates_itself_in_one_line():
    from evalrx.config import ModelConfig, RunConfig

    run = RunConfig(model=ModelConfig("evalrx-tiny"))
    assert run.validate() is run
    with pytest.raises(ValueError, match=r"^the run config names no model \(model.name\)$"):
        RunConfig.from_dict({"tools": ["calculator"]}).validate()
    bad = {"max_turns": 0, "concurrency": True, "repeats": "2", "seed": -1}
    for key, value in bad.items():
        with pytest.raises(ValueError, match=rf"^{key} must be a whole number from \d+ to \d+, got {value!r}$"):
            RunConfig.from_dict({"model": {"name": "evalrx-tiny"}, key: value}).validate()


def test_run_config_is_one_contract_from_the_form_to_the_worker():
    from evalrx.config import ModelConfig, RunConfig

    run = RunConfig(
        model=ModelConfig("evalrx-tiny", want=("logits",)),
        tools=["calculator"],
        max_turns=3,
        runtime={"max_new_tokens": 32},
        chat_kwargs={"temperature": 0.0},
        block_repeat_calls=True,
    )
    assert RunConfig.from_dict(run.to_dict()) == run
    old = dict(run.to_dict(), heuristics=True)  # a key of an earlier release is ignored, not an error
    assert RunConfig.from_dict(old) == run
    assert run.agent_kwargs() == {
        "max_turns": 3,
        "system": None,
        "block_repeat_calls": True,
        "force_final_answer": False,
        "chat_kwargs": {"temperature": 0.0},
    }


def test_a_stored_call_that_is_not_an_object_reads_back_as_its_text():
    """An older evalrx JSONL import stored a call as written ("f()"): reading that row must not raise."""
    from types import SimpleNamespace

    from evalrx.store.convert import step_from_row

    row = SimpleNamespace(
        idx=0,
        role="actor",
        content="",
        tool_calls=["f()", {"name": "g", "args": {}}],
        observation=None,
        parse_error=None,
        span={},
        agent=None,
        addressee=None,
    )
    step = step_from_row(row)
    assert [c.name for c in step.tool_calls] == ["", "g"]
    assert step.tool_calls[0].raw == '"f()"'

"""Python functions as tools (`package.module:function`): their schema, argument validation as error
observations, bad paths as one-line errors, and `get_tools` naming them beside the built-in tools.

The sample functions are in tests/fixtures/pyfuncs.py (`fixtures.pyfuncs`: conftest puts tests/ on sys.path).
"""

from __future__ import annotations

import json

import pytest

from evalrx.core.capability import Capability
from evalrx.core.case import StepRole
from evalrx.core.tool import ChatTurn, ToolCall, ToolResult
from evalrx.models.agent import ToolError, ToolExecutor, run_case
from evalrx.specs import ModelSpec
from evalrx.tools import get_tools
from evalrx.tools.python_fn import ToolArgumentError, python_tool

F = "fixtures.pyfuncs"


def test_schema_of_a_documented_typed_function():
    tool = python_tool(f"{F}:describe")
    assert (tool.name, tool.source, tool.origin) == ("describe", "python", f"{F}:describe")
    assert tool.description == "Describe the arguments it was given.\n\nA longer paragraph that says more."
    props = tool.parameters["properties"]
    assert tool.parameters["type"] == "object"
    assert tool.parameters["required"] == ["count", "ratio", "label", "flag", "values"]
    assert props["count"] == {"type": "integer", "description": "how many"}
    assert props["ratio"] == {"type": "number", "description": "a fraction"}
    assert props["label"] == {"type": "string", "description": "a name"}
    assert props["flag"] == {"type": "boolean", "description": "on or off"}
    assert props["values"] == {"type": "array", "items": {"type": "integer"}, "description": "some integers"}
    assert props["note"] == {
        "anyOf": [{"type": "string"}, {"type": "null"}],
        "default": None,
        "description": "an optional note",
    }
    assert props["mode"] == {"type": "string", "enum": ["fast", "slow"], "default": "fast", "description": "how fast"}
    assert props["scale"] == {"type": "number", "default": 1.5}  # undocumented: no description
    assert "title" not in tool.parameters and all("title" not in p for p in props.values())
    json.dumps(tool.to_openai())  # the model's schema is plain JSON


def test_google_style_docstring_and_calls_return_strings():
    tool = python_tool(f"{F}:add")
    assert tool.description == "Add two integers."
    assert tool.parameters["properties"]["a"]["description"] == "the first addend"
    assert tool.fn(a=2, b=3) == "5"
    assert tool.fn(a="2", b=3.0) == "5"  # pydantic's lax coercion of exact values


def test_validated_values_reach_the_function_with_defaults_filled():
    out = python_tool(f"{F}:describe").fn(count=3, ratio=0.5, label="x", flag=False, values=["1", 2])
    assert out == str({"count": 3, "values": [1, 2], "note": None, "mode": "fast", "scale": 1.5})


def test_untyped_positional_only_shadowing_async_methods_and_tool_results():
    untyped = python_tool(f"{F}:untyped")
    assert untyped.parameters["properties"] == {"x": {}, "y": {"default": 2}} and untyped.parameters["required"] == [
        "x"
    ]
    assert untyped.fn(x="ab") == "abab"
    assert python_tool(f"{F}:positional").fn(a=5) == "-5"
    shadowing = python_tool(f"{F}:shadowing")
    assert set(shadowing.parameters["properties"]) == {"json", "model_config"}
    assert shadowing.fn(json="j", model_config="c") == "j/c"
    assert python_tool(f"{F}:async_add").fn(a=1, b=2) == "3"
    assert python_tool(f"{F}:Calc.double").fn(x=4) == "8" and python_tool(f"{F}:Calc.triple").fn(x=2) == "6"
    assert python_tool(f"{F}:Calc.double").name == "Calc.double"
    result = python_tool(f"{F}:picture").fn()
    assert isinstance(result, ToolResult) and result.meta == {"kind": "test"}
    assert python_tool("math:factorial").fn(n=5) == "120"  # a builtin: its text signature, untyped


@pytest.mark.parametrize(
    "args, message",
    [
        ({"a": 1}, "argument 'b' is required"),
        ({"a": 1, "b": "two"}, "argument 'b': Input should be a valid integer"),
        ({"a": 1, "b": 2.5}, "argument 'b': Input should be a valid integer"),
        ({"a": 1, "b": 2, "c": 3}, "unexpected argument 'c'"),
    ],
)
def test_bad_arguments_raise_one_line_naming_the_argument(args, message):
    with pytest.raises(ToolArgumentError) as err:
        python_tool(f"{F}:add").fn(**args)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_arguments_are_error_observations_through_the_executor():
    executor = ToolExecutor([python_tool(f"{F}:describe"), python_tool(f"{F}:boom")])
    bad = executor.execute(
        ToolCall("describe", {"count": 1, "ratio": 1, "label": "l", "flag": True, "values": [1], "mode": "medium"})
    )
    assert isinstance(bad, ToolError)
    assert bad.startswith(
        "[tool error in 'describe': ToolArgumentError: argument 'mode': Input should be 'fast' or 'slow'"
    )
    failed = executor.execute(ToolCall("boom", {"x": 7}))
    assert isinstance(failed, ToolError) and "RuntimeError: boom 7" in failed


class _Scripted:
    """A model handle that replays fixed turns (Hermes-style tool calls)."""

    def __init__(self, *texts: str) -> None:
        self.spec = ModelSpec("scripted", "test", tool_call_style="hermes")
        self.capabilities = frozenset({Capability.GENERATE, Capability.TOOL_CALLS})
        self.backend = "hf_local"
        self._texts = list(texts)

    def chat(self, messages, tools=None, **kw):
        return ChatTurn(text=self._texts.pop(0) if self._texts else "done")


def _call(name: str, **args) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def test_a_validation_error_is_an_observation_in_the_agent_loop_and_the_model_can_retry():
    handle = _Scripted(_call("add", a=1, b="x"), _call("add", a=1, b=2), "It is 3.")
    trajectory = run_case(handle, "What is 1 + 2?", get_tools(f"calculator,{F}:add"), max_turns=4)
    tool_steps = [s for s in trajectory.steps if s.role is StepRole.TOOL]
    assert [s.content for s in tool_steps] == ["add", "add"]
    assert "ToolArgumentError: argument 'b'" in tool_steps[0].observation.text and tool_steps[0].span["tool_error"]
    assert tool_steps[1].observation.value == "3" and trajectory.final_answer == "It is 3."
    assert trajectory.metrics["n_tool_errors"] == 1


def test_get_tools_takes_python_paths_beside_builtin_names():
    tools = get_tools(f"calculator, {F}:add ,lookup")
    assert [(t.name, t.source) for t in tools] == [("calculator", "builtin"), ("add", "python"), ("lookup", "builtin")]
    assert tools[1].origin == f"{F}:add"


def test_unknown_names_mention_python_paths_and_builtin_behaviour_is_unchanged():
    with pytest.raises(ValueError, match=r"Unknown tool\(s\) \['websearch'\].*package\.module:function"):
        get_tools(["calculator", "websearch"])
    assert [t.name for t in get_tools("calculator,calculator")] == ["calculator", "calculator"]


def test_a_python_tool_named_like_another_tool_is_refused():
    with pytest.raises(ValueError, match=r"Python tool 'fixtures.pyfuncs:add' is named 'add', like another tool"):
        get_tools([f"{F}:add", f"{F}:add"])


@pytest.fixture()
def broken_module(tmp_path, monkeypatch):
    (tmp_path / "evalrx_broken_tools_mod.py").write_text("raise RuntimeError('this module is broken\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "evalrx_broken_tools_mod"


@pytest.mark.parametrize(
    "path, message",
    [
        (F, r"not a Python path; write it as package\.module:function"),
        (f"{F}:add:x", r"not a Python path"),
        (":add", r"not a Python path"),
        ("no_such_pkg.mod:f", r"module 'no_such_pkg' not found; check the spelling"),
        (f"{F}:missing", r"fixtures\.pyfuncs has no attribute 'missing'"),
        (f"{F}:Calc.missing", r"has no attribute 'Calc\.missing'"),
        (f"{F}:NOT_CALLABLE", r"'NOT_CALLABLE' is not callable \(it is of type int\)"),
        (f"{F}:only_args", r"takes only \*args"),
        (f"{F}:takes_opaque", r"parameter 'thing' has a type pydantic cannot describe"),
        (f"{F}:Calc.inst", r"is an instance method; make it a staticmethod"),
        ("BROKEN:f", r"importing 'evalrx_broken_tools_mod' failed \(RuntimeError: this module is broken\)"),
    ],
)
def test_bad_paths_are_one_line_naming_the_path_and_the_fix(path, message, broken_module):
    path = path.replace("BROKEN", broken_module)
    with pytest.raises(ValueError, match=message) as err:
        python_tool(path)
    text = str(err.value)
    assert text.startswith(f"Python tool {path!r}: ") and "\n" not in text
    if ":" in path:  # get_tools gives the same error (a name without a colon is an unknown built-in)
        with pytest.raises(ValueError, match=message):
            get_tools(["calculator", path])


def test_a_tool_that_never_returns_is_an_error_step_naming_it_at_its_deadline_and_the_run_goes_on():
    import time

    from evalrx.models.agent import run_batch

    hung = python_tool(f"{F}:never_returns", timeout_s=0.5)
    handle = _Scripted(_call("never_returns", query="x"), "No answer came.", "It is 4.")
    t0 = time.monotonic()
    first, second = run_batch(handle, ["Ask it.", "What is 2 + 2?"], tools_factory=lambda case: [hung], max_turns=3)
    assert time.monotonic() - t0 < 5
    (step,) = [s for s in first.steps if s.role is StepRole.TOOL]
    assert step.span["tool_error"] and step.observation.text == (
        "[tool error in 'never_returns': ToolDeadlineError: Python tool 'fixtures.pyfuncs:never_returns' "
        "did not return within 0.5 s; the call was abandoned]"
    )
    assert first.final_answer == "No answer came." and second.final_answer == "It is 4."

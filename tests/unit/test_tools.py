"""The built-in tools: registry, calculator safety, lookup search, image_zoom."""

from __future__ import annotations

import builtins
import json
import os

import pytest

from evalrx.core.case import FailureCase, Inputs
from evalrx.core.tool import Tool, ToolResult
from evalrx.tools import TOOLS, get_tools, register_tool
from evalrx.tools.calculator import calculator, evaluate, format_number
from evalrx.tools.lookup import make_lookup, search

KB = {
    "entities": [
        {
            "name": "Arland",
            "type": "country",
            "attributes": {"capital": "Velmor", "population": 48213, "currency": "lumen"},
        },
        {"name": "Velmor", "type": "city", "attributes": {"country": "Arland", "founding year": 1423}},
        {"name": "Kessa Dorn", "type": "person", "attributes": {"birth year": 1856, "profession": "baker"}},
        {"name": "Tolka", "type": "mountain", "attributes": {"height": 4120}, "units": {"height": "m"}},
    ]
}


# --- registry -------------------------------------------------------------------------------


def test_get_tools_builds_named_tools_in_order():
    tools = get_tools(["lookup", "calculator"])
    assert [t.name for t in tools] == ["lookup", "calculator"]
    assert all(isinstance(t, Tool) and callable(t.fn) for t in tools)


def test_get_tools_accepts_comma_separated_string():
    assert [t.name for t in get_tools("calculator, lookup")] == ["calculator", "lookup"]


def test_unknown_tool_names_it_and_lists_known():
    with pytest.raises(ValueError) as err:
        get_tools(["calculator", "websearch"])
    msg = str(err.value)
    assert "websearch" in msg
    for known in ("calculator", "lookup", "image_zoom"):
        assert known in msg


def test_register_tool_refuses_duplicates_and_adds_new(monkeypatch):
    monkeypatch.setattr("evalrx.tools.TOOLS", dict(TOOLS))
    from evalrx import tools as tools_mod

    with pytest.raises(ValueError, match="already registered"):
        register_tool("calculator", lambda case: None)
    register_tool("echo", lambda case: Tool("echo", "Echo.", fn=lambda text="": text))
    assert tools_mod.get_tools(["echo"])[0].fn(text="hi") == "hi"


def test_schemas_are_openai_style_and_json_serialisable():
    for tool in get_tools(["calculator", "lookup", "image_zoom"]):
        schema = tool.to_openai()
        assert schema["type"] == "function"
        params = schema["function"]["parameters"]
        assert params["type"] == "object"
        assert set(params["required"]) <= set(params["properties"])
        json.dumps(schema)


# --- calculator -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("347 + 582", "929"),
        ("900 - 1234", "-334"),
        ("12 * 45", "540"),
        ("81 / 9", "9"),
        ("10 / 4", "2.5"),
        ("10 / 3", "3.333333"),
        ("7 // 2", "3"),
        ("7 % 3", "1"),
        ("2 ** 10", "1024"),
        ("-(3 + 4) * 2", "-14"),
        ("2 ** -1", "0.5"),
        ("0.1 + 0.2", "0.3"),
        ("1.5 * 2", "3"),
        ("3 × 4", "12"),
    ],
)
def test_calculator_arithmetic(expr, expected):
    assert calculator(expr) == expected


@pytest.mark.parametrize(
    "expr, needle",
    [
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("9**9**9", "too large"),
        ("2 ** 100000", "too large"),
        ("10 ** 60 * 10 ** 60", "digits"),
        ("", "empty"),
        ("3 +", "cannot parse"),
        ("1" * 300, "longer than"),
    ],
)
def test_calculator_errors_are_observations(expr, needle):
    out = calculator(expr)
    assert out.startswith("error:") and needle in out


ATTACKS = [
    "__import__('os').system('touch {marker}')",
    "().__class__.__bases__[0].__subclasses__()",
    "().__class__.__bases__",
    "(lambda: __import__('os').system('touch {marker}'))()",
    "open('{marker}', 'w').write('x')",
    "exec(\"open('{marker}','w')\")",
    "eval('1+1')",
    "[x for x in range(10)]",
    "'a' * 10",
    "f'{{1+1}}'",
    "x + 1",
    "True + 1",
    "{{}}.keys()",
    "1 if 1 else 2",
    "(a := 5)",
]


@pytest.mark.parametrize("template", ATTACKS)
def test_calculator_rejects_code_without_side_effects(template, tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    calls = []
    real_import = builtins.__import__

    def spy_import(name, *args, **kwargs):
        calls.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(os, "system", lambda *a: calls.append(("system", a)) or 0)
    monkeypatch.setattr(builtins, "__import__", spy_import)
    out = calculator(template.format(marker=marker))
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert out.startswith("error:"), out
    assert not marker.exists()
    assert "system" not in [c[0] for c in calls if isinstance(c, tuple)]
    assert "os" not in calls


def test_calculator_deep_nesting_is_an_error_not_a_crash():
    assert calculator("(" * 150 + "1" + ")" * 150).startswith("error:")
    assert calculator("-" * 150 + "1").startswith("error:")


def test_calculator_non_string_argument():
    assert calculator(12).startswith("error:")


def test_evaluate_returns_numbers_and_format_number():
    assert evaluate("6 * 7") == 42
    assert format_number(2.0) == "2"
    assert format_number(1 / 3) == "0.333333"
    assert format_number(1e20) == "1e+20"


# --- lookup ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query, expected",
    [
        ("population of Arland", "The population of Arland is 48213."),
        ("How many people live in arland?", "The population of Arland is 48213."),
        ("capital of Arland", "The capital of Arland is Velmor."),
        ("when was Velmor founded", "The founding year of Velmor is 1423."),
        ("birth year of Kessa Dorn", "The birth year of Kessa Dorn is 1856."),
        ("how tall is Tolka", "The height of Tolka is 4120 m."),
    ],
)
def test_lookup_finds_facts(query, expected):
    assert search(query, KB) == expected


def test_lookup_entity_without_attribute_summarises():
    out = search("Arland", KB)
    assert out.startswith("Arland (country):") and "48213" in out and "Velmor" in out


def test_lookup_unknown_entity_and_missing_attribute():
    assert search("population of Quibbleton", KB) == "no results for 'population of Quibbleton'"
    assert search("currency of Velmor", KB) == "no results for 'currency of Velmor'"
    # A person's name needs all its words: "Kessa" alone is not "Kessa Dorn".
    assert search("birth year of Kessa", KB).startswith("no results")


def test_lookup_is_deterministic_and_rejects_empty():
    assert search("population of Arland", KB) == search("population of Arland", KB)
    assert search("   ", KB).startswith("error:")


def test_lookup_tool_uses_a_kb_file(tmp_path):
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(KB))
    tool = make_lookup(kb_path=str(path))
    assert tool.fn(query="capital of Arland") == "The capital of Arland is Velmor."
    missing = make_lookup(kb_path=str(tmp_path / "nope.json"))
    assert missing.fn(query="x").startswith("error: knowledge base unavailable")


def test_bundled_kb_answers_a_query():
    from evalrx.tools.lookup import load_kb

    kb = load_kb()
    entity = kb["entities"][0]
    attribute, value = next(iter(entity["attributes"].items()))
    out = get_tools(["lookup"])[0].fn(query=f"{attribute} of {entity['name']}")
    assert str(value) in out and entity["name"] in out


# --- image_zoom -----------------------------------------------------------------------------


def _case_with_image():
    from PIL import Image

    img = Image.new("RGB", (100, 50), "white")
    for x in range(50, 100):
        for y in range(25, 50):
            img.putpixel((x, y), (255, 0, 0))
    return FailureCase(inputs=Inputs(prompt="what colour is the corner?", image=img))


def test_image_zoom_crops_and_upscales():
    tool = get_tools(["image_zoom"], case=_case_with_image())[0]
    res = tool.fn(x0=0.5, y0=0.5, x1=1.0, y1=1.0, scale=2)
    assert isinstance(res, ToolResult)
    assert res.images[0].size == (100, 50)
    assert res.images[0].getpixel((10, 10)) == (255, 0, 0)
    assert res.meta["crop_px"] == [50, 25, 100, 50]
    assert "100x50" in res.text


def test_image_zoom_reads_an_image_path(tmp_path):
    from PIL import Image

    path = tmp_path / "img.png"
    Image.new("RGB", (40, 40), "blue").save(path)
    case = FailureCase(inputs=Inputs(prompt="p", image=str(path)))
    res = get_tools(["image_zoom"], case=case)[0].fn(x0=0, y0=0, x1=0.5, y1=0.5, scale=3)
    assert res.images[0].size == (60, 60)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"x0": 0.5, "y0": 0.0, "x1": 0.2, "y1": 1.0}, "empty box"),
        ({"x0": -0.1, "y0": 0.0, "x1": 0.5, "y1": 1.0}, "between 0 and 1"),
        ({"x0": 0.0, "y0": 0.0, "x1": 1.0, "y1": 1.0, "scale": 100}, "scale"),
        ({"x0": "a", "y0": 0.0, "x1": 1.0, "y1": 1.0}, "must be numbers"),
        ({"x0": 0.0, "y0": 0.0, "x1": 1.0}, "required"),
    ],
)
def test_image_zoom_bad_boxes(kwargs, needle):
    res = get_tools(["image_zoom"], case=_case_with_image())[0].fn(**kwargs)
    assert res.text.startswith("error:") and needle in res.text and not res.images


def test_image_zoom_without_image():
    res = get_tools(["image_zoom"], case=FailureCase.from_prompt("no image"))[0].fn(x0=0, y0=0, x1=1, y1=1)
    assert res.text == "error: this case has no image to zoom into"
    assert get_tools(["image_zoom"])[0].fn(x0=0, y0=0, x1=1, y1=1).text.startswith("error:")

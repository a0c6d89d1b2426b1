"""BFCL v4's single-turn and multi-turn categories as case suites, read from the installed `bfcl-eval` package.

`load_bfcl("bfcl/simple_python")` gives one case per BFCL entry, with BFCL's id; the entry's
function documents become the case's own tools (BFCL's schema dialect converted to JSON
Schema), its ground truth the expected calls (every acceptable value kept) and the reference
calls the diagnosis reads. Cases are graded by their calls (`{"kind": "calls"}`): the run ends
at the model's first turn that makes calls, nothing is executed.

`load_bfcl("bfcl/multi_turn_base")` gives conversations: `meta["turns"]` holds each user turn's text
and its ground-truth calls (BFCL's call strings), `meta["environment"]` the spec of the stateful
classes the calls run on (`evalrx.tools.environment`), `meta["tools"]` their function documents.
They are graded by state (`{"kind": "state"}`, `evalrx.grade.state`). `multi_turn_miss_func` is left
out: its withheld functions join the offered tools at a later turn, which the agent loop does not do.

The package is found through importlib (no path to type); only its data files and its table of
environment classes (`bfcl_eval.constants.executable_backend_config`, a module of plain constants) are read.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from evalrx.core.case import FailureCase, Inputs

BFCL_PREFIX = "bfcl/"
BFCL_PACKAGE = "bfcl-eval==2026.3.23"
# The single-turn categories whose entries are one user turn graded by BFCL's AST rules.
CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
)
# The multi-turn categories graded by the state their calls leave (miss_func needs tools added mid-run: left out).
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_param", "multi_turn_long_context")
_BACKEND_CONFIG = "bfcl_eval.constants.executable_backend_config"
# BFCL's type names that JSON Schema spells otherwise; "any" has no JSON Schema type at all.
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "str": "string", "int": "integer"}
_SCHEMA_KEYS = ("description", "enum", "default", "format", "minimum", "maximum")


def _data_dir() -> Optional[Path]:
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "data"
    return path if path.is_dir() else None


def bfcl_missing_hint() -> Optional[str]:
    """One line saying how to install BFCL's data, or None when it is installed."""
    if _data_dir() is not None:
        return None
    return f"BFCL suites need the bfcl-eval package: pip install --no-deps {BFCL_PACKAGE} (`make install` does it)"


def bfcl_suites() -> list[str]:
    """`bfcl/<category>` for each single-turn, then multi-turn, category the installed package has ([] without it)."""
    root = _data_dir()
    if root is None:
        return []
    return [f"{BFCL_PREFIX}{c}" for c in CATEGORIES + MULTI_TURN_CATEGORIES if (root / f"BFCL_v4_{c}.json").is_file()]


def json_schema(schema: Any) -> Any:
    """A BFCL parameter schema as JSON Schema (`dict` -> `object`, `float` -> `number`, `tuple` -> `array`, ...)."""
    if not isinstance(schema, dict):
        return schema
    out: dict = {}
    kind = schema.get("type")
    if isinstance(kind, str) and kind.lower() != "any":
        out["type"] = _TYPES.get(kind, kind.lower())
    for key in _SCHEMA_KEYS:
        if key in schema:
            out[key] = schema[key]
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {name: json_schema(sub) for name, sub in schema["properties"].items()}
    if "items" in schema:
        out["items"] = json_schema(schema["items"])
    if isinstance(schema.get("required"), list):
        out["required"] = list(schema["required"])
    if "additionalProperties" in schema:
        out["additionalProperties"] = json_schema(schema["additionalProperties"])
    return out


def tool_document(function: dict) -> dict:
    """One BFCL function document as the case's tool document (name kept as BFCL spells it)."""
    params = json_schema(function.get("parameters") or {"type": "dict", "properties": {}})
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    return {"name": function["name"], "description": function.get("description") or "", "parameters": params}


def reference_calls(ground_truth: list) -> list:
    """BFCL's ground truth as reference calls: each call's first acceptable value per parameter as its
    `arguments` (a parameter whose only answer is "may be omitted" is left out), every value in `accept`."""
    refs = []
    for entry in ground_truth:
        for name, params in entry.items():
            accept = {p: list(values) for p, values in (params or {}).items()}
            args = {
                p: next(v for v in values if v != "") for p, values in accept.items() if any(v != "" for v in values)
            }
            refs.append({"name": name, "arguments": args, "accept": accept})
    return refs


def _lines(path: Path) -> list:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@lru_cache(maxsize=16)
def _load(category: str, root: Path, stamp: float) -> tuple:
    entries = _lines(root / f"BFCL_v4_{category}.json")
    answers_path = root / "possible_answer" / f"BFCL_v4_{category}.json"
    answers = {a["id"]: a["ground_truth"] for a in _lines(answers_path)} if answers_path.is_file() else {}
    return tuple((e, answers.get(e["id"], [])) for e in entries)


def _case(entry: dict, ground_truth: list, category: str) -> FailureCase:
    first_turn = entry["question"][0]
    prompt = "\n".join(m["content"] for m in first_turn if m.get("role") == "user")
    system = "\n".join(m["content"] for m in first_turn if m.get("role") == "system")
    meta: dict = {
        "suite": f"{BFCL_PREFIX}{category}",
        "task_type": category,
        "tools": [tool_document(f) for f in entry["function"]],
        "reference_calls": reference_calls(ground_truth),
    }
    if system:
        meta["system"] = system
    return FailureCase(
        inputs=Inputs(prompt=prompt), id=entry["id"], expected=ground_truth, grader={"kind": "calls"}, meta=meta
    )


@lru_cache(maxsize=1)
def _backend() -> tuple:
    """BFCL's class -> module path, class -> function-document file, and stateless classes."""
    config = importlib.import_module(_BACKEND_CONFIG)
    return (
        dict(config.CLASS_FILE_PATH_MAPPING),
        dict(config.MULTI_TURN_FUNC_DOC_FILE_MAPPING),
        tuple(config.STATELESS_CLASSES),
    )


@lru_cache(maxsize=32)
def _class_functions(root: Path, file_name: str) -> tuple:
    return tuple(_lines(root / "multi_turn_func_doc" / file_name))


def _turn_text(messages: list) -> str:
    return "\n".join(m["content"] for m in messages if m.get("role") == "user")


def _multi_turn_case(entry: dict, ground_truth: list, category: str, root: Path) -> FailureCase:
    modules, doc_files, stateless = _backend()
    classes = list(entry["involved_classes"])
    excluded = set(entry.get("excluded_function") or ())
    functions = [f for c in classes for f in _class_functions(root, doc_files[c]) if f["name"] not in excluded]
    turns: "list[dict[str, Any]]" = [
        {"prompt": _turn_text(messages), "expected": list(ground_truth[k]) if k < len(ground_truth) else []}
        for k, messages in enumerate(entry["question"])
    ]
    meta: dict = {
        "suite": f"{BFCL_PREFIX}{category}",
        "task_type": category,
        "turns": turns,
        "tools": [tool_document(f) for f in functions],
        "environment": {
            "classes": {c: modules[c] for c in classes},
            "initial_config": json.loads(json.dumps(entry.get("initial_config") or {})),  # a copy per case
            "long_context": "long_context" in category,
            "stateless": [c for c in classes if c in stateless],
        },
    }
    return FailureCase(
        inputs=Inputs(prompt=turns[0]["prompt"]),
        id=entry["id"],
        expected=[list(t["expected"]) for t in turns],
        grader={"kind": "state"},
        meta=meta,
    )


def load_bfcl(name: str) -> list[FailureCase]:
    """The cases of `bfcl/<category>`.

    Raises:
        ValueError: the package is not installed (the message says how to install it), or the category is unknown.
    """
    category = name[len(BFCL_PREFIX) :] if name.startswith(BFCL_PREFIX) else name
    hint = bfcl_missing_hint()
    if hint:
        raise ValueError(hint)
    root = _data_dir()
    assert root is not None
    path = root / f"BFCL_v4_{category}.json"
    if category not in CATEGORIES + MULTI_TURN_CATEGORIES or not path.is_file():
        known = ", ".join(bfcl_suites())
        raise ValueError(f"Unknown BFCL suite {name!r}. Known BFCL suites: {known}.")
    entries = _load(category, root, path.stat().st_mtime)
    if category in MULTI_TURN_CATEGORIES:
        return [_multi_turn_case(e, gt, category, root) for e, gt in entries]
    return [_case(e, gt, category) for e, gt in entries]


__all__ = [
    "BFCL_PREFIX",
    "CATEGORIES",
    "MULTI_TURN_CATEGORIES",
    "bfcl_missing_hint",
    "bfcl_suites",
    "json_schema",
    "load_bfcl",
    "reference_calls",
    "tool_document",
]

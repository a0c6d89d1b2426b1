"""Case files: JSONL files of cases, the bundled demo suites and a strict loader.

One case per line::

    {"id": "arith-001", "prompt": "What is 3 + 4?", "expected": 7,
     "grader": {"kind": "numeric"}, "task_type": "arithmetic", "difficulty": "easy",
     "tools": ["calculator", "lookup"]}

Only `prompt` is required. `image` (a path, relative to the file) becomes `inputs.image`;
`task_type`, `difficulty`, `tools` and any other keys land in `FailureCase.meta`. A conversation
has `"turns": [{"prompt": ..., "expected"?: ..., "grader"?: ...}, ...]` in place of `prompt`: the
next turn is given when the agent answers; a turn's `expected` grades the answer that ended it. `tools` names
tools the case uses, or holds the case's own function documents (`{"name", "description",
"parameters"}` with a JSON Schema), which the agent is offered beside the run's tools; `system`
is the case's own system prompt.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

from evalrx.core.case import FailureCase, Inputs
from evalrx.core.tool import Tool
from evalrx.grade import GRADER_KINDS, check_grader

DEMO_SUITES_DIR = Path(__file__).resolve().parent.parent / "demo" / "suites"
# The demo VLM's image suites ("demo/vision_*", all of them "demo/vision"): apart, so "demo" stays the
# text model's suites.
DEMO_VISION_DIR = Path(__file__).resolve().parent.parent / "demo" / "vision_suites"
_CASE_KEYS = {"id", "prompt", "expected", "grader", "image"}


class CaseFileError(ValueError):
    """A case file that cannot be loaded; the message names the file, the line and the fix."""

    def __init__(self, path: Any, line: int | None, problem: str, fix: str) -> None:
        where = f"{path}:{line}" if line else f"{path}"
        super().__init__(f"{where}: {problem}. {fix}")
        self.path, self.line, self.problem, self.fix = str(path), line, problem, fix


def demo_suites() -> list[str]:
    """Names of the bundled demo suites: "demo" and "demo/<name>" for each text suite, then "demo/vision"
    and "demo/<name>" for each image suite."""
    names = sorted(p.stem for p in DEMO_SUITES_DIR.glob("*.jsonl"))
    vision = sorted(p.stem for p in DEMO_VISION_DIR.glob("*.jsonl"))
    return ["demo"] + [f"demo/{n}" for n in names] + (["demo/vision"] + [f"demo/{n}" for n in vision] if vision else [])


def _graded_shape_problem(record: dict, grader: Any) -> "Optional[tuple[str, str]]":
    """(problem, fix) when a case graded by its calls or by state lacks what that grader reads."""
    kind = grader.get("kind") if isinstance(grader, dict) else None
    if kind == "calls":
        expected = record.get("expected")
        ok = isinstance(expected, list) and all(
            isinstance(c, dict)
            and all(isinstance(p, dict) and all(isinstance(v, list) for v in p.values()) for p in c.values())
            for c in expected
        )
        if not ok:
            return (
                "a calls grader needs expected = [{function: {parameter: [acceptable values]}}, ...]",
                'Write "expected": [{"get_weather": {"city": ["Paris"]}}], or [] when no call is wanted',
            )
    if kind == "state":
        turns = record.get("turns")
        if not isinstance(record.get("environment"), dict) or not isinstance(turns, list):
            return ('a state grader needs "environment" and "turns"', "Add both, or use another grader kind")
        if not all(isinstance(t.get("expected", []), list) for t in turns if isinstance(t, dict)):
            return (
                "a state grader's turns need expected = [ground-truth call strings]",
                'Write "expected": ["cd(folder=\'docs\')"]',
            )
    return None


def _with_turns(record: dict, path: Any, line: Optional[int]) -> dict:
    """A conversation case (`"turns": [{"prompt", "expected"?, "grader"?}, ...]`), checked, with the first
    turn's prompt as the case's prompt."""
    turns = record["turns"]
    example = 'Write "turns": [{"prompt": "first question"}, {"prompt": "follow-up", "expected": 7}]'
    if "prompt" in record:
        raise CaseFileError(path, line, 'a case has "prompt" or "turns", not both', "Put the first prompt in turns")
    if not isinstance(turns, list) or not turns:
        raise CaseFileError(path, line, "turns must be a non-empty list of objects", example)
    for k, turn in enumerate(turns, start=1):
        if not isinstance(turn, dict) or not isinstance(turn.get("prompt"), str) or not turn["prompt"].strip():
            raise CaseFileError(path, line, f"turn {k} has no prompt (a non-empty string)", example)
        problem = check_grader(turn.get("grader"))
        if not problem and isinstance(turn.get("grader"), dict) and turn["grader"].get("kind") in ("calls", "state"):
            problem = f"a {turn['grader']['kind']} grader grades the whole case, not one turn"
        if problem:
            raise CaseFileError(path, line, f"turn {k}: {problem}", f"Use a grader kind of {', '.join(GRADER_KINDS)}")
    return dict(record, prompt=turns[0]["prompt"])


def parse_case(
    record: Any, *, path: Any = "<case>", line: int | None = None, base_dir: Path | None = None, default_id: str = ""
) -> FailureCase:
    """Validate one decoded JSON record and turn it into a `FailureCase`.

    Raises:
        CaseFileError: naming what is wrong and how to fix it.
    """
    if not isinstance(record, dict):
        raise CaseFileError(
            path,
            line,
            f"expected a JSON object, got {type(record).__name__}",
            'Write each case as {"prompt": ..., "expected": ...} on its own line',
        )
    if "turns" in record:
        record = _with_turns(record, path, line)
    prompt = record.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise CaseFileError(
            path,
            line,
            "missing prompt" if prompt is None else "prompt must be a non-empty string",
            'Add a "prompt" field with the question the agent is given',
        )
    grader = record.get("grader")
    problem = check_grader(grader)
    if problem:
        raise CaseFileError(
            path,
            line,
            problem,
            f'Set "grader" to an object whose "kind" is one of {", ".join(GRADER_KINDS)}, '
            "or remove it to use the default grader",
        )
    shape = _graded_shape_problem(record, grader)
    if shape:
        raise CaseFileError(path, line, shape[0], shape[1])
    turned = grader and grader["kind"] == "state"  # its expected calls are in its turns
    if grader and grader["kind"] != "regex" and not turned and "expected" not in record and "value" not in grader:
        raise CaseFileError(
            path,
            line,
            f"a {grader['kind']} grader needs an expected answer",
            'Add an "expected" field (or a "value" in the grader)',
        )
    tools = record.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, (str, dict)) for t in tools):
        raise CaseFileError(
            path,
            line,
            "tools must be a list of tool names or function documents",
            'Write "tools": ["calculator"] or "tools": [{"name": ..., "description": ..., "parameters": {...}}]',
        )
    for doc in tools:
        if isinstance(doc, dict):
            try:
                Tool.from_document(doc)
            except ValueError as exc:
                raise CaseFileError(path, line, f"bad tool document ({exc})", 'Fix the document in "tools"') from None
    if "environment" in record:  # checked before anything is imported: a case file is data
        from evalrx.tools.environment import spec_problem

        problem = spec_problem(record["environment"])
        if problem:
            raise CaseFileError(path, line, problem, 'Fix "environment", or remove it')
    image = record.get("image")
    if isinstance(image, str) and base_dir is not None and not Path(image).is_absolute():
        image = str(base_dir / image)
    case_id = record.get("id") or default_id
    meta = {k: v for k, v in record.items() if k not in _CASE_KEYS}
    meta.setdefault("tools", tools)
    return FailureCase(
        inputs=Inputs(prompt=prompt, image=image),
        id=str(case_id) if case_id else "",
        expected=record.get("expected"),
        grader=grader,
        meta=meta,
    )


def load_case_file(path: Any) -> list[FailureCase]:
    """Load one JSONL file (blank lines and `#` comment lines are skipped).

    Raises:
        CaseFileError: for a missing or empty file, bad JSON, a missing prompt, an unknown grader
            kind or a duplicated id.
    """
    path = Path(path)
    if path.is_dir():
        raise CaseFileError(
            path,
            None,
            "is a directory, not a case file",
            "Give one .jsonl file, or a suite name (`evalrx suites` lists them)",
        )
    if not path.is_file():
        raise CaseFileError(path, None, "no such case file", "Check the path, or run `evalrx suites` to list suites")
    cases: list[FailureCase] = []
    seen: dict[str, int] = {}
    with open(path, "rb") as fh:
        for lineno, raw_bytes in enumerate(fh, start=1):
            try:
                text = raw_bytes.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                raise CaseFileError(
                    path, lineno, f"not UTF-8 text (byte {exc.start + 1})", "Save the file as UTF-8"
                ) from None
            if not text or text.startswith("#"):
                continue
            try:
                record = json.loads(text)
            except RecursionError:
                raise CaseFileError(
                    path, lineno, "JSON nested too deeply to read", "Flatten the record; a case needs only a few levels"
                ) from None
            except json.JSONDecodeError as exc:
                raise CaseFileError(
                    path,
                    lineno,
                    f"bad JSON ({exc.msg} at column {exc.colno})",
                    "Each line must be one complete JSON object; check quotes, commas and braces",
                ) from None
            digest = hashlib.sha1(f"{path.stem}:{lineno}:{text}".encode()).hexdigest()[:10]
            case = parse_case(record, path=path, line=lineno, base_dir=path.parent, default_id=f"{path.stem}-{digest}")
            if case.id in seen:
                raise CaseFileError(
                    path,
                    lineno,
                    f"duplicate id {case.id!r} (first on line {seen[case.id]})",
                    "Give every case a unique id",
                )
            seen[case.id] = lineno
            case.meta.setdefault("suite", path.stem)
            cases.append(case)
    if not cases:
        raise CaseFileError(path, None, "the file has no cases", "Add one JSON object per line")
    return cases


def load_demo(key: str) -> "list[FailureCase] | None":
    """The cases of a demo suite name ("demo", "demo/<name>"); None for a name that is not one."""
    if key in ("demo", "demo/vision"):
        where = DEMO_SUITES_DIR if key == "demo" else DEMO_VISION_DIR
        return [c for p in sorted(where.glob("*.jsonl")) for c in load_case_file(p)]
    if key.startswith("demo/"):
        name = key.split("/", 1)[1]
        path = next(
            (d / f"{name}.jsonl" for d in (DEMO_SUITES_DIR, DEMO_VISION_DIR) if (d / f"{name}.jsonl").is_file()), None
        )
        return load_case_file(path) if path is not None else None
    return None


def case_tool_documents(case: Any) -> list[dict]:
    """The case's own function documents (its `tools` entries that are documents, not names)."""
    meta = getattr(case, "meta", None) or {}
    return [t for t in meta.get("tools") or [] if isinstance(t, dict)]


def case_tools(case: Any) -> list[Tool]:
    """The case's own tools, offered beside the run's: documents only (graded by the calls, never run).

    A document that is not one (an imported case's `tools` hold whatever its source wrote) is left out;
    case files are checked when they load.
    """
    tools = []
    for doc in case_tool_documents(case):
        try:
            tools.append(Tool.from_document(doc))
        except ValueError:
            continue
    return tools


__all__ = [
    "CaseFileError",
    "DEMO_SUITES_DIR",
    "case_tool_documents",
    "case_tools",
    "demo_suites",
    "load_case_file",
    "load_demo",
    "parse_case",
]

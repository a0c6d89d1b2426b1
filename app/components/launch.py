"""What the New run page needs besides widgets: case loading from an upload, the analyzer entries and
runtime settings of its run config, and handing an API key to a worker without writing it to the store."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Optional

from evalrx.models import check_call_budget

DEMO_SPEC = "evalrx-tiny"
DEFAULT_SUITE = "demo/arithmetic_easy"


# Where the New run form takes a local model directory: the fix its weights check names.
LOCAL_WEIGHTS_FIELD = "this form's Local weights directory, under Advanced"


def weights_problem(spec: str, backend: Optional[str], checkpoint: Optional[str]) -> Optional[str]:
    """One line when the model's weights (or the directory typed for them) are not on this machine, its fix
    pointing at the form's local-weights field; None when they are, or for no backend or the api one."""
    from evalrx.models import weights_problem as problem

    return problem(spec, backend=backend, checkpoint=checkpoint or None, how=LOCAL_WEIGHTS_FIELD) if backend else None


def cases_from_upload(name: str, data: bytes) -> list:
    """Validate an uploaded JSONL case file and return its cases.

    Raises:
        CaseFileError: naming the line and the fix (shown inline by the page).
    """
    from evalrx.suites import load_case_file

    stem = Path(name).stem or "uploaded"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{stem}.jsonl"
        path.write_bytes(data)
        cases = load_case_file(path)
    for c in cases:
        if isinstance(c.inputs.image, str) and c.inputs.image.startswith(tmp):
            raise ValueError(
                f"case {c.id!r} refers to an image file; upload image cases from the command line "
                "(`evalrx run --cases file.jsonl`) so the image path resolves"
            )
    return cases


# The analyzers that unembed every layer, and so take the lens precision (`LogitLensAnalyzer`'s `precision`).
LENS_ANALYZERS = ("logit_lens", "tool_decision")
# The analyzers that read a final answer's tokens, and so take `answer_points` ("values" or "all").
ANSWER_ANALYZERS = ("logit_lens",)


def lens_entries(analyzers: list, lens_precision: str = "exact", answer_points: str = "values") -> list:
    """The analyzer entries the page's choices describe: `lens_precision` other than "exact" is a named
    cheaper setting of the analyzers that unembed every layer (`logit_lens`, `tool_decision`), and
    `answer_points` other than "values" the setting that reads every answer token (`logit_lens`), so their
    entries carry them and the run config says so."""
    out: list = []
    for a in analyzers:
        settings = {}
        if a in LENS_ANALYZERS and lens_precision != "exact":
            settings["precision"] = lens_precision
        if a in ANSWER_ANALYZERS and answer_points != "values":
            settings["answer_points"] = answer_points
        out.append({"name": a, **settings} if settings else a)
    return out


def brings_own_tools(cases: list) -> bool:
    """True when every case carries its own function documents (a BFCL suite)."""
    from evalrx.suites import case_tool_documents

    return bool(cases) and all(case_tool_documents(c) for c in cases)


def mcp_entry(name: str, text: str) -> dict:
    """A typed `mcpServers` entry, checked as a run would check it, as the store keeps it.

    Raises:
        ValueError: one line: bad JSON, or what the entry lacks (a secret written as a value included).
    """
    import json

    from evalrx.tools import McpServer

    try:
        data = json.loads(text or "")
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"the entry is not JSON ({exc.msg} at column {exc.colno}); paste one server's object"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("mcpServers"), dict) and len(data["mcpServers"]) == 1:
        ((name_in, data),) = data["mcpServers"].items()  # a whole one-server config pasted: take its entry
        name = name or name_in
    return McpServer.from_dict(data, name=(name or "").strip()).to_dict()


def runtime_settings(
    *, max_new_tokens: int, backend: Optional[str], timeout: float, retries: int, temperature: float = 0.0
) -> dict:
    """The model's RuntimeConfig settings; the call budget (timeout, retries) for the api backend only.

    Raises:
        ValueError: timeout not in (0, 3600] seconds or retries not in 0..10.
    """
    runtime: dict = {"max_new_tokens": int(max_new_tokens)}
    if temperature:
        runtime["temperature"] = float(temperature)
    if backend == "api":
        runtime["timeout"], runtime["max_retries"] = check_call_budget(timeout, int(retries))
    return runtime


def start_api_worker(store: Any, run_id: int, api_key: str, log_path: str) -> int:
    """Start a worker for this run alone, holding the key typed for it (`evalrx.runner.start_keyed_worker`).

    The key never reaches the store, a file or a command line, and goes only to the run's base_url.
    """
    from evalrx.runner import start_keyed_worker

    return start_keyed_worker(store.url, run_id, api_key, log_path=log_path)

"""Case suites: the bundled demo suites, BFCL v4's categories (from the installed `bfcl-eval`) and JSONL files.

from evalrx.suites import list_suites, load_cases
cases = load_cases("bfcl/simple_python")   # or "demo", "demo/<name>", "path/to/cases.jsonl"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalrx.core.case import FailureCase
from evalrx.suites.bfcl import BFCL_PREFIX, bfcl_suites, load_bfcl
from evalrx.suites.files import (
    DEMO_SUITES_DIR,
    CaseFileError,
    case_tool_documents,
    case_tools,
    demo_suites,
    load_case_file,
    load_demo,
    parse_case,
)


def list_suites() -> list[str]:
    """Names `load_cases` accepts: the demo suites, then BFCL's categories when `bfcl-eval` is installed."""
    return demo_suites() + bfcl_suites()


def load_cases(name_or_path: Any) -> list[FailureCase]:
    """Load cases by suite name ("demo", "demo/<name>", "bfcl/<category>") or from a JSONL file path.

    Raises:
        CaseFileError: for a malformed file.
        ValueError: for an unknown suite name (the message lists the known ones), or a BFCL suite
            without the `bfcl-eval` package (the message says how to install it).
    """
    key = str(name_or_path)
    if key.startswith(BFCL_PREFIX):
        return load_bfcl(key)
    demo = load_demo(key)
    if demo is not None:
        return demo
    if key.startswith("demo/"):
        raise ValueError(f"Unknown suite {key!r}. Known suites: {', '.join(list_suites())}.")
    path = Path(key).expanduser()
    if path.is_file():
        return load_case_file(path)
    if path.suffix in (".jsonl", ".json") or "/" in key or "\\" in key:
        return load_case_file(path)  # raises CaseFileError naming the missing file
    raise ValueError(f"Unknown suite {key!r}. Known suites: {', '.join(list_suites())}; or pass a .jsonl path.")


__all__ = [
    "BFCL_PREFIX",
    "CaseFileError",
    "DEMO_SUITES_DIR",
    "bfcl_suites",
    "case_tool_documents",
    "case_tools",
    "list_suites",
    "load_bfcl",
    "load_case_file",
    "load_cases",
    "parse_case",
]

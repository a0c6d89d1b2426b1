"""The runner reaches the store through its front door only: no `evalrx.store.<module>` import and no SQLAlchemy
anywhere in `evalrx/runner` (inside functions too), so every query lives in `evalrx/store`."""

from __future__ import annotations

import ast
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[2] / "evalrx" / "runner"
STORE_MODULES = {p.stem for p in (RUNNER.parent / "store").iterdir() if p.suffix == ".py" or p.is_dir()} - {
    "__init__",
    "__pycache__",
}


def _breaches(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "evalrx.store":  # `from evalrx.store import runs` reaches past the door too
                names += [f"evalrx.store.{a.name}" for a in node.names if a.name in STORE_MODULES]
        else:
            continue
        found += [
            f"line {node.lineno}: {n}"
            for n in names
            if n.startswith("evalrx.store.") or n.split(".")[0] == "sqlalchemy"
        ]
    return found


def test_the_rule_sees_each_way_past_the_door():
    assert _breaches("from evalrx.store.runs import stored_run") == ["line 1: evalrx.store.runs"]
    assert _breaches("def f():\n    from evalrx.store import queue") == ["line 2: evalrx.store.queue"]
    assert _breaches("import sqlalchemy.orm") == ["line 1: sqlalchemy.orm"]
    assert _breaches("from sqlalchemy.exc import IntegrityError") == ["line 1: sqlalchemy.exc"]
    assert _breaches("from evalrx.store import JobStatus, claim_job") == []


def test_the_runner_imports_the_store_only_through_evalrx_store():
    found = {
        str(p.relative_to(RUNNER.parents[1])): hits
        for p in sorted(RUNNER.rglob("*.py"))
        if (hits := _breaches(p.read_text(encoding="utf-8")))
    }
    assert found == {}, f"import these through `evalrx.store` (extend its __init__): {found}"

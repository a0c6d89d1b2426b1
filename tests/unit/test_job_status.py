"""One status vocabulary for queued work: `JobStatus`'s values are the strings stored rows carry, and no code in
the library or the app writes or compares a status as a bare string."""

from __future__ import annotations

import ast
from pathlib import Path

from evalrx.store import ACTIVE_STATUSES, FINAL_STATUSES, JobStatus

ROOT = Path(__file__).resolve().parents[2]
# What runs, jobs, judge jobs and analysis requests have stored since the first migration (exports carry them).
STORED = ("queued", "running", "done", "failed", "cancelled")


def test_values_are_the_strings_stored_rows_carry():
    assert [s.value for s in JobStatus] == list(STORED)
    assert all(JobStatus(v) == v and f"{JobStatus(v)}" == v for v in STORED)  # a row read back compares equal
    assert set(ACTIVE_STATUSES) | set(FINAL_STATUSES) == set(JobStatus)
    assert not set(ACTIVE_STATUSES) & set(FINAL_STATUSES)


def _names_status(node: ast.AST) -> bool:
    """Whether an expression reads a status: `x.status`, `x["status"]` or a variable `status`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "status"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "status"
    return isinstance(node, ast.Name) and node.id == "status"


def _bare(node: ast.AST | None) -> list[ast.Constant]:
    """The status strings written literally in an expression (alone, or in a tuple, list or set)."""
    if isinstance(node, ast.Constant) and node.value in STORED:
        return [node]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [c for e in node.elts for c in _bare(e)]
    if isinstance(node, ast.IfExp):
        return _bare(node.body) + _bare(node.orelse)
    return []


def _bare_statuses(tree: ast.AST) -> list[ast.Constant]:
    found: list[ast.Constant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_status(s) for s in sides):
                found += [c for s in sides for c in _bare(s)]
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if _names_status(target):
                    found += _bare(node.value)
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = zip(target.elts, node.value.elts)
                    found += [c for tgt, v in pairs if _names_status(tgt) for c in _bare(v)]
        elif isinstance(node, ast.keyword) and node.arg == "status":
            found += _bare(node.value)
        elif isinstance(node, ast.arg) and node.arg == "status":
            pass  # defaults are checked below, with their function
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.args[len(node.args.args) - len(node.args.defaults) :] + node.args.kwonlyargs
            defaults = list(node.args.defaults) + list(node.args.kw_defaults)
            found += [c for a, d in zip(args, defaults) if a.arg == "status" for c in _bare(d)]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) in {
            "finish_job",
            "finish_request",
        }:
            found += [c for a in node.args for c in _bare(a)]
    return found


def test_no_bare_status_string_in_the_library_or_the_app():
    paths = [
        p
        for folder in ("evalrx", "app")
        for p in sorted((ROOT / folder).rglob("*.py"))
        if "migrations" not in p.parts  # a migration keeps the strings of its day
    ]
    assert len(paths) > 100  # the walk found the packages
    bare = [
        f"{p.relative_to(ROOT).as_posix()}:{c.lineno} {c.value!r}"
        for p in paths
        for c in _bare_statuses(ast.parse(p.read_text(encoding="utf-8")))
    ]
    assert not bare, "write a status as JobStatus.<NAME> (from evalrx.store): " + ", ".join(bare)

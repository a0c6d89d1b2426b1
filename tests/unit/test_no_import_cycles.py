"""No circle of imports among evalrx's modules, counting imports inside functions (where circles hide).

An edge is any `import`/`from` statement anywhere in a module, resolved to the evalrx module it names:
`from P import name` goes to the submodule `P.name` when there is one, else to `P` itself (its
`__init__`), because importing a package runs its `__init__`; so a module that imports its own package's
`__init__`, which imports it back, is a circle. Importing `P.sub` is not counted as importing `P`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "evalrx"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _edges(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()

    def add(target: str) -> None:
        # The nearest evalrx module that the dotted name falls in (a name inside a module goes to the module).
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            targets.add(target)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("evalrx"):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("evalrx"):
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                add(sub if sub in modules else source)
    return targets


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _edges(name, path, modules) for name, path in modules.items()}


def test_the_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert len(graph) > 150  # the walk found the packages
    # `evalrx.store.__init__` re-exports its submodules; a function-level import is an edge like any other.
    assert "evalrx.store.runs" in graph["evalrx.store"]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_among_evalrx_modules():
    circles = _circles(import_graph())
    assert not circles, "import circles (move the shared piece down into a lower module): " + "; ".join(
        " <-> ".join(circle) for circle in circles
    )

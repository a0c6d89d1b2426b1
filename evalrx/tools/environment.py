"""A stateful tool environment: Python classes whose instances keep state from call to call, built fresh from a spec.

register_environment_package("pkg")           # or $EVALRX_ENVIRONMENT_PACKAGES: cases name only these
env = Environment.from_spec({"classes": {"FileSystem": "pkg.fs"}, "initial_config": {"FileSystem": {...}}})
env.call("cd", kwargs={"folder": "docs"})     # the result as text
env.run_call_string("cd(folder='docs')")      # the same, from a call written in Python syntax
env.state()                                   # {class name: {public attribute: value}}
env.tools(documents)                          # Tools whose fn calls the instances' methods

A method's result becomes text as a benchmark's checker compares it: a string as it is, a dict as JSON
(`str` when it is not serializable), anything else `str`; a call that raises gives
"Error during execution: <message>", returned like any other result, so the text the agent sees is the
text a grade compares.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
from typing import Any, Callable, Optional

from evalrx.core.tool import Tool

# Names never run, whatever class defines them (process and file-removal calls).
REFUSED_NAMES = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})
ERROR_PREFIX = "Error during execution: "
# The classes a case may name as its environment: a case file is data, and must not make a process import
# or build whatever it likes. BFCL's multi-turn environments by name (not its whole package: its web search
# class fetches any URL); `EVALRX_ENVIRONMENT_PACKAGES` (comma-separated module prefixes, read by every
# process: the app, the CLI and the workers) or `register_environment_package` adds one's own.
_BFCL = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
ENVIRONMENT_CLASSES = frozenset(
    {
        (f"{_BFCL}.gorilla_file_system", "GorillaFileSystem"),
        (f"{_BFCL}.math_api", "MathAPI"),
        (f"{_BFCL}.message_api", "MessageAPI"),
        (f"{_BFCL}.posting_api", "TwitterAPI"),
        (f"{_BFCL}.ticket_api", "TicketAPI"),
        (f"{_BFCL}.trading_bot", "TradingBot"),
        (f"{_BFCL}.travel_booking", "TravelAPI"),
        (f"{_BFCL}.vehicle_control", "VehicleControlAPI"),
    }
)
ENV_PACKAGES = "EVALRX_ENVIRONMENT_PACKAGES"
_REGISTERED: list = []


def register_environment_package(prefix: str) -> None:
    """Let cases name classes from modules under `prefix` (a package of the user's own environments), in
    this process; `EVALRX_ENVIRONMENT_PACKAGES` does the same for every process."""
    if prefix and prefix not in _REGISTERED:
        _REGISTERED.append(prefix)


def _packages() -> list:
    import os

    return _REGISTERED + [p.strip() for p in os.environ.get(ENV_PACKAGES, "").split(",") if p.strip()]


def _allowed(module: str, name: str) -> bool:
    if (module, name) in ENVIRONMENT_CLASSES:
        return True
    return any(module == p or module.startswith(p + ".") for p in _packages())


_SPEC_EXAMPLE = '{"classes": {"ClassName": "package.module"}, "initial_config": {"ClassName": {...}}}'


def result_text(value: Any) -> str:
    """A method's result as text: a str as it is, a dict as JSON (else `str`), anything else `str`."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except Exception:  # objects json cannot write (or a cycle): the checker falls back to str too
            return str(value)
    return str(value)


def spec_problem(spec: Any) -> Optional[str]:
    """What is wrong with an environment spec (None: usable), checked before any module is imported."""
    if not isinstance(spec, dict):
        return f"an environment spec must be an object like {_SPEC_EXAMPLE}, got {type(spec).__name__}"
    classes = spec.get("classes")
    if not isinstance(classes, dict) or not classes:
        return f'an environment spec needs "classes": {{class name: module path}}, e.g. {_SPEC_EXAMPLE}'
    for name, module in classes.items():
        if not isinstance(name, str) or not isinstance(module, str) or not module:
            return f"environment class {name!r}: give its module path as a string (e.g. 'package.module')"
        if not _allowed(module, name):
            return (
                f"environment class {name!r} of {module!r} is not a known environment; list your package in "
                f"${ENV_PACKAGES} (comma-separated module prefixes) where the app, the CLI and the workers run"
            )
    if not isinstance(spec.get("initial_config", {}), dict):
        return 'the environment spec\'s "initial_config" must be an object {class name: config}'
    stateless = spec.get("stateless", [])
    if not isinstance(stateless, (list, tuple)) or not all(isinstance(s, str) for s in stateless):
        return 'the environment spec\'s "stateless" must be a list of class names'
    return None


class Environment:
    """Instances of a spec's classes, configured, and their public methods by name (see the module doc)."""

    def __init__(self, instances: "dict[str, Any]") -> None:
        self.instances = instances
        # A later class's method of the same name wins, as the benchmark's own lookup has it.
        self._methods: dict[str, tuple[str, Callable]] = {}
        for class_name, instance in instances.items():
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self._methods[name] = (class_name, method)

    @classmethod
    def from_spec(cls, spec: dict) -> "Environment":
        """Fresh instances of `spec["classes"]` (`{class name: module path}`, in order), each given a deep copy
        of its `initial_config` entry through `_load_scenario(config, long_context=...)` when it has one and
        is not in `spec["stateless"]`.

        Raises:
            ValueError: a malformed spec, or a class that cannot be imported (the message says which and why).
        """
        problem = spec_problem(spec)
        if problem:
            raise ValueError(problem)
        config = spec.get("initial_config") or {}
        stateless = set(spec.get("stateless") or ())
        long_context = bool(spec.get("long_context", False))
        instances: dict = {}
        for class_name, module_path in spec["classes"].items():
            try:
                factory = getattr(importlib.import_module(module_path), class_name)
            except (ImportError, AttributeError) as exc:
                raise ValueError(
                    f"environment class {class_name} from {module_path}: {exc}; install the package that provides it"
                ) from None
            # A class defined in that module, nothing else it happens to hold (a function, an imported name).
            if not inspect.isclass(factory) or factory.__module__ != module_path:
                raise ValueError(f"environment class {class_name}: {module_path} defines no class of that name")
            try:
                instance = factory()
            except Exception as exc:
                raise ValueError(
                    f"environment class {class_name} could not be built: {type(exc).__name__}: {exc}"
                ) from None
            loader = getattr(instance, "_load_scenario", None)
            if class_name not in stateless and callable(loader):
                loader(copy.deepcopy(config.get(class_name, {})), long_context=long_context)
            instances[class_name] = instance
        return cls(instances)

    def method_names(self) -> list[str]:
        """The public method names the environment answers to."""
        return list(self._methods)

    def owner(self, name: str) -> Optional[str]:
        """The class whose method `name` is called (None for a name no instance has)."""
        entry = self._methods.get(name)
        return entry[0] if entry else None

    def call(self, name: str, args: tuple = (), kwargs: Optional[dict] = None) -> str:
        """Run method `name` and give its result as text; an unknown or refused name, bad arguments or an
        exception inside the method give the "Error during execution: ..." text instead (never raises)."""
        if name in REFUSED_NAMES:
            return f"{ERROR_PREFIX}Function call {name} is not allowed."
        entry = self._methods.get(name)
        if entry is None:
            return f"{ERROR_PREFIX}name '{name}' is not defined"
        try:
            # Copies: a method that mutates its arguments must not change the caller's (a trajectory's) values.
            return result_text(entry[1](*copy.deepcopy(tuple(args)), **copy.deepcopy(dict(kwargs or {}))))
        except Exception as exc:
            return f"{ERROR_PREFIX}{exc}"

    def parse_call_string(self, text: str) -> tuple[str, tuple, dict]:
        """(name, positional args, keyword args) of one call written in Python syntax, e.g. "cd(folder='docs')".

        Raises:
            ValueError: not one plain call of a public method of this environment with literal arguments, or a
                refused name.
        """
        try:
            node = ast.parse(str(text).strip(), mode="eval").body
        except SyntaxError as exc:
            raise ValueError(f"not a call in Python syntax: {text!r} ({exc.msg})") from None
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError(f"not a plain call like name(arg=value): {text!r}")
        name = node.func.id
        if name in REFUSED_NAMES:
            raise ValueError(f"refused call {name!r} in {text!r}: process and file-removal names are never run")
        if name not in self._methods:
            raise ValueError(f"unknown function {name!r} in {text!r}; this environment has {', '.join(self._methods)}")
        try:
            args = tuple(ast.literal_eval(a) for a in node.args)
            if any(k.arg is None for k in node.keywords):
                raise ValueError("**kwargs")
            kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
        except ValueError:
            raise ValueError(f"arguments must be literals (strings, numbers, lists, dicts, ...) in {text!r}") from None
        return name, args, kwargs

    def run_call_string(self, text: str) -> str:
        """Run one call written in Python syntax (`parse_call_string`) and give its result as `call` does.

        Raises:
            ValueError: as `parse_call_string`.
        """
        name, args, kwargs = self.parse_call_string(text)
        return self.call(name, args, kwargs)

    def bound_arguments(self, name: str, args: tuple = (), kwargs: Optional[dict] = None) -> Optional[dict]:
        """The arguments of a call to `name` by parameter name, defaults filled in (None: unknown name, or
        arguments that do not bind), to compare two calls however they spelled them."""
        entry = self._methods.get(name)
        if entry is None:
            return None
        try:
            bound = inspect.signature(entry[1]).bind(*args, **(kwargs or {}))
        except (TypeError, ValueError):
            return None
        bound.apply_defaults()
        return dict(bound.arguments)

    def state(self) -> "dict[str, dict]":
        """Each instance's public attributes (not starting with `_`), deep-copied: {class name: {attr: value}}."""
        return {
            class_name: {k: copy.deepcopy(v) for k, v in vars(instance).items() if not k.startswith("_")}
            for class_name, instance in self.instances.items()
        }

    def tools(self, documents: list) -> list[Tool]:
        """A `Tool` per function document (`{"name", "description", "parameters"}` or OpenAI's wrapping) whose
        name is a public method here, in the documents' order; its `fn(**kwargs)` runs the method by `call`."""
        out = []
        for doc in documents or []:
            tool = Tool.from_document(doc)
            owner = self.owner(tool.name)
            if owner is None:
                continue
            tool.source, tool.origin = "environment", owner
            tool.fn = self._bound(tool.name)
            out.append(tool)
        return out

    def _bound(self, name: str) -> Callable[..., str]:
        def run(**kwargs: Any) -> str:
            return self.call(name, kwargs=kwargs)

        run.__name__ = name
        return run


__all__ = ["ERROR_PREFIX", "REFUSED_NAMES", "Environment", "result_text"]

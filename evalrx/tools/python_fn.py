"""Python functions as tools: `python_tool("package.module:function")`.

The schema comes from the signature (types through pydantic) and the docstring (descriptions through
docstring-parser, any common style); parameters without a default are required. The tool's `fn`
validates each call's arguments against that schema before calling, so a wrong argument is an error
observation naming it. pydantic and docstring-parser are imported only when a tool is built.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import threading
import typing
from typing import Any, Callable

from evalrx.config.mcp import DEFAULT_TIMEOUT_S
from evalrx.core.tool import Tool, ToolResult

__all__ = ["ToolArgumentError", "ToolDeadlineError", "python_tool"]

PATH_FORM = "package.module:function"
INSTALL_HINT = "pip install 'evalrx[tools]' (pydantic and docstring-parser)"


class ToolArgumentError(ValueError):
    """A call's arguments do not fit the function's schema (one line naming each argument)."""


class ToolDeadlineError(TimeoutError):
    """A Python tool did not return within its deadline (one line naming the tool)."""


def _bad(path: str, problem: str, fix: str) -> ValueError:
    return ValueError(f"Python tool {path!r}: {problem}; {fix}")


def _resolve(path: str) -> tuple[Callable, bool]:
    """The callable `path` names, and whether it was reached through a class (a method's `self` shows)."""
    module_name, sep, attr_path = path.partition(":")
    module_name, attr_path = module_name.strip(), attr_path.strip()
    if not sep or not module_name or not attr_path or ":" in attr_path:
        raise _bad(path, "not a Python path", f"write it as {PATH_FORM} (one colon), like math:factorial")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        raise _bad(
            path, f"module {missing!r} not found", "check the spelling and that it is installed or on sys.path"
        ) from None
    except Exception as exc:  # the module's own import failed: say how, in one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise _bad(
            path, f"importing {module_name!r} failed ({type(exc).__name__}: {first})", "fix that module"
        ) from None
    via_class = False
    for part in attr_path.split("."):
        via_class = inspect.isclass(obj)
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise _bad(
                path, f"{module_name} has no attribute {attr_path!r}", "check the name after the colon"
            ) from None
    if not callable(obj):
        raise _bad(path, f"{attr_path!r} is not callable (it is of type {type(obj).__name__})", "name a function")
    return obj, via_class


def _docs(fn: Callable) -> tuple[str, dict[str, str]]:
    """The function's description and `{parameter: description}` from its docstring."""
    import docstring_parser

    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    description = "\n\n".join(p for p in (doc.short_description, doc.long_description) if p)
    return description, {p.arg_name: p.description for p in doc.params if p.description}


def _clean(schema: dict) -> dict:
    """The JSON Schema without pydantic's generated titles (noise in a prompt)."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema


def _argument_errors(exc: Any) -> str:
    """A pydantic ValidationError as one line naming each argument."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(arguments)"
        kind = err.get("type")
        if kind == "missing":
            parts.append(f"argument {loc!r} is required")
        elif kind == "extra_forbidden":
            parts.append(f"unexpected argument {loc!r}")
        else:
            parts.append(f"argument {loc!r}: {err.get('msg')} (got {err.get('input')!r:.60})")
    return "; ".join(parts)


def python_tool(path: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Tool:
    """A tool that calls the Python function `path` ("package.module:function", or "module:Class.method"
    for a static or class method).

    Its name is the part after the colon; `source="python"`, `origin=path`. Calling its `fn` validates the
    arguments (pydantic's usual coercion: "3" for an int is accepted, 3.5 is not) and returns the
    function's result: a `ToolResult` or str as it is, anything else as `str(result)`. A call that has not
    returned after `timeout_s` (an MCP server's default deadline) raises `ToolDeadlineError` naming the tool;
    Python cannot stop a thread, so the abandoned call runs on in a daemon thread and the case goes on.

    Raises:
        ValueError: one line naming the path and the fix: no colon, module not found, attribute missing,
            not callable, only `*args`, an instance method, or a parameter type pydantic cannot describe.
    """
    try:
        import pydantic
    except ImportError:
        raise ValueError(f"Python tool {path!r} needs pydantic and docstring-parser: {INSTALL_HINT}") from None
    fn, via_class = _resolve(path)
    name = path.partition(":")[2].strip()
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise _bad(path, "its signature cannot be read", "wrap it in a Python function with named parameters") from None
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except NameError as exc:  # a string annotation naming something the module does not import
        raise _bad(
            path, f"its type hints cannot be resolved ({exc})", "import the types its annotations name"
        ) from None
    except TypeError:  # a builtin or callable object without __annotations__: the signature's own
        hints = {}
    params = list(sig.parameters.values())
    if via_class and params and params[0].name == "self":
        raise _bad(path, "is an instance method", "make it a staticmethod or classmethod, or name a function")
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not named and any(p.kind is p.VAR_POSITIONAL for p in params):
        raise _bad(path, "takes only *args, which a tool call cannot fill", "give it named parameters")

    description, param_docs = _docs(fn)
    fields: dict[str, Any] = {}
    for i, p in enumerate(named):
        annotation = hints.get(p.name, Any) if p.annotation is not p.empty else Any
        try:
            pydantic.TypeAdapter(annotation).json_schema()
        except Exception as exc:
            raise _bad(
                path,
                f"parameter {p.name!r} has a type pydantic cannot describe ({type(exc).__name__})",
                "annotate it with a JSON type (str, int, float, bool, list, dict, a pydantic model)",
            ) from None
        default = ... if p.default is p.empty else p.default
        # Internal field names with the parameter as alias: a parameter may be called `json` or `model_x`.
        fields[f"arg{i}"] = (annotation, pydantic.Field(default, alias=p.name, description=param_docs.get(p.name)))
    config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False)
    try:
        model = pydantic.create_model(f"{name.replace('.', '_')}_arguments", __config__=config, **fields)
        schema = _clean(model.model_json_schema(by_alias=True))
    except Exception as exc:  # a default that does not fit its type, an unsupported construct
        raise _bad(path, f"no schema for its parameters ({type(exc).__name__})", "simplify its signature") from None
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    schema["type"] = "object"

    def call(**arguments: Any) -> Any:
        try:
            values = model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            raise ToolArgumentError(_argument_errors(exc)) from None
        args, kwargs = [], {}
        for i, p in enumerate(named):
            value = getattr(values, f"arg{i}")
            if p.kind is p.POSITIONAL_ONLY:
                args.append(value)
            else:
                kwargs[p.name] = value
        result = _within(timeout_s, path, lambda: _finished(fn(*args, **kwargs)))
        return result if isinstance(result, (str, ToolResult)) else str(result)

    call.__name__ = fn.__name__ if hasattr(fn, "__name__") else name
    call.__doc__ = description
    return Tool(name=name, description=description, parameters=schema, fn=call, source="python", origin=path)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _finished(result: Any) -> Any:
    """The result, an async function's run to completion here."""
    return asyncio.run(_awaited(result)) if inspect.isawaitable(result) else result


def _within(timeout_s: float, path: str, work: Callable[[], Any]) -> Any:
    """`work()`'s result or exception, or `ToolDeadlineError` once `timeout_s` has passed without one."""
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = work()
        except BaseException as exc:  # handed to the caller's thread as it is
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"python-tool {path}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise ToolDeadlineError(f"Python tool {path!r} did not return within {timeout_s:g} s; the call was abandoned")
    if "error" in box:
        raise box["error"]
    return box["result"]

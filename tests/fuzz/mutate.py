"""Generators for the fuzz tier: real near-valid inputs, mutated.

A seed (a real file's bytes) is decoded into JSON where it is JSON (a document, JSON lines, the members
of an Inspect `.eval` zip), a few structural mutations are applied (drop, duplicate or retype a key or an
element, inject awkward text), it is written back, and sometimes cut or a byte is changed, so most inputs
stay close enough to the format to reach deep into its reader.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

EXAMPLES: Counter = Counter()  # target -> examples run, for benchmarks/results/fuzz.json


def ran(target: str) -> None:
    """Count one example of `target` (every fuzz test's body calls it first)."""
    EXAMPLES[target] += 1


SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "fuzz" / "seeds"
MAX_BYTES = 256 << 10  # the largest input one example writes

# Text that has broken parsers: control characters, a NUL, lone surrogates (valid as JSON escapes, not as
# UTF-8), right-to-left marks, combining marks, digits that `str.isdigit` accepts and `int` does not, markup.
AWKWARD = [
    "",
    " ",
    "\x00",
    "\ud800",
    "\udfff",
    "\u202e",
    "e\u0301",
    "²",
    "١٢",
    "\n",
    "\r\n",
    "\t",
    '"',
    "\\",
    "'",
    "{",
    "[",
    "}",
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "[TOOL_CALLS]",
    "<|python_tag|>",
    "NaN",
    "-1",
    "0",
    "1e999",
    "9" * 30,
    "𝔘𝔫𝔦",
    "=cmd",
]
awkward_text = st.one_of(st.sampled_from(AWKWARD), st.text(max_size=12))
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    awkward_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(awkward_text, inner, max_size=3),
    max_leaves=6,
)


def _nodes(value: Any, path: tuple = ()) -> list:
    """Every (path, node) of a JSON value, the root first."""
    out = [(path, value)]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_nodes(v, path + (k,)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_nodes(v, path + (i,)))
    return out


def _set(root: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    parent = root
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = new
    return root


@st.composite
def mutated_json(draw: Any, value: Any) -> Any:
    """`value` (a decoded JSON seed, copied) after one to four structural mutations."""
    value = json.loads(json.dumps(value))
    for _ in range(draw(st.integers(1, 4))):
        nodes = _nodes(value)
        path, node = nodes[draw(st.integers(0, len(nodes) - 1))]
        op = draw(st.sampled_from(["drop", "duplicate", "retype", "text", "add", "deep", "empty"]))
        if op == "drop" and path:
            parent = value
            for p in path[:-1]:
                parent = parent[p]
            del parent[path[-1]]
        elif op == "duplicate" and isinstance(node, list) and node:
            node.append(json.loads(json.dumps(node[draw(st.integers(0, len(node) - 1))])))
        elif op == "duplicate" and isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
            node[key + draw(st.sampled_from(["", "_", " "]))] = json.loads(json.dumps(node[key]))
        elif op == "retype":
            value = _set(value, path, draw(json_values))
        elif op == "text" and isinstance(node, str):
            at = draw(st.integers(0, len(node)))
            value = _set(value, path, node[:at] + draw(awkward_text) + node[at:])
        elif op == "add" and isinstance(node, dict):
            node[draw(awkward_text)] = draw(json_values)
        elif op == "deep":
            value = _set(value, path, json.loads("[" * 300 + "]" * 300))
        elif op == "empty":
            value = _set(value, path, {} if isinstance(node, dict) else [] if isinstance(node, list) else "")
    return value


def _dump(value: Any, ascii_only: bool) -> bytes:
    # ensure_ascii keeps lone surrogates as \\u escapes (valid JSON); without it they cannot be UTF-8
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


@st.composite
def bytes_noise(draw: Any, data: bytes) -> bytes:
    """`data` cut, with a byte changed, or bytes inserted (or as it is)."""
    op = draw(st.sampled_from(["keep", "keep", "cut", "flip", "insert"]))
    if not data or op == "keep":
        return data
    at = draw(st.integers(0, len(data) - 1))
    if op == "cut":
        return data[:at]
    if op == "flip":
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    return data[:at] + draw(st.binary(max_size=8)) + data[at:]


@st.composite
def mutated_file(draw: Any, name: str) -> bytes:
    """A seed file of tests/fixtures/fuzz/seeds, mutated as its kind allows."""
    raw = (SEEDS / name).read_bytes()
    if name.endswith((".eval", ".zip")):
        return draw(mutated_zip(raw))
    if name.endswith(".parquet"):  # binary: its bytes cut or changed
        return draw(bytes_noise(raw))
    ascii_only = draw(st.booleans())
    if name.endswith(".jsonl"):
        lines = [json.loads(x) for x in raw.decode().splitlines() if x.strip()]
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = draw(mutated_json(lines[i]))
        if draw(st.booleans()):
            lines.insert(draw(st.integers(0, len(lines))), lines[draw(st.integers(0, len(lines) - 1))])
        out = b"\n".join(_dump(x, ascii_only) for x in lines) + b"\n"
    elif name.endswith(".json"):
        out = _dump(draw(mutated_json(json.loads(raw))), ascii_only)
    else:  # CSV: lines dropped, duplicated or given awkward cells
        rows = raw.decode().splitlines()
        i = draw(st.integers(0, len(rows) - 1))
        op = draw(st.sampled_from(["drop", "dup", "cell"]))
        if op == "drop":
            del rows[i]
        elif op == "dup":
            rows.insert(i, rows[i])
        else:
            cells = rows[i].split(",")
            j = draw(st.integers(0, len(cells) - 1))
            cells[j] = draw(awkward_text)
            rows[i] = ",".join(cells)
        out = "\n".join(rows).encode("utf-8", "surrogatepass")
    return draw(bytes_noise(out))[:MAX_BYTES]


def zip_members(raw: bytes) -> dict:
    """`{name: bytes}` of a zipped seed's members, decompressed as evalrx reads them."""
    from evalrx.interop.inspect_eval import read_entry  # Inspect writes Zstandard members, which zipfile cannot read
    from evalrx.interop.limits import ImportLimits

    fh = io.BytesIO(raw)
    with zipfile.ZipFile(fh) as zf:
        return {i.filename: read_entry(fh, i, "seed.eval", ImportLimits()) for i in zf.infolist()}


@st.composite
def mutated_zip(draw: Any, raw: bytes) -> bytes:
    """An Inspect `.eval` log or an export zipped with its pictures, one JSON member mutated (or a member dropped),
    rezipped with Deflate (as older Inspect wrote); or its own bytes cut or changed."""
    if draw(st.integers(0, 4)) == 0:
        return draw(bytes_noise(raw))
    members = zip_members(raw)
    names = sorted(members)
    name = draw(st.sampled_from(names))
    if draw(st.integers(0, 5)) == 0:
        del members[name]
    elif name.endswith(".json"):
        members[name] = _dump(draw(mutated_json(json.loads(members[name]))), draw(st.booleans()))
    elif name.endswith(".jsonl"):
        lines = members[name].splitlines()
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = _dump(draw(mutated_json(json.loads(lines[i]))), draw(st.booleans()))
        members[name] = b"\n".join(lines) + b"\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    return buf.getvalue()


def one_line(exc: BaseException) -> bool:
    """A message a person reads: one non-empty line."""
    text = str(exc)
    return bool(text.strip()) and "\n" not in text.strip()

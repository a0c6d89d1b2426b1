"""A deterministic sweep of the import readers: every field of a seed file, retyped to each awkward value and
changed by each structural edit, one at a time, imported as the Import page does (`check_import`).

Random fuzzing (the rest of tests/fuzz) reaches a field's rare value by chance; the sweep reaches every field
with every value. Its first run found an Inspect `epoch` of 2**70 that 20,000 random examples had missed.
A field is swept once per shape: list indices are one field ("messages.*.content"), and so are members or
lines of one kind (each sample of a `.eval`, each line of a `.jsonl`).

Usage:
    .venv/bin/python tests/fuzz/sweep.py [SEED ...] [--limit N] [--out DIR]      (make fuzz-sweep)
SEED names import seeds of tests/fixtures/fuzz/seeds (default: every JSON-shaped one). A variant that fails otherwise
than with one line naming the file is a crasher: the first of each kind (the exception's type and the evalrx
line it came from) is written to --out, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import re
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: mutate and the import oracle

from mutate import SEEDS, _dump, _nodes, zip_members  # noqa: E402

# Retypes: each field set to each of these, in turn.
VALUES: list = [None, True, 0, -1, 2**70, -(2**70), 1.7e308, "", "\x00", "\ud800", [1], {"a": 1}, [], {}]
# Text put inside a string field: what has broken parsers and the store.
INSERTS = ["\x00", "\ud800", "attachment://x", "\n", "</tool_call>", "1e999", "²"]
SWEPT = (".eval", ".zip", ".json", ".jsonl")


def sweepable(name: str) -> bool:
    return name.endswith(SWEPT)


def _units(name: str, raw: bytes) -> "tuple[dict, Callable[[dict], bytes]]":
    """The seed's JSON values by unit (`(kind, id)`: a zip member, a line) and how to write them back."""
    if name.endswith((".eval", ".zip")):
        members = zip_members(raw)
        units: dict = {}
        for member, data in members.items():
            kind = re.sub(r"\d+", "#", member)
            if member.endswith(".json"):
                units[(kind, member)] = json.loads(data)
            elif member.endswith(".jsonl"):
                for i, line in enumerate(data.splitlines()):
                    if line.strip():
                        units[(kind + ":line", (member, i))] = json.loads(line)

        def build(values: dict) -> bytes:
            out = dict(members)
            lines: dict = {}
            for (kind, uid), value in values.items():
                if kind.endswith(":line"):
                    lines.setdefault(uid[0], []).append((uid[1], value))
                else:
                    out[uid] = _dump(value, True)
            for member, rows in lines.items():
                out[member] = b"\n".join(_dump(v, True) for _, v in sorted(rows)) + b"\n"
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
                for member, data in out.items():
                    zf.writestr(member, data)
            return buf.getvalue()

        return units, build
    if name.endswith(".jsonl"):
        rows = [json.loads(x) for x in raw.decode().splitlines() if x.strip()]
        return {
            ("line", i): row for i, row in enumerate(rows)
        }, lambda values: b"\n".join(_dump(v, True) for _, v in sorted(values.items(), key=lambda kv: kv[0][1])) + b"\n"
    return {("document", 0): json.loads(raw)}, lambda values: _dump(values[("document", 0)], True)


def _edits(node: Any) -> Iterator["tuple[str, Any]"]:
    """(label, edit) for one field: an edit takes the field's parent and key and changes it there."""
    for value in VALUES:
        yield f"= {value!r:.20}", lambda parent, key, v=value: parent.__setitem__(key, copy.deepcopy(v))
    yield "dropped", lambda parent, key: parent.__delitem__(key)
    yield "300 deep", lambda parent, key: parent.__setitem__(key, json.loads("[" * 300 + "]" * 300))
    if isinstance(node, list) and node:
        yield "items doubled", lambda parent, key: parent[key].extend(copy.deepcopy(parent[key]))
    if isinstance(node, dict) and node:
        yield (
            "keys doubled",
            lambda parent, key: parent[key].update(
                {k + "_": copy.deepcopy(v) for k, v in list(parent[key].items())[:3]}
            ),
        )
    if isinstance(node, str):
        for text in INSERTS:
            half = len(node) // 2
            yield f"+ {text!r}", lambda parent, key, t=text, h=half: parent.__setitem__(key, node[:h] + t + node[h:])


def variants(name: str) -> Iterator["tuple[str, bytes]"]:
    """(what was changed, the file's bytes) for every field shape of seed `name` and every edit of it."""
    raw = (SEEDS / name).read_bytes()
    units, build = _units(name, raw)
    seen: set = set()
    for (kind, uid), doc in units.items():
        for path, node in _nodes(doc):
            shape = (kind, tuple("*" if isinstance(p, int) else p for p in path))
            if shape in seen:
                continue
            seen.add(shape)
            for label, edit in _edits(node):
                if not path and label == "dropped":
                    continue
                changed = copy.deepcopy(doc)
                if path:
                    parent = changed
                    for p in path[:-1]:
                        parent = parent[p]
                    edit(parent, path[-1])
                else:
                    box = [changed]
                    edit(box, 0)
                    changed = box[0]
                where = ".".join(str(p) for p in shape[1]) or "(root)"
                yield f"{kind} {where} {label}", build({**units, (kind, uid): changed})


def sweep(names: list, limit: int = 0, out: "Path | None" = None, log: Any = print) -> dict:
    """Import every variant of each seed into a fresh copy of a store holding the Inspect seed's run.

    Returns `{"imports": n, "crashers": {kind: (seed, what changed, message)}}`; with `out`, each crasher's file
    is written there.
    """
    from test_fuzz_imports import check_import, pristine_store  # the oracle the random fuzz uses

    import evalrx.store as S

    with tempfile.TemporaryDirectory(prefix="evalrx-sweep-") as tmp:
        pristine = pristine_store(Path(tmp) / "pristine.sqlite")
        try:
            crashers, n = _sweep_into(names, pristine, check_import, limit, out, log)
        finally:
            S.forget(f"sqlite:///{pristine.with_name('work.sqlite')}")
    return {"imports": n, "crashers": crashers}


def _sweep_into(names: list, pristine: Path, check_import: Any, limit: int, out: "Path | None", log: Any) -> tuple:
    crashers: dict = {}
    n, t0 = 0, time.monotonic()
    for name in names:
        for what, raw in variants(name):
            if limit and n >= limit:
                break
            n += 1
            try:
                check_import(name, raw, pristine)
            except Exception as exc:  # AssertionError from the oracle included: each is a finding
                frames = traceback.extract_tb(exc.__traceback__)
                own = [f for f in frames if "/evalrx/" in f.filename] or frames
                kind = f"{type(exc).__name__} at {own[-1].filename.split('/evalrx/')[-1]}:{own[-1].lineno}"
                if kind not in crashers:
                    crashers[kind] = (name, what, str(exc)[:300])
                    log(f"CRASHER {kind}: {name}: {what}: {str(exc)[:200]}")
                    if out is not None:
                        out.mkdir(parents=True, exist_ok=True)
                        (out / f"crasher{len(crashers)}_{name}").write_bytes(raw)
            if n % 1000 == 0:
                log(f"{n} imports, {len(crashers)} crashers, {time.monotonic() - t0:.0f} s")
    return crashers, n


def main(argv: "list | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seeds", nargs="*", help="seed file names (default: every JSON-shaped seed)")
    parser.add_argument("--limit", type=int, default=0, help="stop after this many imports (0: all)")
    parser.add_argument("--out", type=Path, default=None, help="where crashers' files are written")
    args = parser.parse_args(argv)
    from test_fuzz_imports import LABEL_SEEDS, TRAJECTORY_SEEDS

    known = [n for n in TRAJECTORY_SEEDS + LABEL_SEEDS if sweepable(n)]
    names = args.seeds or known
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"not a JSON-shaped import seed: {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    result = sweep(names, args.limit, args.out)
    print(f"{result['imports']} imports of {len(names)} seeds, {len(result['crashers'])} crashers")
    return 1 if result["crashers"] else 0


if __name__ == "__main__":
    sys.exit(main())

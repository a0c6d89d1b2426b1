"""ATIF (Agent Trajectory Interchange Format, Harbor's RFC 0001) to and from evalrx export rows.

An ATIF document is one trajectory: `steps` of source "system", "user" or "agent", where an
agent step holds the model's message, its `tool_calls` and the `observation` results that
answered them. evalrx's steps map onto that (an actor step plus the tool steps after it make
one agent step); what ATIF has no field for (spans, parse errors, raw call text, structured
observations) goes in the step's `extra.evalrx`, and the case, grade, labels, attempt and
diagnosis in the root's `extra.evalrx`, so export -> import -> export gives the same bytes.
A document without `extra.evalrx` (written by another tool) imports from its standard fields.

Pictures are ATIF 1.6 image content parts: the case's on the first user message, a tool's in its
observation result, each a file `images/<sha256>.<ext>` beside the document (`interop.pictures`);
a document with none stays ATIF 1.4. On import a picture that cannot be read back (a link, a
missing file) is counted on its step (`n_images`), as a gap.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from evalrx.core.case import Termination
from evalrx.core.content import content_text
from evalrx.core.observation import observation_text
from evalrx.interop.evalrx_jsonl import record_of_row
from evalrx.interop.files import write_lines
from evalrx.interop.limits import DEFAULT_MAX_RECORD_BYTES
from evalrx.interop.messages import as_dict
from evalrx.interop.pictures import as_file, picture_of, picture_path, read_picture, row_pictures, write_pictures
from evalrx.interop.records import Reading, Record
from evalrx.interop.registry import ExportOptions, Format, register

SCHEMA_VERSION = "ATIF-v1.4"
PICTURES_VERSION = "ATIF-v1.6"  # the first with image content parts
_SOURCES = ("system", "user", "agent")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
# session ids are uuid5s of (run name, case, attempt): the same trajectory exports with the same id
_NAMESPACE = uuid.UUID("6f1d3c52-7a4e-5b0e-9d7c-2f6a1e8b9c30")


def is_atif(obj: Any) -> bool:
    """Whether a parsed JSON value is an ATIF document (`schema_version` "ATIF-v1.x")."""
    return isinstance(obj, dict) and str(obj.get("schema_version") or "").startswith("ATIF")


def dumps(doc: dict) -> str:
    """One document as one line; keys sorted so the bytes do not depend on the store's JSON key order."""
    return json.dumps(doc, ensure_ascii=False, sort_keys=True, default=str)


# ---------------------------------------------------------------- evalrx -> ATIF


def to_atif(row: dict) -> dict:
    """An ATIF document for one export row (`evalrx.store.iter_export_rows`)."""
    from evalrx import __version__

    steps = row.get("steps") or []
    case = row.get("case") or {}
    run = row.get("run") or {}
    config = run.get("config") or {}
    model = (config.get("model") or {}).get("name") if isinstance(config.get("model"), dict) else None
    system = (case.get("meta") or {}).get("system") or config.get("system")
    out_steps: list = []
    if isinstance(system, str) and system:
        out_steps.append({"source": "system", "message": system})
    groups = _group(steps)
    case_picture = case["image"] if as_file(case.get("image")) else None
    first_user = next((i for i, g in enumerate(groups) if g[0].get("role") == "user"), None)
    if first_user is None:
        case_picture = None  # no user message to show it: it stays in the root's extra
    made_steps = [_atif_step(group, case_picture if i == first_user else None) for i, group in enumerate(groups)]
    out_steps += made_steps
    for i, st in enumerate(out_steps, start=1):
        st["step_id"] = i
    # What the standard fields alone give back; the differences go in the step's extra (a plain system
    # prompt step gives back no evalrx step, so `rebuilt` lines up with `groups` once those are dropped).
    shown = ([case_picture] if case_picture else []) + [p for s in steps for p in s.get("images") or []]
    known = {picture_path(p): p for p in shown}
    rebuilt = [r for r in _rebuild(out_steps, known.get)[0] if r is not None]
    for st, group, made in zip(made_steps, groups, rebuilt):
        diffs = [
            {k: v for k, v in orig.items() if _canon(again.get(k)) != _canon(v)} for orig, again in zip(group, made)
        ]
        if any(diffs):
            st["extra"] = {"evalrx": {"steps": diffs}}
    metrics = row.get("metrics") or {}
    actor = [s for s in steps if s.get("role") == "actor"]
    final = {
        "total_prompt_tokens": _int(
            metrics.get("total_prompt_tokens"), sum(_int((s.get("span") or {}).get("prompt_tokens"), 0) for s in actor)
        ),
        "total_completion_tokens": _int(
            metrics.get("total_completion_tokens"),
            sum(_int((s.get("span") or {}).get("completion_tokens"), 0) for s in actor),
        ),
        "total_steps": len(out_steps),
    }
    agent: dict = {"name": "evalrx", "version": __version__}
    if model:
        agent["model_name"] = str(model)
    offered = [t for t in row.get("offered_tools") or [] if isinstance(t, dict) and t.get("name")]
    if offered:  # ATIF's optional tool metadata, OpenAI-style, under the names the calls use
        agent["tool_definitions"] = [
            {
                "type": "function",
                "function": {k: t[k] for k in ("name", "description", "parameters") if k in t},
            }
            for t in offered
        ]
    extra = {k: v for k, v in row.items() if k != "steps"}
    if case_picture:  # its bytes are the file the first user message shows
        extra["case"] = {**case, "image": {k: case_picture[k] for k in ("sha256", "mime")}}
    return {
        "schema_version": PICTURES_VERSION if known else SCHEMA_VERSION,
        "session_id": session_id(
            run.get("name"), row.get("case_id") or case.get("id") or row.get("sample_id"), row.get("attempt") or 1
        ),
        "agent": agent,
        "steps": out_steps,
        "final_metrics": final,
        "extra": {"evalrx": extra},
    }


def session_id(run_name: Any, sample_id: Any, attempt: Any) -> str:
    return str(uuid.uuid5(_NAMESPACE, json.dumps([run_name, sample_id, attempt], default=str)))


def _group(steps: list) -> list:
    """evalrx steps in ATIF's units: a user step alone; an actor step with the tool steps after it."""
    groups: list = []
    for s in steps:
        role = s.get("role")
        if role == "tool" and groups and groups[-1][0].get("role") in ("actor", "tool"):
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def _atif_step(group: list, case_picture: Optional[dict] = None) -> dict:
    head = group[0]
    if head.get("role") == "user":
        pictures = ([case_picture] if case_picture else []) + [p for p in head.get("images") or [] if as_file(p)]
        message = head.get("content") or ""
        user: dict = {"source": "user", "message": _parts(message, pictures) if pictures else message}
        if isinstance((head.get("span") or {}).get("started_at"), str):
            user["timestamp"] = head["span"]["started_at"]
        return user
    if head.get("role") == "tool":  # tool results no model turn asked for: a system step's observation
        return {"source": "system", "message": "", "observation": {"results": [_result(t, None, []) for t in group]}}
    span = head.get("span") or {}
    step: dict = {"source": "agent"}
    if isinstance(span.get("started_at"), str):
        step["timestamp"] = span["started_at"]
    message, reasoning = _split_reasoning(head.get("content") or "")
    step["message"] = message
    if reasoning is not None:
        step["reasoning_content"] = reasoning
    calls = [c for c in head.get("tool_calls") or [] if isinstance(c, dict)]
    ids = [str(c.get("id") or f"call_{head.get('idx')}_{j}") for j, c in enumerate(calls)]
    if calls:
        step["tool_calls"] = [
            {
                "tool_call_id": ids[j],
                "function_name": str(c.get("name") or ""),
                "arguments": as_dict(c.get("args")),
            }
            for j, c in enumerate(calls)
        ]
    results = [_result(t, i, ids) for i, t in enumerate(group[1:])]
    if results:
        step["observation"] = {"results": results}
    metrics = _metrics_of(span)
    if metrics:
        step["metrics"] = metrics
    return step


def _result(tool_step: dict, position: Optional[int], ids: list) -> dict:
    span = tool_step.get("span") or {}
    call = span.get("call")
    if not (isinstance(call, int) and 0 <= call < len(ids)):
        call = position if position is not None and position < len(ids) and not span.get("parse_error") else None
    out: dict = {}
    if call is not None:
        out["source_call_id"] = ids[call]
    text = observation_text(tool_step.get("observation"))
    pictures = [p for p in tool_step.get("images") or [] if as_file(p)]
    out["content"] = _parts(text, pictures) if pictures else text
    return out


def _parts(text: str, pictures: list) -> list:
    """ATIF 1.6 content parts: the text (when there is any), then each picture as its file beside the document."""
    parts: list = [{"type": "text", "text": text}] if text else []
    for p in pictures:
        parts.append({"type": "image", "source": {"media_type": p["mime"], "path": picture_path(p)}})
    return parts


def _metrics_of(span: dict) -> dict:
    m: dict = {}
    for key in ("prompt_tokens", "completion_tokens", "cached_tokens"):
        if isinstance(span.get(key), int) and not isinstance(span.get(key), bool):
            m[key] = span[key]
    lps = span.get("logprobs")
    if isinstance(lps, list) and lps:
        values = [lp.get("logprob") if isinstance(lp, dict) else lp for lp in lps]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            m["logprobs"] = values
    if isinstance(span.get("latency_ms"), (int, float)) and not isinstance(span.get("latency_ms"), bool):
        m["extra"] = {"latency_ms": span["latency_ms"]}
    return m


def _split_reasoning(content: str) -> tuple[str, Optional[str]]:
    """`<think>r</think>\\nmessage` -> (message, r), only where joining them back gives the same text."""
    if content.startswith(_THINK_OPEN) and _THINK_CLOSE in content:
        reasoning, _, rest = content[len(_THINK_OPEN) :].partition(_THINK_CLOSE)
        message = rest[1:] if rest.startswith("\n") else rest
        if _join_reasoning(message, reasoning) == content:
            return message, reasoning
    return content, None


def _join_reasoning(message: str, reasoning: Optional[str]) -> str:
    if reasoning is None:
        return message
    return f"{_THINK_OPEN}{reasoning}{_THINK_CLOSE}" + (f"\n{message}" if message else "")


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


# ---------------------------------------------------------------- ATIF -> evalrx


def from_atif(doc: dict, base: Optional[Path] = None, max_picture_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> dict:
    """An evalrx export row for one ATIF document (checked by the JSONL importer afterwards); its
    pictures are read from `base` (the document's folder) or `data:` URLs, each file once, at most
    `max_picture_bytes` of files in all (the ones past it are gaps, as an unreadable one is).

    Raises:
        ValueError: naming the step and field that are wrong.
    """
    steps_in = doc.get("steps")
    if not isinstance(steps_in, list):
        raise ValueError("ATIF `steps` must be a list")
    for i, st in enumerate(steps_in):
        if not isinstance(st, dict):
            raise ValueError(f"ATIF step {i + 1} is not an object")
        if st.get("source") not in _SOURCES:
            raise ValueError(
                f"ATIF step {i + 1} has source {st.get('source')!r}; expected one of {', '.join(_SOURCES)}"
            )

    read: dict = {}
    budget = max_picture_bytes

    def load(location: str) -> Optional[dict]:
        nonlocal budget
        if location not in read:
            data = read_picture(location, base if budget > 0 else None)
            if data is not None and not location.startswith("data:"):
                budget -= len(data)
            read[location] = picture_of(data) if data is not None and budget >= 0 else None
        return read[location]

    rebuilt, system, case_picture = _rebuild(steps_in, load)
    steps: list = []
    for st, made in zip(steps_in, rebuilt):
        if made is None:
            continue
        extra = as_dict(st.get("extra"))
        diffs = (extra.get("evalrx") or {}).get("steps") if isinstance(extra.get("evalrx"), dict) else None
        if diffs is not None and (not isinstance(diffs, list) or len(diffs) != len(made)):
            raise ValueError(f"ATIF step {st.get('step_id')}: extra.evalrx.steps does not match the step's results")
        for j, s in enumerate(made):
            steps.append({**s, **(diffs[j] if diffs and isinstance(diffs[j], dict) else {})})
    evx = (doc.get("extra") or {}).get("evalrx") if isinstance(doc.get("extra"), dict) else None
    if isinstance(evx, dict):
        row = {**evx, "steps": steps}
        case = row.get("case")
        if isinstance(case, dict) and isinstance(case.get("image"), dict) and not case["image"].get("base64"):
            same = case_picture is not None and case_picture["sha256"] == case["image"].get("sha256")
            row["case"] = {**case, "image": case_picture if same else None}
        return row
    return _foreign_row(doc, steps, system, case_picture)


def _rebuild(steps_in: list, load: Callable[[str], Optional[dict]]) -> tuple[list, Optional[str], Optional[dict]]:
    """evalrx step dicts for each ATIF step from its standard fields (None for a plain system prompt),
    the system prompt, and the case's picture (the first one the first user message shows); `load`
    gives a picture for a location, or None where it cannot."""
    out: list = []
    system: list = []
    case_picture: Optional[dict] = None
    first_user = True
    idx = turn = 0
    for n, st in enumerate(steps_in, start=1):
        source = st.get("source")
        message, shown = _message(st.get("message"), n)
        results = _results(st, n)
        if source == "system":
            if message:
                system.append(message)
            if not results:
                out.append(None)
                continue
            made = []
            for content, _, pictures in results:
                made.append(_pictured(_step(idx, "tool", "", observation=content, span={"turn": turn}), pictures, load))
                idx += 1
            out.append(made)
            continue
        if source == "user":
            at: dict = {"started_at": st["timestamp"]} if isinstance(st.get("timestamp"), str) else {}
            if first_user and shown:
                at["has_image"] = True
                case_picture, shown = load(shown[0]), shown[1:]
            first_user = False
            out.append([_pictured(_step(idx, "user", message, span=at), shown, load)])
            idx += 1
            continue
        turn += 1
        calls, names = _calls(st.get("tool_calls"), n)
        span: dict = {}
        if isinstance(st.get("timestamp"), str):
            span["started_at"] = st["timestamp"]
        span.update(_span_of(st.get("metrics")))
        span["turn"] = turn
        reasoning = st.get("reasoning_content")
        made = [
            _step(
                idx,
                "actor",
                _join_reasoning(message, reasoning if isinstance(reasoning, str) else None),
                tool_calls=calls,
                span=span,
            )
        ]
        idx += 1
        order = [c["id"] for c in calls]
        for content, call_id, pictures in results:
            tspan: dict = {"turn": turn}
            if call_id in order:
                tspan["call"] = order.index(call_id)
            made.append(
                _pictured(_step(idx, "tool", names.get(call_id, ""), observation=content, span=tspan), pictures, load)
            )
            idx += 1
        out.append(made)
    return out, ("\n".join(system) if system else None), case_picture


def _pictured(step: dict, locations: list, load: Callable[[str], Optional[dict]]) -> dict:
    """`step` with the pictures at `locations` it could read; a count on its span when some could not."""
    pictures = [p for p in (load(loc) for loc in locations) if p is not None]
    if pictures:
        step["images"] = pictures
    if len(pictures) < len(locations):
        step["span"]["n_images"] = len(locations)
    return step


def _step(
    idx: int,
    role: str,
    content: str,
    *,
    tool_calls: Optional[list] = None,
    observation: Any = None,
    span: Optional[dict] = None,
) -> dict:
    return {
        "idx": idx,
        "role": role,
        "content": content,
        "tool_calls": tool_calls or [],
        "observation": observation,
        "parse_error": None,
        "span": span or {},
    }


def _message(value: Any, n: int) -> tuple[str, list]:
    """A step's message: a string, or (ATIF 1.6) a list of content parts: their text, and the
    locations of the image parts' pictures."""
    if value is None or isinstance(value, (str, list)):
        locations = []
        for part in value if isinstance(value, list) else []:
            if isinstance(part, dict) and part.get("type") == "image":
                source = part.get("source")
                path = source.get("path") if isinstance(source, dict) else None
                locations.append(path if isinstance(path, str) else "")
        return content_text(value, sep="\n"), locations
    raise ValueError(f"ATIF step {n}: `message` must be a string or a list of content parts")


def _calls(raw: Any, n: int) -> tuple[list, dict]:
    if raw is None:
        return [], {}
    if not isinstance(raw, list):
        raise ValueError(f"ATIF step {n}: `tool_calls` must be a list")
    calls, names = [], {}
    for j, c in enumerate(raw):
        if not isinstance(c, dict) or not isinstance(c.get("function_name"), str) or not c["function_name"]:
            raise ValueError(f"ATIF step {n}: tool call {j} has no `function_name`")
        args = c.get("arguments")
        if isinstance(args, str):  # some writers keep the model's JSON text
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                raise ValueError(f"ATIF step {n}: tool call {j} arguments are not valid JSON") from None
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise ValueError(f"ATIF step {n}: tool call {j} `arguments` must be an object")
        call_id = str(c.get("tool_call_id") or f"call_{n}_{j}")
        calls.append({"name": c["function_name"], "args": args, "id": call_id})
        names[call_id] = c["function_name"]
    return calls, names


def _results(st: dict, n: int) -> list:
    obs = st.get("observation")
    if obs is None:
        return []
    if not isinstance(obs, dict) or not isinstance(obs.get("results", []), list):
        raise ValueError(f"ATIF step {n}: `observation` must be an object with a `results` list")
    out = []
    for r in obs.get("results") or []:
        if not isinstance(r, dict):
            raise ValueError(f"ATIF step {n}: an observation result is not an object")
        content, pictures = _message(r.get("content"), n)
        if not content and not pictures and r.get("subagent_trajectory_ref"):
            refs = r["subagent_trajectory_ref"] if isinstance(r["subagent_trajectory_ref"], list) else []
            content = "subagent " + ", ".join(str((x or {}).get("session_id")) for x in refs if isinstance(x, dict))
        out.append((content, r.get("source_call_id"), pictures))
    return out


def _span_of(metrics: Any) -> dict:
    if not isinstance(metrics, dict):
        return {}
    span: dict = {}
    for key in ("prompt_tokens", "completion_tokens", "cached_tokens"):
        if isinstance(metrics.get(key), int) and not isinstance(metrics.get(key), bool):
            span[key] = metrics[key]
    if isinstance(metrics.get("logprobs"), list) and metrics["logprobs"]:
        span["logprobs"] = [{"logprob": v} for v in metrics["logprobs"]]
    if isinstance(metrics.get("cost_usd"), (int, float)):
        span["cost_usd"] = metrics["cost_usd"]
    extra = as_dict(metrics.get("extra"))
    if isinstance(extra.get("latency_ms"), (int, float)) and not isinstance(extra.get("latency_ms"), bool):
        span["latency_ms"] = extra["latency_ms"]
    return span


def _foreign_row(doc: dict, steps: list, system: Optional[str], case_picture: Optional[dict]) -> dict:
    """A row for an ATIF document another tool wrote: no grade, a case made from its first user message."""
    sid = str(doc.get("session_id") or doc.get("trajectory_id") or "")
    if not sid:
        raise ValueError("the ATIF document has no `session_id`")
    agent = as_dict(doc.get("agent"))
    goal = next((s["content"] for s in steps if s["role"] == "user"), "")
    actor = [s for s in steps if s["role"] == "actor"]
    last = steps[-1] if steps else None
    final = last["content"] if last and last["role"] == "actor" and not last["tool_calls"] else None
    fm = as_dict(doc.get("final_metrics"))
    metrics: dict = {
        "n_steps": len(steps),
        "n_turns": len(actor),
        "n_tool_calls": sum(len(s["tool_calls"]) for s in actor),
        "n_parse_errors": 0,
        "terminated": Termination.FINAL.value if final is not None else Termination.INCOMPLETE.value,
        "source": "atif",
    }
    for ours in ("total_prompt_tokens", "total_completion_tokens", "total_cost_usd"):
        if isinstance(fm.get(ours), (int, float)) and not isinstance(fm.get(ours), bool):
            metrics[ours] = fm[ours]
    meta: dict = {"atif_session_id": sid}
    if system is not None:
        meta["system"] = system
    if isinstance(doc.get("extra"), dict) and doc["extra"]:
        meta["atif_extra"] = doc["extra"]
    model = agent.get("model_name")
    name = str(agent.get("name") or "atif") + (f" ({model})" if model else "")
    offered = []
    for definition in agent.get("tool_definitions") or []:
        fn = as_dict(as_dict(definition).get("function") or definition)
        if isinstance(fn.get("name"), str) and fn["name"]:
            params = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
            offered.append({"name": fn["name"], "description": str(fn.get("description") or ""), "parameters": params})
    return {
        "sample_id": sid,
        "goal": goal,
        "steps": steps,
        "final_answer": final,
        "outcome": "unknown",
        "metrics": metrics,
        "offered_tools": [dict(t, source="case") for t in offered],
        "case": {"id": sid, "prompt": goal, "meta": meta, **({"image": case_picture} if case_picture else {})},
        "run": {
            "name": name,
            "config": {
                "model": {"name": model or "unknown", "backend": "atif"},
                "atif_agent": {k: agent.get(k) for k in ("name", "version") if k in agent},
            },
        },
    }


# ---------------------------------------------------------------- the format


def _is_atif(obj: dict, whole: bool) -> bool:
    return is_atif(obj)


def _read(obj: dict, where: Any, reading: Reading) -> Iterator[Record]:
    record = record_of_row(from_atif(obj, reading.path.parent, reading.limits.max_record_bytes))
    record.where = where
    yield record


def _write(rows: Iterator[dict], path: Optional[Path], options: ExportOptions) -> int:
    if path is None:
        raise ValueError("an ATIF export needs an output file")

    def lines() -> Iterator[str]:
        for row in rows:
            write_pictures(row_pictures(row), path.parent)
            yield dumps(to_atif(row))

    return write_lines(path, lines())


register(
    Format(
        name="atif",
        title="ATIF",
        sniff_rank=20,
        sniff_record=_is_atif,
        read_record=_read,
        write=_write,
        suffixes=(".atif.jsonl", ".atif.json"),
        listable=True,
        mime="application/jsonl",
    )
)

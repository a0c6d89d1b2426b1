"""Conversions between evalrx's core types and table rows, and the array/blob codecs."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Iterable, Optional

from evalrx.core.case import FailureCase, Inputs, Label, Step, StepRole, Trajectory
from evalrx.core.observation import canonical_json, observation_text
from evalrx.core.tool import ToolCall
from evalrx.store.engine import storable_text

# Span keys that mark a step for the pages' badges (loop policies, errors).
FLAG_KEYS = ("repeat_blocked", "tool_error", "parse_error", "forced_final", "ignored_calls")
SEARCH_TEXT_LIMIT = 32_000  # characters of lower-cased text kept per trajectory for search
STORED_TEXT_LIMIT = 1_000_000  # characters of one model output or tool observation kept in the store


def truncated(text: Any, limit: int = STORED_TEXT_LIMIT) -> "tuple[Any, Optional[int]]":
    """(text cut to `limit` with a marker, original length) for an over-long string; (text, None) otherwise."""
    if not isinstance(text, str) or len(text) <= limit:
        return text, None
    return text[:limit] + f"\n[… truncated by evalrx: {len(text):,} characters in all]", len(text)


def clean(value: Any) -> Any:
    """Replace NUL characters and lone surrogates, which no store can keep, in strings at any depth."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def jsonable(value: Any) -> Any:
    """Make a value storable as JSON on both backends, in one walk.

    Unknown objects become their str, tuples lists, keys strings; NUL characters and lone surrogates are
    replaced and non-finite floats (which PostgreSQL's JSONB rejects) become strings.
    """
    if value is None or value is True or value is False:
        return value
    kind = type(value)
    if kind is str:
        return storable_text(value)
    if kind is int:
        return value
    if kind is float:
        return value if math.isfinite(value) else str(value)
    if kind is dict or isinstance(value, dict):
        return {storable_text(k if type(k) is str else str(k)): jsonable(v) for k, v in value.items()}
    if kind is list or isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (int, float)):  # bool handled above; numpy scalars and friends
        return jsonable(value.item() if hasattr(value, "item") else float(value))
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return jsonable(value.item())
    return clean(str(value))


# ---------------------------------------------------------------- blobs and images


def image_bytes(image: Any) -> Optional[bytes]:
    """Bytes of a case or tool image given as bytes, a path, or a PIL image (saved as PNG)."""
    if image is None:
        return None
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    if isinstance(image, (str, Path)):
        return Path(image).read_bytes()
    if hasattr(image, "save"):  # a PIL image
        import io

        buf = io.BytesIO()
        image.save(buf, format="PNG")
        return buf.getvalue()
    raise TypeError(f"cannot store an image of type {type(image).__name__}")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- cases


def case_fields(case: FailureCase, image_sha: Optional[str]) -> dict:
    """The `cases` row for a FailureCase, with the digest that deduplicates identical content."""
    fields = {
        "sample_id": clean(case.id),
        "prompt": clean(truncated(case.inputs.prompt or "")[0]),
        "expected": jsonable(case.expected),
        "grader": jsonable(case.grader),
        "meta": jsonable(case.meta or {}),
        "image_sha256": image_sha,
    }
    # Hashed under the column's name before 0007 (`case_key`), so stored cases keep their digests and still dedupe.
    hashed = {("case_key" if k == "sample_id" else k): v for k, v in fields.items()}
    fields["digest"] = hashlib.sha256(canonical_json(hashed).encode("utf-8")).hexdigest()
    return fields


def case_from_row(row: Any, image: Any = None) -> FailureCase:
    """Rebuild the FailureCase a `cases` row stores (`image` as bytes or PIL, when it has one)."""
    return FailureCase(
        inputs=Inputs(prompt=row.prompt, image=image),
        id=row.sample_id,
        expected=row.expected,
        grader=row.grader,
        meta=dict(row.meta or {}),
    )


def case_dict(row: Any) -> dict:
    return {
        "id": row.sample_id,
        "prompt": row.prompt,
        "expected": row.expected,
        "grader": row.grader,
        "meta": row.meta or {},
        "image_sha256": row.image_sha256,
    }


# ---------------------------------------------------------------- trajectories and steps


_INT64 = 2**63  # both databases' BIGINT: a larger count read from a file is no count


def _num(value: Any, kind: type = float) -> Any:
    try:
        n = kind(value) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None
    return None if kind is int and n is not None and not -_INT64 <= n < _INT64 else n


def step_fields(step: Step) -> dict:
    """The `steps` row for a core Step (full span kept for exact export)."""
    span = jsonable(step.span or {})
    calls = jsonable([c.to_dict() for c in step.tool_calls])
    # A runaway output or a huge tool result is kept in part, with its real size on the span.
    content, content_len = truncated(step.content or "")
    observation = None if step.observation is None else step.observation.value
    if isinstance(observation, dict) and isinstance(observation.get("text"), str):
        text, obs_len = truncated(observation["text"])
        observation = dict(observation, text=text)
    else:
        observation, obs_len = truncated(observation)
    cut = {k: v for k, v in (("content", content_len), ("observation", obs_len)) if v is not None}
    if cut:
        span = dict(span, truncated=cut)
    role = step.role.value if isinstance(step.role, StepRole) else str(step.role)
    if role == StepRole.TOOL.value:
        tool_name = step.content or None
    else:
        tool_name = step.tool_calls[0].name if step.tool_calls else None
    flags = [k for k in FLAG_KEYS if span.get(k)]
    if step.parse_error and "parse_error" not in flags:
        flags.append("parse_error")
    return {
        "idx": int(step.idx),
        "role": role,
        "content": clean(content),
        "tool_calls": calls,
        "tool_name": (tool_name or None) and str(tool_name)[:100],
        "observation": jsonable(observation),
        "parse_error": clean(step.parse_error),
        "latency_ms": _num(span.get("latency_ms")),
        "prompt_tokens": _num(span.get("prompt_tokens"), int),
        "completion_tokens": _num(span.get("completion_tokens"), int),
        "flags": ",".join(flags)[:200] or None,
        "span": span,
        "agent": clean(step.agent),
        "addressee": clean(step.addressee),
    }


def step_from_row(row: Any) -> Step:
    return Step(
        idx=row.idx,
        role=StepRole(row.role),
        content=row.content or "",
        # A call that is not an object (an older import kept one as written) reads as its text, never a crash.
        tool_calls=[
            ToolCall.from_dict(c if isinstance(c, dict) else {"name": "", "raw": json.dumps(c)})
            for c in row.tool_calls or []
        ],
        observation=row.observation,
        parse_error=row.parse_error,
        span=dict(row.span or {}),
        agent=row.agent,
        addressee=row.addressee,
    )


def tools_used(steps: Iterable[Step]) -> list[str]:
    """Names of the tools the model called, in first-call order."""
    seen: dict = {}
    for s in steps:
        for call in s.tool_calls:
            name = call.name
            if name:
                seen.setdefault(str(name)[:100], None)
    return list(seen)


def agents_of(steps: Iterable[Step]) -> list[dict]:
    """The `trajectory_agents` rows of a team's steps: each agent's step count and summed latency, in order
    of appearance; none for a single-agent run."""
    found: dict = {}
    for s in steps:
        if s.agent is None:
            continue
        name = clean(s.agent)  # grouped as stored: two names that clean alike are one agent
        row = found.setdefault(name, {"agent": name, "n_steps": 0, "latency_ms": 0.0})
        row["n_steps"] += 1
        row["latency_ms"] += _num((s.span or {}).get("latency_ms")) or 0.0
    return list(found.values())


def search_text(traj: Trajectory) -> str:
    """Lower-cased text a trajectory is found by: goal, answer, model turns, calls, observations."""
    parts = [traj.goal or "", traj.final_answer or ""]
    for s in traj.steps:
        if s.role is not StepRole.USER:
            parts.append(s.content or "")
        for call in s.tool_calls:
            parts.append(canonical_json(call.to_dict()))
        parts.append(observation_text(s.observation))
        if s.parse_error:
            parts.append(s.parse_error)
    return clean("\n".join(p for p in parts if p).lower()[:SEARCH_TEXT_LIMIT])


def trajectory_fields(traj: Trajectory) -> dict:
    """The denormalised `trajectories` columns for a core Trajectory (ids not included; the
    search text is `search_text(traj)`, stored in `trajectory_texts`)."""
    m = traj.metrics or {}
    # A huge prompt or answer (an imported file is not bounded by max_new_tokens) is kept in part, as steps are.
    goal, goal_len = truncated(traj.goal or "")
    final, final_len = truncated(traj.final_answer)
    cut = {k: v for k, v in (("goal", goal_len), ("final_answer", final_len)) if v is not None}
    if cut:
        m = dict(m, truncated=cut)
    steps = traj.steps or []
    actor = [s for s in steps if s.role is StepRole.ACTOR]
    tool = [s for s in steps if s.role is StepRole.TOOL]

    def metric(key: str, fallback: Any, kind: type) -> Any:
        v = _num(m.get(key), kind)
        return fallback if v is None else v

    outcome = traj.outcome.value if isinstance(traj.outcome, Label) else str(traj.outcome or "unknown")
    return {
        "sample_id": str(traj.sample_id)[:300],
        "attempt": max(1, int(getattr(traj, "attempt", 1) or 1)),
        "goal": clean(goal),
        "final_answer": clean(final),
        "ground_truth": jsonable(traj.ground_truth),
        "outcome": outcome,
        "terminated": str(m.get("terminated") or "")[:32],
        "metrics": jsonable(m),
        "error": clean(m.get("error")) if m.get("error") is not None else None,
        "n_steps": len(steps),
        "n_turns": metric("n_turns", len(actor), int),
        "n_tool_calls": metric("n_tool_calls", sum(len(s.tool_calls) for s in actor), int),
        "n_parse_errors": metric("n_parse_errors", sum(1 for s in actor if s.parse_error), int),
        "latency_ms": metric("total_latency_ms", sum(_num(s.span.get("latency_ms")) or 0.0 for s in actor), float),
        "tool_latency_ms": metric(
            "total_tool_latency_ms", sum(_num(s.span.get("latency_ms")) or 0.0 for s in tool), float
        ),
        "prompt_tokens": metric(
            "total_prompt_tokens", sum(_num(s.span.get("prompt_tokens"), int) or 0 for s in actor), int
        ),
        "completion_tokens": metric(
            "total_completion_tokens",
            sum(_num(s.span.get("completion_tokens"), int) or 0 for s in actor),
            int,
        ),
        "roster": jsonable(traj.roster) if traj.roster else None,
    }


def trajectory_from_rows(row: Any, steps: Iterable[Any]) -> Trajectory:
    """Rebuild the core Trajectory from its row and step rows."""
    return Trajectory(
        sample_id=row.sample_id,
        goal=row.goal or "",
        steps=[step_from_row(s) for s in steps],
        final_answer=row.final_answer,
        ground_truth=row.ground_truth,
        outcome=Label(row.outcome) if row.outcome in Label._value2member_map_ else Label.UNKNOWN,
        metrics=dict(row.metrics or {}),
        attempt=int(getattr(row, "attempt", 1) or 1),
        roster=list(getattr(row, "roster", None) or []),
    )


# ---------------------------------------------------------------- arrays


def encode_array(array: Any) -> tuple[str, list, bytes]:
    """A numpy array as (dtype string, shape, little-endian C-order bytes)."""
    import numpy as np

    a = np.asarray(array)
    if a.dtype == object:
        raise TypeError("object arrays cannot be stored; convert to a numeric dtype")
    a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"), copy=False))
    return a.dtype.str, list(a.shape), a.tobytes()


def decode_array(dtype: str, shape: list, data: bytes) -> Any:
    import numpy as np

    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape).copy()

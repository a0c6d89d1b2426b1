"""tau-bench results: a JSON list of runs `{"task_id", "reward", "info": {"task": ...}, "traj", "trial"}`.

tau-bench writes one such list per experiment, and AgentRx publishes its human-labelled failures in the same
shape. `traj` is an OpenAI chat list (the system message holds the domain policy; `user` is the simulated
customer). Each run becomes a case and a trajectory: the task's gold actions become the case's reference
calls (`metadata.reference_calls`), its required outputs `meta["outputs"]`, `reward` 1 the pass grade; a
task seen again is its next attempt. Files re-serialised by Python (AgentRx's) write None as "None" and lists as their
repr; both are read back. Each step keeps its 1-based message index (`span["message"]`), as labels
given by message index need.
"""

from __future__ import annotations

import ast
from typing import Any, Iterator, Optional

from evalrx.interop.messages import as_dict, as_list
from evalrx.interop.openai_chat import from_openai_row
from evalrx.interop.records import Reading, Record
from evalrx.interop.registry import Format, register


def _none(value: Any) -> Any:
    """None, as a Python re-serialisation writes it ("None"), or an empty string: no value."""
    return None if value in (None, "None", "") else value


def _tool_calls(value: Any, where: str) -> Optional[list]:
    value = _none(value)
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)  # a Python repr of the message's list; literals only, nothing runs
        except (ValueError, SyntaxError):
            raise ValueError(f"{where}: `tool_calls` is neither a list nor a readable repr of one") from None
    if value is not None and not isinstance(value, list):
        raise ValueError(f"{where}: `tool_calls` must be a list")
    return value or None


def to_openai_row(run: dict) -> dict:
    """One tau-bench run as an OpenAI chat record (messages in order, none dropped)."""
    messages = []
    for i, m in enumerate(as_list(run.get("traj"))):
        if not isinstance(m, dict):
            raise ValueError(f"message {i + 1} of `traj` is not an object")
        out: dict = {"role": m.get("role"), "content": _none(m.get("content"))}
        calls = _tool_calls(m.get("tool_calls"), f"message {i + 1}")
        if calls:
            out["tool_calls"] = calls
        if m.get("role") == "tool":
            out["tool_call_id"] = m.get("tool_call_id")
            out["name"] = m.get("name")
        messages.append(out)
    task = as_dict(as_dict(run.get("info")).get("task"))
    refs = [
        {"name": a["name"], "arguments": as_dict(a.get("kwargs") or a.get("arguments"))}
        for a in as_list(task.get("actions"))
        if isinstance(a, dict) and isinstance(a.get("name"), str)
    ]
    meta: dict = {"reference_calls": refs}
    if task.get("outputs"):
        meta["outputs"] = task["outputs"]
    if task.get("instruction"):
        meta["user_instruction"] = task["instruction"]  # what the simulated user was told
    reward = run.get("reward")
    row: dict = {"id": str(run.get("task_id")), "messages": messages, "metadata": meta}
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        row["outcome"] = 1 if reward >= 1.0 else 0
    # `trial` is not read: files differ on what it counts; a task seen again is its next attempt, in file order.
    return row


def _is_tau(obj: dict, whole: bool) -> bool:
    return isinstance(obj.get("traj"), list) and "task_id" in obj and "messages" not in obj


def _read(obj: dict, where: Any, reading: Reading) -> Iterator[Record]:
    case, traj = from_openai_row(to_openai_row(obj), where if isinstance(where, int) else 1)
    traj.metrics["source"] = "tau-bench"
    traj.attempt = traj.attempt or reading.attempts.get(case.id, 0) + 1
    reading.attempts[case.id] = max(reading.attempts.get(case.id, 0), traj.attempt)
    yield Record(case=case, traj=traj, where=where)


register(
    Format(
        name="tau_bench",
        title="tau-bench results",
        sniff_rank=30,
        sniff_record=_is_tau,
        read_record=_read,
        listable=True,
    )
)

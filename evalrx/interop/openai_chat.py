"""OpenAI chat-messages JSONL: `{"messages": [...], "tools"?, "id"?, "expected"?, "outcome"?, "attempt"?}` a line."""

from __future__ import annotations

from typing import Any, Iterator

from evalrx.core.case import FailureCase, Inputs, Trajectory
from evalrx.interop.messages import message_pictures, messages_to_steps, outcome_of, trajectory_metrics
from evalrx.interop.records import Reading, Record, checked_attempt
from evalrx.interop.registry import Format, register


def from_openai_row(row: dict, line: int) -> tuple[FailureCase, Trajectory]:
    """One OpenAI chat-format record: `{"messages": [...], "tools"?, "id"?, "expected"?, "outcome"?,
    "attempt"? | "epoch"?}`; without either the attempt is 0 (the reader numbers repeats of an id)."""
    steps, system, final, goal = messages_to_steps(row.get("messages"), style="openai")
    sample_id = str(row.get("id") or row.get("sample_id") or f"line-{line}")
    expected = next((row[k] for k in ("expected", "ideal", "target", "ground_truth") if k in row), None)
    verdict = next((row[k] for k in ("outcome", "label", "score", "correct") if k in row), None)
    meta = dict(row.get("metadata") or {}) if isinstance(row.get("metadata"), dict) else {}
    if system is not None:
        meta["system"] = system
    if row.get("tools") is not None:
        meta["tools"] = row["tools"]
    attempt = next((row[k] for k in ("attempt", "epoch") if row.get(k) is not None), None)
    if attempt is not None:
        checked_attempt(attempt, "`attempt` / `epoch`")
    image, _ = message_pictures(row.get("messages"), steps)
    case = FailureCase(inputs=Inputs(prompt=goal, image=image), id=sample_id, expected=expected, meta=meta)
    from evalrx.suites import case_tools

    offered = [t.describe() for t in case_tools(case)]  # the function documents the transcript was made with
    traj = Trajectory(
        sample_id=sample_id,
        goal=goal,
        steps=steps,
        final_answer=final,
        ground_truth=expected,
        outcome=outcome_of(verdict),
        metrics=trajectory_metrics(steps, final, {"source": "openai"}),
        attempt=attempt or 0,
        offered_tools=offered,
    )
    return case, traj


def _is_openai(obj: dict, whole: bool) -> bool:
    return "messages" in obj


def step_pictures(row: dict, traj: Trajectory) -> dict:
    """`{step: [picture bytes]}` the pictures a row's messages hold beyond the case's (`message_pictures`)."""
    return message_pictures(row.get("messages"), traj.steps)[1]


def _read(obj: dict, where: Any, reading: Reading) -> Iterator[Record]:
    case, traj = from_openai_row(obj, where if isinstance(where, int) else 1)
    pictures = step_pictures(obj, traj)
    # A repeated id is the case's next attempt, numbered in the order the file holds them.
    traj.attempt = traj.attempt or reading.attempts.get(case.id, 0) + 1
    reading.attempts[case.id] = max(reading.attempts.get(case.id, 0), traj.attempt)
    yield Record(case=case, traj=traj, where=where, pictures=pictures)


register(Format(name="openai", title="OpenAI chat JSONL", sniff_rank=40, sniff_record=_is_openai, read_record=_read))

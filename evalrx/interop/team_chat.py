"""Logs of teams of agents talking in one chat: Who&When runs and Magentic-One message lists.

- Who&When (ICML 2025) writes a run as `{"question", "ground_truth", "is_correct", "history": [...],
  "mistake_agent", "mistake_step", "mistake_reason", "system_prompt"?}`. Its Algorithm-Generated subset
  (AutoGen teams) names the speaker of each message in `name` (`role` is AutoGen's "assistant" or "user");
  its Hand-Crafted subset (Magentic-One) puts the speaker in `role`, with the addressee where the log says
  it (`Orchestrator (-> WebSurfer)`), and calls the person `human`.
- AgentRx's Magentic-One logs are the bare message list, `[{"role", "content"}, ...]`, one run a file.

Every message is one step (a person's a user step, an agent's an actor step naming the agent and, where
given, whom it addressed), and keeps its 1-based position in the log (`span["message"]`), so labels given by
message index find their step. A run's labels (`mistake_agent`, `mistake_step` as a 0-based index into
`history`, `mistake_reason`) are stored as the people's label of their own annotator, "who&when".
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from evalrx.core.case import FailureCase, Inputs, Label, Step, StepRole, Trajectory, agent_name, roster_of
from evalrx.interop.messages import CHAT_ROLES, as_dict, message_text, outcome_of, trajectory_metrics
from evalrx.interop.records import Reading, Record
from evalrx.interop.registry import Format, register

WHOWHEN_ANNOTATOR = "who&when"
PERSON_ROLES = ("human", "user")  # a speaker that is the person, not an agent of the team


def speaker(role: str) -> "tuple[Optional[str], Optional[str], Optional[str]]":
    """(agent, addressee, aside) of a Magentic-One style role, the speaker then an aside in parentheses:
    `Orchestrator (-> WebSurfer)` gives ("Orchestrator", "WebSurfer", None); `Orchestrator (thought)` gives
    ("Orchestrator", None, "thought")."""
    text = role.strip()
    at = text.find("(")
    name = text[:at].strip() if at > 0 else ""
    if not name or not text.endswith(")"):
        return agent_name(role), None, None
    aside = text[at + 1 : -1].strip()
    if aside.startswith("->"):
        return agent_name(name), agent_name(aside[2:]), None
    return agent_name(name), None, aside or None


def team_steps(history: Any) -> "tuple[list, list]":
    """Steps and the roster (agents in order of first appearance) of a team's message list.

    Raises:
        ValueError: naming the message that is not `{role|name, content}`.
    """
    if not isinstance(history, list) or not history:
        raise ValueError("`history` must be a non-empty list of messages")
    steps: list = []
    seen: dict = {}
    turn = 0
    for i, msg in enumerate(history):
        if not isinstance(msg, dict):
            raise ValueError(f"message {i} is not an object")
        content = message_text(msg.get("content"))  # a team's message may be content parts, or any JSON
        role, name = msg.get("role"), msg.get("name")
        if name is not None and not isinstance(name, str):
            raise ValueError(f"message {i}: `name` must be text")
        if role is not None and not isinstance(role, str):
            raise ValueError(f"message {i}: `role` must be text")
        span: dict = {"message": i + 1}
        if isinstance(name, str) and name.strip():
            agent, addressee, aside = agent_name(name), None, None
            if role:
                span["chat_role"] = role  # the framework's own role (AutoGen: assistant or user)
        elif isinstance(role, str) and role.strip():
            if role.strip().lower() in PERSON_ROLES:
                steps.append(Step(idx=len(steps), role=StepRole.USER, content=content, span=span))
                continue
            agent, addressee, aside = speaker(role)
        else:
            raise ValueError(f"message {i} names no speaker (`name` or `role`)")
        if aside:
            span["aside"] = aside
        turn += 1
        span["turn"] = turn
        steps.append(
            Step(idx=len(steps), role=StepRole.ACTOR, content=content, span=span, agent=agent, addressee=addressee)
        )
        seen.setdefault(agent, None)
    return steps, [{"name": n} for n in seen if n]


def _step_of_message(steps: list, index: int) -> Optional[int]:
    """The step made from the 0-based message `index`, or None."""
    return next((s.idx for s in steps if s.span.get("message") == index + 1), None)


def _whowhen_label(obj: dict, steps: list) -> Optional[dict]:
    """The people's label of a Who&When run: the agent to blame, the decisive step and the reason."""
    if not any(k in obj for k in ("mistake_agent", "mistake_step", "mistake_reason")):
        return None
    raw = obj.get("mistake_step")
    step = None
    if raw not in (None, ""):
        try:
            index = int(str(raw).strip())
        except ValueError:
            raise ValueError(f"`mistake_step` must be a message index, not {raw!r}") from None
        step = _step_of_message(steps, index)
        if step is None:
            raise ValueError(f"`mistake_step` {index} is not a message of `history` (0..{len(steps) - 1})")
    agent = obj.get("mistake_agent")
    if agent is not None and not isinstance(agent, str):
        raise ValueError("`mistake_agent` must be text")
    reason = obj.get("mistake_reason")
    # a mistake annotated is a failure, unless the run says it was correct (as its trajectory's outcome reads it)
    outcome = outcome_of(obj["is_correct"]) if "is_correct" in obj else Label.UNKNOWN
    return {
        "outcome": (Label.PASS if outcome is Label.PASS else Label.FAIL).value,
        "first_wrong_step": step,
        "agent": agent_name(agent),
        "note": reason.strip() if isinstance(reason, str) and reason.strip() else None,
        "annotator": WHOWHEN_ANNOTATOR,
    }


def read_team_run(obj: dict, sample_id: str, where: Any) -> Record:
    """One Who&When run (or a bare message list wrapped as `{"history": [...]}`) as a record."""
    steps, roster = team_steps(obj.get("history"))
    prompts = as_dict(obj.get("system_prompt"))
    for member in roster:
        prompt = prompts.get(member["name"])
        if isinstance(prompt, str) and prompt.strip():
            member["system_prompt"] = prompt
    for name, prompt in prompts.items():  # agents given a prompt that never spoke are still on the team
        if isinstance(name, str) and name.strip() and all(m["name"] != name.strip() for m in roster):
            roster.append({"name": name, **({"system_prompt": prompt} if isinstance(prompt, str) else {})})
    question = obj.get("question")
    first_user = next((s.content for s in steps if s.role is StepRole.USER), None)
    goal = question if isinstance(question, str) and question.strip() else first_user or steps[0].content
    expected = obj.get("ground_truth")
    meta = {k: obj[k] for k in ("level", "question_ID") if obj.get(k) not in (None, "")}
    case = FailureCase(inputs=Inputs(prompt=goal), id=sample_id, expected=expected, meta=meta)
    metrics = trajectory_metrics(steps, None, {"source": "team chat"})
    metrics["terminated"] = ""  # a team's log does not say how the chat ended
    traj = Trajectory(
        sample_id=sample_id,
        goal=goal,
        steps=steps,
        ground_truth=expected,
        outcome=outcome_of(obj["is_correct"]) if "is_correct" in obj else Label.UNKNOWN,
        metrics=metrics,
        roster=roster_of(roster),
    )
    label = _whowhen_label(obj, steps)
    return Record(case=case, traj=traj, where=where, labels=[label] if label else [])


def _is_team_run(obj: dict, whole: bool) -> bool:
    history = obj.get("history")
    return (
        isinstance(history, list)
        and bool(history)
        and isinstance(history[0], dict)
        and "content" in history[0]
        and ("role" in history[0] or "name" in history[0])
        and "messages" not in obj
        and "steps" not in obj
    )


def _read(obj: dict, where: Any, reading: Reading) -> Iterator[Record]:
    sample_id = str(obj.get("question_ID") or obj.get("id") or (reading.path.stem if where == 1 else f"line-{where}"))
    record = read_team_run(obj, sample_id, where)
    # The same question in several runs of one file is the case's next attempt, in file order.
    record.traj.attempt = reading.attempts.get(sample_id, 0) + 1
    reading.attempts[sample_id] = record.traj.attempt
    yield record


def is_team_messages(doc: list) -> bool:
    """Whether a whole-file JSON list is one team's messages (`[{"role", "content"}, ...]`) naming an agent."""
    if not doc or not all(isinstance(m, dict) and "content" in m and isinstance(m.get("role"), str) for m in doc):
        return False
    # a chat of only the known chat roles is a plain conversation, not a team's log
    return any(m["role"].strip().lower() not in CHAT_ROLES for m in doc)


def _read_list(doc: list, reading: Reading) -> Iterator[Record]:
    yield read_team_run({"history": doc}, reading.path.stem, 1)


register(
    Format(
        name="team_chat",
        title="multi-agent chat log (Who&When, Magentic-One)",
        sniff_rank=35,
        sniff_record=_is_team_run,
        read_record=_read,
        sniff_list=is_team_messages,
        read_list=_read_list,
    )
)

"""Cases the agent is run on and the trajectories it produces."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

from evalrx.core.observation import Observation
from evalrx.core.tool import ToolCall


class Label(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"
    ERROR = "error"  # the harness or the model server failed: not a verdict on the model


class Termination(str, Enum):
    """Why a trajectory ended: the values of `Trajectory.terminated` (`metrics["terminated"]`).

    An imported Inspect sample stopped by one of its limits ends as `Termination.limit(kind)`
    ("limit:<kind>"); an empty string means a source that did not say.
    """

    FINAL = "final"  # the model gave its final answer
    MAX_TURNS = "max_turns"  # the turns ran out before a final answer
    FORCED_FINAL = "forced_final"  # the turns ran out and the model was asked once more, without tools
    CALLS = "calls"  # a case graded by its calls ended at the model's first turn that made any (not run)
    ERROR = "error"  # the model server or the harness failed (the trajectory's outcome is Label.ERROR)
    INCOMPLETE = "incomplete"  # an imported transcript that ends without a final answer
    HANDOFF = "handoff"  # the agent handed the conversation to a person (a transfer call ended it)

    @staticmethod
    def limit(kind: object) -> str:
        """The `terminated` of a run stopped by a limit of its source (e.g. "limit:token")."""
        return f"{LIMIT_PREFIX}{kind}"


LIMIT_PREFIX = "limit:"


class StepRole(str, Enum):
    USER = "user"
    ACTOR = "actor"  # a model turn
    TOOL = "tool"  # a tool observation


@dataclass
class Inputs:
    """What the agent is given: a prompt and, for VLM cases, an image (path, PIL image or bytes)."""

    prompt: str
    image: Any = None


@dataclass
class FailureCase:
    """One case of a suite: its inputs, the expected answer and how to grade it."""

    inputs: Inputs
    id: str = ""
    expected: Any = None
    grader: Optional[dict] = None  # e.g. {"kind": "numeric", "tol": 0.01}
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.id:
            digest = hashlib.sha1(self.inputs.prompt.encode("utf-8")).hexdigest()[:12]
            self.id = f"case-{digest}"

    @classmethod
    def from_prompt(cls, prompt: str, **kw: Any) -> "FailureCase":
        return cls(inputs=Inputs(prompt=prompt), **kw)

    @classmethod
    def from_dict(cls, d: dict) -> "FailureCase":
        """A case as the store hands it back (`{"id", "prompt", "expected", "grader", "meta"}`), without its image."""
        return cls(
            inputs=Inputs(prompt=d.get("prompt") or ""),
            id=d.get("id") or "",
            expected=d.get("expected"),
            grader=d.get("grader"),
            meta=d.get("meta") or {},
        )


@dataclass
class Step:
    """One step of a trajectory.

    ACTOR steps carry the model's raw text, its decoded `tool_calls` (`ToolCall`s; their dicts, as
    `to_dict` writes them, are accepted and converted) and a `parse_error` when a call was malformed. TOOL steps
    carry the tool name in `content` and what it returned in `observation` (an `Observation`; its value, as
    `to_dict` writes it, is accepted and wrapped; None when the step recorded nothing).
    `span` holds timing, token counts and loop-policy flags. In a team of agents `agent` names
    who took the step ("Orchestrator", "WebSurfer") and `addressee` whom it spoke to, where the
    log says it; both are None in a single-agent run.
    """

    idx: int
    role: StepRole
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    observation: Optional[Observation] = None
    parse_error: Optional[str] = None
    span: dict = field(default_factory=dict)
    agent: Optional[str] = None
    addressee: Optional[str] = None

    def __post_init__(self) -> None:
        self.tool_calls = [c if isinstance(c, ToolCall) else ToolCall.from_dict(c) for c in self.tool_calls or []]
        if self.observation is not None and not isinstance(self.observation, Observation):
            self.observation = Observation(self.observation)
        if self.observation is not None and self.observation.value is None:
            self.observation = None  # recorded nothing: as a stored step reads back

    @property
    def tool_call(self) -> Optional[ToolCall]:
        """The first call of the turn (most turns make exactly one)."""
        return self.tool_calls[0] if self.tool_calls else None

    def span_int(self, key: str, default: int = 0) -> int:
        """A whole-number span entry (`call`, `n_images`, token counts), `default` when it is missing or not a
        whole number: an imported span may hold anything under any key."""
        value = (self.span or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                return default
        return default

    def to_dict(self) -> dict:
        out = {
            "idx": self.idx,
            "role": self.role.value,
            "content": self.content,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "observation": None if self.observation is None else self.observation.value,
            "parse_error": self.parse_error,
            "span": self.span,
        }
        # Only a team's steps carry these keys, so a single-agent run exports as it always did.
        if self.agent is not None:
            out["agent"] = self.agent
        if self.addressee is not None:
            out["addressee"] = self.addressee
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Step":
        return cls(
            idx=int(d["idx"]),
            role=StepRole(d["role"]),
            content=d.get("content") or "",
            tool_calls=list(d.get("tool_calls") or []),
            observation=d.get("observation"),
            parse_error=d.get("parse_error"),
            span=dict(d.get("span") or {}),
            agent=agent_name(d.get("agent")),
            addressee=agent_name(d.get("addressee")),
        )


AGENT_NAME_LIMIT = 200  # characters of an agent's name kept (the store's column width)


def agent_name(value: Any) -> Optional[str]:
    """An agent's name as steps, rosters and labels keep it: stripped text, None for none."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"an agent's name must be text, not {type(value).__name__}")
    return value.strip()[:AGENT_NAME_LIMIT] or None


def roster_of(entries: Any) -> list:
    """A team's roster as a trajectory keeps it: `[{"name", "description"?, "system_prompt"?}]`, each name once."""
    out: list = []
    seen: set = set()
    for i, entry in enumerate(entries or []):
        if not isinstance(entry, dict):
            raise ValueError(f"roster entry {i} is not an object")
        name = agent_name(entry.get("name"))
        if name is None:
            raise ValueError(f"roster entry {i} has no name")
        if name in seen:
            continue
        seen.add(name)
        member = {"name": name}
        for key in ("description", "system_prompt"):
            if isinstance(entry.get(key), str) and entry[key].strip():
                member[key] = entry[key]
        out.append(member)
    return out


@dataclass
class Trajectory:
    """A whole agent run on one case. `offered_tools` are the tools it was offered (`Tool.describe()` dicts);
    `roster` the team's agents (`roster_of`) when a team ran it, empty for one agent."""

    sample_id: str
    goal: str
    steps: list[Step] = field(default_factory=list)
    final_answer: Optional[str] = None
    ground_truth: Any = None
    outcome: Label = Label.UNKNOWN
    metrics: dict = field(default_factory=dict)
    attempt: int = 1  # which of a run's repeated attempts at this case (1..repeats)
    offered_tools: list = field(default_factory=list)
    roster: list = field(default_factory=list)

    @property
    def terminated(self) -> str:
        return str(self.metrics.get("terminated", ""))

    @property
    def agents(self) -> list:
        """The team's agents by name: the roster's, then any other that took a step, in order of appearance."""
        names = {m["name"]: None for m in self.roster if isinstance(m, dict) and m.get("name")}
        for s in self.steps:
            if s.agent is not None:
                names.setdefault(s.agent, None)
        return list(names)

    def to_dict(self) -> dict:
        return {
            "sample_id": self.sample_id,
            "goal": self.goal,
            "steps": [s.to_dict() for s in self.steps],
            "final_answer": self.final_answer,
            "ground_truth": self.ground_truth,
            "outcome": self.outcome.value,
            "metrics": self.metrics,
            "attempt": self.attempt,
            "offered_tools": self.offered_tools,
            **({"roster": self.roster} if self.roster else {}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Trajectory":
        return cls(
            sample_id=d["sample_id"],
            goal=d.get("goal") or "",
            steps=[Step.from_dict(s) for s in d.get("steps") or []],
            final_answer=d.get("final_answer"),
            ground_truth=d.get("ground_truth"),
            outcome=Label(d.get("outcome") or "unknown"),
            metrics=dict(d.get("metrics") or {}),
            attempt=int(d.get("attempt") or 1),
            offered_tools=[t for t in d.get("offered_tools") or [] if isinstance(t, dict)],
            roster=roster_of(d.get("roster")),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, default=str)

"""The failure vocabulary: one set of kinds for the diagnosis, the labels, the queue, the store and exports.

A kind is a key and a one-line definition. The built-in kinds below are the only ones the
diagnosis proposes; users add their own in the store's taxonomy (`evalrx.store.taxonomy`).
Older releases used other keys; `canonical_kind` maps them to these.

A `Diagnosis` says why a trajectory failed: the kind, the first wrong step, the evidence, a
confidence and the source that produced it (`reference` > `heuristic` / `whitebox` > `judge`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class FailureKind:
    """A failure kind: its key (what is stored) and a one-line definition (what the app shows as help)."""

    key: str
    definition: str


BUILTIN_KINDS: "tuple[FailureKind, ...]" = (
    FailureKind("wrong_tool", "called a tool other than the one the task needed"),
    FailureKind("unknown_tool", "called a tool that does not exist"),
    FailureKind("bad_arguments", "called the right tool with wrong or missing arguments"),
    FailureKind("misread_observation", "copied a value from a tool's output wrongly into a call or the answer"),
    FailureKind("malformed_call", "wrote a tool call that could not be parsed"),
    FailureKind("ignored_observation", "answered against what the last relevant tool output said"),
    FailureKind("ignored_tool_error", "went on as if a call had succeeded after the tool reported an error"),
    FailureKind("repeated_calls", "made the same call again without making progress"),
    FailureKind("no_tool_call", "answered without calling a tool the task needed"),
    FailureKind("unneeded_tool_call", "called a tool the task did not need"),
    FailureKind("no_final_answer", "stopped, or ran out of turns, without a final answer"),
    FailureKind("wrong_final_answer", "used the tools well but gave a wrong final answer"),
    FailureKind(
        "infra_error", "the model server or the harness failed (HTTP 5xx, timeout, crash): not a model failure"
    ),
    FailureKind(
        "policy_violation",
        "acted against a rule the system prompt or policy states (e.g. acted without a confirmation it requires)",
    ),
    FailureKind("invented_information", "stated a fact that no tool, user or document gave"),
    FailureKind("wrong_goal", "pursued another objective than the one the user asked for"),
    FailureKind("task_not_supported", "the request cannot be done with the tools at hand"),
    FailureKind(
        "user_error", "the user's message was wrong, missing or changed: not the agent's failure (like infra_error)"
    ),
)
# Kinds that are not the agent's failure: counted apart from the model's failures.
NOT_AGENT_KINDS: "frozenset[str]" = frozenset({"infra_error", "user_error"})
FAILURE_KINDS: "tuple[str, ...]" = tuple(k.key for k in BUILTIN_KINDS)
DEFINITIONS: "dict[str, str]" = {k.key: k.definition for k in BUILTIN_KINDS}

# Keys of earlier vocabularies (heuristic findings, the old label taxonomy, the demo benchmark) -> kinds.
LEGACY_KINDS: "dict[str, str]" = {
    "repeated_identical_calls": "repeated_calls",
    "repeated_call": "repeated_calls",
    "looping": "repeated_calls",
    "observation_ignored": "ignored_observation",
    "tool_error": "ignored_tool_error",
    "hallucinated_tool": "unknown_tool",
    "malformed_tool_call": "malformed_call",
    "ran_out_of_turns": "no_final_answer",
    "out_of_turns": "no_final_answer",
    "no_answer": "no_final_answer",
    "run_error": "infra_error",
    "error": "infra_error",
    "wrong_arguments": "bad_arguments",
    "wrong_answer": "wrong_final_answer",
    "missing_call": "no_tool_call",
}

# The label form's number keys for a new store (the kinds reviewers pick most); users rebind them.
DEFAULT_HOTKEYS: "dict[str, str]" = {
    "bad_arguments": "1",
    "misread_observation": "2",
    "wrong_tool": "3",
    "no_tool_call": "4",
    "ignored_observation": "5",
    "malformed_call": "6",
    "repeated_calls": "7",
    "no_final_answer": "8",
    "wrong_final_answer": "9",
}

# Where a diagnosis came from, strongest first.
SOURCES: "tuple[str, ...]" = ("reference", "heuristic", "whitebox", "judge")


def canonical_kind(key: Optional[str]) -> Optional[str]:
    """The current key for `key` (an old key is mapped; a custom or current key is returned as is)."""
    if key is None:
        return None
    key = str(key).strip()
    return LEGACY_KINDS.get(key, key) or None


def definition(key: str) -> str:
    """A built-in kind's one-line definition ("" for a custom kind)."""
    return DEFINITIONS.get(canonical_kind(key) or "", "")


@dataclass
class Diagnosis:
    """Why a trajectory failed, as one source sees it.

    Attributes:
        kind: a failure kind key (None: nothing wrong was found, e.g. a passing trajectory).
        first_wrong_step: the index of the step where it first went wrong (None when unknown).
        evidence: what shows it: `text` (one line) and, where there is one, `expected` / `actual`
            calls and their argument `diff`, or the `answer` and the `observation` it contradicts.
        confidence: 0..1, how sure the source is.
        source: one of `SOURCES`.
        agent: in a team of agents, the agent it blames (None: one agent, or none named).
    """

    kind: Optional[str]
    first_wrong_step: Optional[int] = None
    evidence: dict = field(default_factory=dict)
    confidence: float = 0.0
    source: str = "heuristic"
    agent: Optional[str] = None

    @property
    def summary(self) -> str:
        """The evidence's one line."""
        return str(self.evidence.get("text") or "")

    def to_dict(self) -> dict:
        out = {
            "kind": self.kind,
            "first_wrong_step": self.first_wrong_step,
            "evidence": dict(self.evidence),
            "confidence": round(float(self.confidence), 4),
            "source": self.source,
        }
        if self.agent is not None:  # a team's: a single agent's diagnosis exports as it always did
            out["agent"] = self.agent
        return out

    @classmethod
    def from_dict(cls, d: Any) -> "Diagnosis":
        """Rebuild from `to_dict` output (an exported file's `diagnosis`); bad fields raise ValueError."""
        if not isinstance(d, dict):
            raise ValueError(f"a diagnosis must be an object, got {type(d).__name__}")
        step = d.get("first_wrong_step")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise ValueError(f"diagnosis first_wrong_step must be a step index, got {step!r}")
        evidence = d.get("evidence") or {}
        if isinstance(evidence, str):
            evidence = {"text": evidence}
        if not isinstance(evidence, dict):
            raise ValueError("diagnosis evidence must be an object or a string")
        source = str(d.get("source") or "heuristic")
        if source not in SOURCES:
            raise ValueError(f"diagnosis source {source!r} is not one of {', '.join(SOURCES)}")
        try:
            confidence = float(d.get("confidence") or 0.0)
        except (TypeError, ValueError):
            raise ValueError(f"diagnosis confidence must be a number, got {d.get('confidence')!r}") from None
        agent = d.get("agent")
        if agent is not None and not isinstance(agent, str):
            raise ValueError(f"diagnosis agent must be an agent's name, got {agent!r}")
        return cls(
            kind=canonical_kind(d.get("kind")),
            first_wrong_step=step,
            evidence=evidence,
            confidence=min(1.0, max(0.0, confidence)),
            source=source,
            agent=(agent or "").strip() or None,
        )


__all__ = [
    "BUILTIN_KINDS",
    "DEFAULT_HOTKEYS",
    "DEFINITIONS",
    "Diagnosis",
    "FAILURE_KINDS",
    "FailureKind",
    "LEGACY_KINDS",
    "NOT_AGENT_KINDS",
    "SOURCES",
    "canonical_kind",
    "definition",
]

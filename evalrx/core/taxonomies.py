"""Other projects' failure categories, mapped to our kinds in one table.

Human labels come from elsewhere with their own vocabulary: AgentRx (Microsoft, tau-bench and
Magentic-One ground truth), TRAIL (Patronus AI, GAIA and SWE-bench traces) and MAST (Berkeley,
multi-agent traces). `TAXONOMY_KINDS` maps each category, as its authors spell it, to one of
`FAILURE_KINDS`, or to None where no kind of ours means the same thing: such a category is kept
as a custom kind named after it (`custom_kind_key`), never forced into a near miss.

    map_category("Misinterpretation of Tool Output")          # "misread_observation"
    map_category("Guardrails Triggered", source="agentrx")    # "guardrails_triggered" (custom)
"""

from __future__ import annotations

import re
from typing import Optional

from evalrx.core.failures import FAILURE_KINDS, canonical_kind

AGENTRX, TRAIL, MAST = "agentrx", "trail", "mast"
TAXONOMIES: "tuple[str, ...]" = (AGENTRX, TRAIL, MAST)

# (source, category as spelled by its authors) -> our kind, or None: kept as a custom kind of its own name.
TAXONOMY_KINDS: "dict[tuple[str, str], Optional[str]]" = {
    # AgentRx (arXiv 2602.02475): the categories of its ground-truth files.
    (AGENTRX, "Instruction Adherence Failure"): "policy_violation",
    (AGENTRX, "Invention of New Information"): "invented_information",
    # The call reached the tool and was refused for its arguments (schema, state the tool checks): the
    # arguments were wrong, the call was not unparseable (malformed_call) nor to a missing tool.
    (AGENTRX, "Invalid Invocation"): "bad_arguments",
    (AGENTRX, "Misinterpretation of Tool Output"): "misread_observation",
    (AGENTRX, "Intent Plan Misalignment"): "wrong_goal",
    (AGENTRX, "Underspecified User Intent"): "user_error",
    (AGENTRX, "Intent Not Supported"): "task_not_supported",
    (AGENTRX, "System Failure"): "infra_error",
    (AGENTRX, "Guardrails Triggered"): None,  # a safety filter stopped the agent: neither its error nor infra
    (AGENTRX, "Inconclusive"): None,
    # TRAIL (arXiv 2505.08638): the leaves of its error tree.
    (TRAIL, "Language-only"): "invented_information",  # a text-only hallucination
    (TRAIL, "Tool-related"): "invented_information",  # a fabricated tool output or capability
    (TRAIL, "Poor Information Retrieval"): None,
    (TRAIL, "Tool Output Misinterpretation"): "misread_observation",
    (TRAIL, "Incorrect Problem Identification"): "wrong_goal",
    (TRAIL, "Tool Selection Errors"): "wrong_tool",
    (TRAIL, "Formatting Errors"): "malformed_call",  # mostly code/calls the harness could not run as written
    (TRAIL, "Instruction Non-compliance"): "policy_violation",
    (TRAIL, "Tool Definition Issues"): "infra_error",  # the harness defined the tool wrongly
    (TRAIL, "Environment Setup Errors"): "infra_error",
    (TRAIL, "Rate Limiting"): "infra_error",
    (TRAIL, "Authentication Errors"): "infra_error",
    (TRAIL, "Service Errors"): "infra_error",
    (TRAIL, "Resource Not Found"): None,  # a 404 is as often the agent's wrong URL as the service's fault
    (TRAIL, "Resource Exhaustion"): "infra_error",
    (TRAIL, "Timeout Issues"): "infra_error",
    (TRAIL, "Context Handling Failures"): None,
    (TRAIL, "Resource Abuse"): "repeated_calls",  # a tool called again and again
    (TRAIL, "Goal Deviation"): "wrong_goal",
    (TRAIL, "Task Orchestration"): None,
    # MAST (arXiv 2503.13657): its 14 failure modes.
    (MAST, "Disobey Task Specification"): "policy_violation",
    (MAST, "Disobey Role Specification"): "policy_violation",
    (MAST, "Step Repetition"): "repeated_calls",
    (MAST, "Loss of Conversation History"): None,
    (MAST, "Unaware of Termination Conditions"): None,
    (MAST, "Conversation Reset"): None,
    (MAST, "Fail to Ask for Clarification"): None,
    (MAST, "Task Derailment"): "wrong_goal",
    (MAST, "Information Withholding"): None,
    (MAST, "Ignored Other Agent's Input"): None,  # another agent's message, not a tool's output
    (MAST, "Reasoning-Action Mismatch"): None,
    (MAST, "Premature Termination"): None,  # may end with an answer: not no_final_answer
    (MAST, "No or Incomplete Verification"): None,
    (MAST, "Incorrect Verification"): None,
}

_KEY = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")
MAX_KEY = 60  # the store's longest kind key


def normalize(name: str) -> str:
    """A category name compared case-, space- and punctuation-insensitively ("Reasoning-Action  mismatch")."""
    text = re.sub(r"['\u2019]", "", str(name).casefold())  # "Agent's" reads as "agents", not "agent s"
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text).split())


_BY_NAME: "dict[tuple[str, str], tuple[str, Optional[str]]]" = {
    (source, normalize(name)): (name, kind) for (source, name), kind in TAXONOMY_KINDS.items()
}


def custom_kind_key(name: str) -> str:
    """The custom kind key for a category we have no kind for: its name in snake_case."""
    key = normalize(name).replace(" ", "_")[:MAX_KEY].strip("_")
    if not key:
        raise ValueError(f"{name!r} cannot name a failure kind: it has no letter or digit")
    return key


def map_category(name: str, source: Optional[str] = None) -> str:
    """Our kind key for a failure category: one of ours (old keys mapped), a mapped category of `source`
    (any source when None), or a custom kind key made from the name.

    Raises:
        ValueError: an unknown `source`, or a name with no letter or digit.
    """
    if source is not None and source.casefold() not in TAXONOMIES:
        raise ValueError(f"unknown taxonomy {source!r}; known: {', '.join(TAXONOMIES)}")
    raw = str(name).strip()
    own = canonical_kind(raw.lower().replace(" ", "_")) or ""
    if own in FAILURE_KINDS:
        return own
    norm = normalize(raw)
    for src in (source.casefold(),) if source else TAXONOMIES:
        hit = _BY_NAME.get((src, norm))
        if hit is not None:
            return hit[1] or custom_kind_key(hit[0])
    if _KEY.match(raw) and len(raw) <= MAX_KEY:  # already a key (a custom kind exported from a store): kept
        return raw
    return custom_kind_key(raw)


__all__ = ["AGENTRX", "MAST", "TAXONOMIES", "TAXONOMY_KINDS", "TRAIL", "custom_kind_key", "map_category", "normalize"]

"""Plain types shared by every part of evalrx (no third-party imports)."""

from evalrx.core.capability import Capability, CapabilityError
from evalrx.core.case import (
    FailureCase,
    Inputs,
    Label,
    Step,
    StepRole,
    Termination,
    Trajectory,
    agent_name,
    roster_of,
)
from evalrx.core.effects import EFFECT_FIELD, READ, WRITE, ToolEffect, is_handoff, tool_documents, tool_effect
from evalrx.core.failures import (
    BUILTIN_KINDS,
    FAILURE_KINDS,
    NOT_AGENT_KINDS,
    Diagnosis,
    FailureKind,
    canonical_kind,
)
from evalrx.core.lines import first_line, one_line
from evalrx.core.model import ContextOverflow, Model
from evalrx.core.observation import PICTURE_MARKER, Observation, canonical_json, observation_text, picture_count
from evalrx.core.scores import ENTROPY_SCORE, LENS_SETTLE_SCORE, MARGIN_SCORE, OBS_ATTENTION_SCORE, SCORES_OF
from evalrx.core.taxonomies import TAXONOMY_KINDS, map_category
from evalrx.core.tool import ChatTurn, Tool, ToolCall, ToolResult
from evalrx.core.words import counted

__all__ = [
    "counted",
    "first_line",
    "one_line",
    "EFFECT_FIELD",
    "READ",
    "WRITE",
    "ToolEffect",
    "is_handoff",
    "tool_documents",
    "tool_effect",
    "ENTROPY_SCORE",
    "LENS_SETTLE_SCORE",
    "MARGIN_SCORE",
    "OBS_ATTENTION_SCORE",
    "SCORES_OF",
    "BUILTIN_KINDS",
    "FAILURE_KINDS",
    "NOT_AGENT_KINDS",
    "Diagnosis",
    "FailureKind",
    "canonical_kind",
    "map_category",
    "TAXONOMY_KINDS",
    "Capability",
    "CapabilityError",
    "ChatTurn",
    "ContextOverflow",
    "FailureCase",
    "Inputs",
    "Label",
    "Model",
    "PICTURE_MARKER",
    "Observation",
    "canonical_json",
    "observation_text",
    "picture_count",
    "Step",
    "StepRole",
    "Termination",
    "agent_name",
    "roster_of",
    "Tool",
    "ToolCall",
    "ToolResult",
    "Trajectory",
]

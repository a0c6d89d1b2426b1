"""What a model handle can do, and the error raised when it cannot."""

from __future__ import annotations

from enum import Enum
from typing import Iterable


class Capability(str, Enum):
    """A feature a backend provides for a spec (negotiated before weights load)."""

    GENERATE = "generate"
    TOOL_CALLS = "tool_calls"
    LOGPROBS = "logprobs"
    LOGITS = "logits"
    HIDDEN_STATES = "hidden_states"
    ATTENTION = "attention"
    VISION = "vision"

    @classmethod
    def parse(cls, value: "str | Capability") -> "Capability":
        """Accept a member or its name/value in any case; name the valid ones otherwise."""
        if isinstance(value, Capability):
            return value
        key = str(value).strip().lower()
        for cap in cls:
            if key in (cap.value, cap.name.lower()):
                return cap
        raise ValueError(f"Unknown capability {value!r}. Known: {', '.join(c.value for c in cls)}.")

    @classmethod
    def parse_all(cls, values: Iterable["str | Capability"]) -> frozenset["Capability"]:
        return frozenset(cls.parse(v) for v in values)


class CapabilityError(RuntimeError):
    """Raised when a caller needs capabilities that a model/backend does not provide."""

    def __init__(self, analyzer: str, model: str, missing: Iterable[Capability], hint: str = "") -> None:
        self.analyzer = analyzer
        self.model = model
        self.missing = frozenset(missing)
        names = ", ".join(sorted(c.value for c in self.missing))
        msg = f"{analyzer} needs [{names}], which {model} does not provide."
        if hint:
            msg += f" {hint}"
        super().__init__(msg)

"""What a reader yields: one trajectory with its case, and what the whole file's reading found."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from evalrx.core.case import FailureCase, Trajectory
from evalrx.interop.limits import ImportLimits


def checked_attempt(value: Any, what: str = "`attempt`") -> int:
    """A file's attempt (or epoch) number: a whole number from 1.

    Raises:
        ValueError: anything else (a bool, text, a fraction, 0 or less), naming `what`.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a whole number from 1, not {value!r}")
    return value


@dataclass
class Record:
    """One trajectory read from a file, with where it was (a line number or a name) for error messages."""

    case: FailureCase
    traj: Trajectory
    where: Any
    labels: list = field(default_factory=list)
    tags: list = field(default_factory=list)
    run_name: Optional[str] = None
    run_config: Optional[dict] = None
    run_meta: Optional[dict] = None
    diagnoses: Optional[list] = None  # None: diagnose on import (model-free rules)
    pictures: dict = field(default_factory=dict)  # step idx -> the picture bytes its tool returned


@dataclass
class Reading:
    """One file being read: its path and limits, the formats seen, notes for the user, and per-file state."""

    path: Path
    limits: ImportLimits
    kinds: set = field(default_factory=set)
    notes: list = field(default_factory=list)
    attempts: dict = field(default_factory=dict)  # case id -> attempts numbered so far (formats without attempts)
    buffers: dict = field(default_factory=dict)  # a format's records held until the file ends (a trace's spans)

    @property
    def format(self) -> str:
        return "+".join(sorted(self.kinds))

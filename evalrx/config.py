"""What a model and a run are, as plain data (no heavy imports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class ModelConfig:
    """Which model to load and how (see `evalrx.load_model`)."""

    name: str
    backend: str = "hf_local"
    want: tuple = ()
    checkpoint: Optional[str] = None
    device: Optional[str] = None
    dtype: Optional[str] = None


@dataclass
class RunConfig:
    """A run: a model, the tools it may call, the cases and the loop policies."""

    model: ModelConfig
    tools: list = field(default_factory=list)
    suite: Optional[str] = None
    case_file: Optional[str] = None
    max_turns: int = 6
    system: Optional[str] = None
    block_repeat_calls: bool = False
    force_final_answer: bool = False
    concurrency: int = 4
    analyzers: list = field(default_factory=list)
    base_url: Optional[str] = None  # the API key is never part of a run config

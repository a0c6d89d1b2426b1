"""What a model and a run are, as plain data (no heavy imports)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
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


# Whole-number settings of a run and their ranges (inclusive), checked by `RunConfig.validate`.
_WHOLE_NUMBERS = (("max_turns", 1, 100), ("concurrency", 1, 64), ("repeats", 1, 100), ("seed", 0, 2**31 - 1))


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
    runtime: dict = field(default_factory=dict)  # RuntimeConfig settings: max_new_tokens, timeout, max_retries, ...
    chat_kwargs: dict = field(default_factory=dict)  # extra arguments of every model call
    repeats: int = 1  # attempts per case (pass@k needs k <= repeats); sample with runtime temperature > 0
    seed: int = 0  # local models: each attempt's sampling seed derives from it (see `attempt_seed`)
    # MCP servers whose tools the agent is offered (`McpServer.to_dict()`: secrets only as `${VAR}` names).
    mcp_servers: list = field(default_factory=list)

    def attempt_seed(self, sample_id: str, attempt: int) -> int:
        """The sampling seed of one attempt at one case: the same run config reproduces the same attempts."""
        import zlib

        return zlib.crc32(f"{self.seed}:{sample_id}:{attempt}".encode())

    def agent_kwargs(self) -> dict:
        """What `Agent` (and `evalrx.models.agent.run_case`) takes from this run."""
        return {
            "max_turns": self.max_turns,
            "system": self.system,
            "block_repeat_calls": self.block_repeat_calls,
            "force_final_answer": self.force_final_answer,
            "chat_kwargs": dict(self.chat_kwargs) or None,
        }

    def to_dict(self) -> dict:
        """The run as plain JSON-able data (what the store keeps, less anything secret)."""
        return asdict(self)

    def validate(self) -> "RunConfig":
        """Check what the config alone can say (a model named, loop numbers in range); returns itself.

        The names it refers to (spec, backend, tools, analyzers) are checked where their registries
        are, by `evalrx.runner.enqueue_run`.

        Raises:
            ValueError: one line naming the setting and what it must be.
        """
        if not self.model.name:
            raise ValueError("the run config names no model (model.name)")
        for key, low, high in _WHOLE_NUMBERS:
            value = getattr(self, key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
            ):
                raise ValueError(f"{key} must be a whole number from {low} to {high}, got {value!r}")
        return self

    @classmethod
    def from_dict(cls, data: dict) -> "RunConfig":
        """Rebuild from `to_dict` output (a stored run's config); keys it does not know are ignored.

        Nothing is checked here (`validate` does): a config without a model name gets the name "".
        """
        data = dict(data or {})
        model = data.get("model")
        model = dict(model) if isinstance(model, dict) else {}
        model_cfg = ModelConfig(**{"name": "", **{k: v for k, v in model.items() if k in MODEL_CONFIG_FIELDS}})
        model_cfg.want = tuple(model_cfg.want or ())
        known = RUN_CONFIG_FIELDS - {"model"}
        run = cls(model=model_cfg, **{k: v for k, v in data.items() if k in known and v is not None})
        run.tools, run.analyzers = list(run.tools or []), list(run.analyzers or [])
        run.mcp_servers = [dict(s) for s in run.mcp_servers or [] if isinstance(s, dict)]
        run.runtime, run.chat_kwargs = dict(run.runtime or {}), dict(run.chat_kwargs or {})
        return run


# What a run config holds, by name: the store keeps only these keys of a queued run (`evalrx.store.runs`).
RUN_CONFIG_FIELDS = frozenset(f.name for f in fields(RunConfig))
MODEL_CONFIG_FIELDS = frozenset(f.name for f in fields(ModelConfig))

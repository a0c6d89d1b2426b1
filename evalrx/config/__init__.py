"""What a model and a run are, as plain data (no heavy imports): the one shape of a run from the New run
form and `evalrx run` through the store to the worker (`RunConfig`, with its `RuntimeConfig`, analyzer
entries and MCP servers typed)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Optional

from evalrx.config.mcp import McpServer
from evalrx.core.analyzer_entry import AnalyzerEntry

# The backend a model runs on when none is named.
DEFAULT_BACKEND = "hf_local"
# The shape `RunConfig.to_dict` writes; a stored config without a version is version 1 (same keys, no version).
CONFIG_VERSION = 2


@dataclass
class ModelConfig:
    """Which model to load and how (see `evalrx.load_model`); no backend named is `DEFAULT_BACKEND`."""

    name: str
    backend: str = DEFAULT_BACKEND
    want: tuple = ()
    checkpoint: Optional[str] = None
    device: Optional[str] = None
    dtype: Optional[str] = None

    def __post_init__(self) -> None:
        self.backend = self.backend or DEFAULT_BACKEND
        self.want = tuple(self.want or ())


@dataclass
class RuntimeConfig:
    """How to run a model: device and dtype locally, URL and key for APIs, decoding limits."""

    device: Optional[str] = None
    dtype: Optional[str] = None
    max_new_tokens: int = 256
    temperature: float = 0.0
    base_url: Optional[str] = None
    api_key: Optional[str] = field(default=None, repr=False)  # never printed, never stored
    timeout: float = 60.0  # api: seconds for one model call, every try, wait and byte included
    max_retries: int = 3  # api: tries after the first, while that budget lasts
    attn_implementation: Optional[str] = None
    trust_remote_code: bool = False
    # hf_local: keep the last conversation's KV cache and prefill only what a new prompt adds to it
    # (a conversation's next turn, a suite's shared system prompt). Greedy text can differ from a
    # cold prefill only where two tokens tie within float rounding; False prefills every prompt whole.
    prefix_cache: bool = True
    extra: dict = field(default_factory=dict)

    def resolved_base_url(self) -> Optional[str]:
        return self.base_url or os.environ.get("OPENAI_BASE_URL")

    def resolved_api_key(self) -> Optional[str]:
        return self.api_key or os.environ.get("OPENAI_API_KEY")

    def to_dict(self) -> dict:
        """The settings that differ from the defaults, never the API key (what a run stores and a load takes)."""
        default = RuntimeConfig()
        return {
            k: getattr(self, k)
            for k in sorted(RUNTIME_SETTINGS, key=_FIELD_ORDER.index)
            if getattr(self, k) != getattr(default, k)
        }

    def updated(self, settings: "dict | None", *, strict: bool = True) -> "RuntimeConfig":
        """A copy with `settings` (RuntimeConfig field names) applied.

        Raises:
            ValueError: with `strict`, naming a setting that is not a field (a stored row's are ignored).
        """
        settings = dict(settings or {})
        unknown = sorted(k for k in settings if k not in _FIELD_ORDER)
        if unknown and strict:
            raise ValueError(f"unknown runtime setting(s) {unknown}; known: {', '.join(sorted(RUNTIME_SETTINGS))}")
        import dataclasses

        return dataclasses.replace(self, **{k: v for k, v in settings.items() if k in _FIELD_ORDER})

    @classmethod
    def from_dict(cls, data: "dict | None", *, strict: bool = True) -> "RuntimeConfig":
        """Rebuild from `to_dict` output or a settings dict (see `updated`)."""
        return cls().updated(data, strict=strict)


_FIELD_ORDER = [f.name for f in fields(RuntimeConfig)]
# The runtime settings a run stores: every RuntimeConfig field but the key.
RUNTIME_SETTINGS = frozenset(_FIELD_ORDER) - {"api_key"}


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
    analyzers: list[AnalyzerEntry] = field(default_factory=list)
    base_url: Optional[str] = None  # the API key is never part of a run config
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)  # max_new_tokens, timeout, max_retries, ...
    chat_kwargs: dict = field(default_factory=dict)  # extra arguments of every model call
    repeats: int = 1  # attempts per case (pass@k needs k <= repeats); sample with runtime temperature > 0
    seed: int = 0  # local models: each attempt's sampling seed derives from it (see `attempt_seed`)
    # MCP servers whose tools the agent is offered (secrets only as `${VAR}` names).
    mcp_servers: list[McpServer] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Parsed once, here: a name or a dict given for an entry, a dict for the runtime (one line when bad).
        self.tools = list(self.tools or [])
        self.analyzers = [AnalyzerEntry.parse(e) for e in self.analyzers or []]
        self.mcp_servers = [s if isinstance(s, McpServer) else McpServer.from_dict(s) for s in self.mcp_servers or []]
        if not isinstance(self.runtime, RuntimeConfig):
            self.runtime = RuntimeConfig.from_dict(self.runtime)
        self.chat_kwargs = dict(self.chat_kwargs or {})

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
        """The run as plain JSON-able data, versioned (what the store keeps: never the API key)."""
        out: dict = {"version": CONFIG_VERSION}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "model":
                value = {m.name: getattr(value, m.name) for m in fields(value)}
            elif f.name == "runtime":
                value = value.to_dict()
            elif f.name in ("analyzers", "mcp_servers"):
                value = [v.to_dict() for v in value]
            elif isinstance(value, (list, dict)):
                value = type(value)(value)
            out[f.name] = value
        return out

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
    def from_dict(cls, data: "dict | None", *, strict: bool = False) -> "RunConfig":
        """Rebuild from `to_dict` output: a stored run's config, of this version or an older one.

        Keys it does not know are ignored, and so are an imported config's entries that do not parse
        (its analyzers, MCP servers, runtime settings); with `strict` (a run that is to be run: queued,
        or given to `enqueue_run`) such an entry is an error instead, never a server or analysis quietly
        left out. Nothing else is checked here (`validate` does): a config without a model name gets "".

        Raises:
            ValueError: a config written by a newer evalrx (its version is above `CONFIG_VERSION`); with
                `strict`, an analyzer or MCP server entry that does not parse, or an unknown runtime setting.
        """
        data = dict(data or {})
        version = data.pop("version", 1)  # rows stored before the version was written are version 1
        # A version that is not a number is an imported config's own key, not ours.
        if isinstance(version, int) and version > CONFIG_VERSION:
            raise ValueError(
                f"run config version {version!r} is newer than this evalrx reads ({CONFIG_VERSION}); upgrade evalrx"
            )
        model = data.get("model")
        model = dict(model) if isinstance(model, dict) else {}
        model_cfg = ModelConfig(**{"name": "", **{k: v for k, v in model.items() if k in MODEL_CONFIG_FIELDS}})
        known = RUN_CONFIG_FIELDS - {"model", "analyzers", "mcp_servers", "runtime"}
        run = cls(model=model_cfg, **{k: v for k, v in data.items() if k in known and v is not None})
        run.analyzers = _parsed(AnalyzerEntry.parse, data.get("analyzers"), "analyzer", strict)
        run.mcp_servers = _parsed(McpServer.from_dict, data.get("mcp_servers"), "MCP server", strict)
        runtime = data.get("runtime")
        run.runtime = RuntimeConfig.from_dict(runtime if isinstance(runtime, dict) else None, strict=strict)
        return run


def comparable_config(data: "dict | None") -> dict:
    """A stored run config as two runs' configs are compared: without its version, and with every runtime
    setting it left at the default written out (a row stores only the settings that differ, an older row
    whatever it was given), so two runs that ran the same way compare equal."""
    out = {k: v for k, v in (data or {}).items() if k != "version"}
    runtime = out.get("runtime")
    if isinstance(runtime, dict) or runtime is None:
        default = RuntimeConfig()
        out["runtime"] = {k: getattr(default, k) for k in sorted(RUNTIME_SETTINGS)} | dict(runtime or {})
    return out


def _parsed(parse: Any, entries: Any, what: str, strict: bool) -> list:
    """The entries of a stored list that parse (an imported run's config may hold anything); with `strict`,
    one that does not is a one-line error."""
    out = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        try:
            out.append(parse(entry))
        except (ValueError, TypeError, AttributeError) as exc:
            if strict:  # the entry by its place, not its text: an MCP server's may hold an environment
                raise ValueError(f"the run config's {what} entry {i + 1} does not parse: {exc}") from None
            continue
    return out


# What a run config holds, by name: the store keeps only these keys of a queued run (`evalrx.store.runs`),
# and the version `to_dict` writes.
RUN_CONFIG_FIELDS = frozenset(f.name for f in fields(RunConfig)) | {"version"}
MODEL_CONFIG_FIELDS = frozenset(f.name for f in fields(ModelConfig))

__all__ = [
    "CONFIG_VERSION",
    "DEFAULT_BACKEND",
    "MODEL_CONFIG_FIELDS",
    "RUNTIME_SETTINGS",
    "RUN_CONFIG_FIELDS",
    "AnalyzerEntry",
    "McpServer",
    "ModelConfig",
    "RunConfig",
    "RuntimeConfig",
    "comparable_config",
]

"""evalrx: find out why tool-calling agents fail.

`import evalrx` stays light: torch, transformers and openai load only inside the
backends that need them.
"""

from evalrx.core import (
    Capability,
    CapabilityError,
    ChatTurn,
    FailureCase,
    Inputs,
    Label,
    Step,
    StepRole,
    Termination,
    Tool,
    ToolCall,
    ToolResult,
    Trajectory,
)
from evalrx.models import (
    Agent,
    RuntimeConfig,
    codec_for,
    compose,
    load,
    load_model,
    resolve_spec_key,
    run_batch,
    wrap,
)
from evalrx.specs import ModelSpec, get_spec, register_spec

__version__ = "0.2.0"

__all__ = [
    "Agent",
    "Capability",
    "CapabilityError",
    "ChatTurn",
    "FailureCase",
    "Inputs",
    "Label",
    "ModelSpec",
    "RuntimeConfig",
    "Step",
    "StepRole",
    "Termination",
    "Tool",
    "ToolCall",
    "ToolResult",
    "Trajectory",
    "codec_for",
    "compose",
    "get_spec",
    "load",
    "load_model",
    "register_spec",
    "resolve_spec_key",
    "run_batch",
    "wrap",
]

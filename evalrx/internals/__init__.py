"""Model internals: the mechanism white-box analysis runs on a live transformers model.

Separate from the wrappers (`evalrx.models`: backends, handles, the agent loop) and from what
reads the numbers (`evalrx.analyzers`), as nnsight and TransformerLens separate them. This
package is their one way in to the hooks below; they import only `evalrx.core`, `evalrx.config` and
`evalrx.specs` of evalrx, and torch and transformers only inside functions, so importing it stays light.
`evalrx.internals.passes` (the analyzers' passes over a trajectory) stands above `evalrx.models`, which
imports this package: it is never imported here.

* `discover`: decoder layers, final norm, unembedding and each layer's attention module, found
  in the live module tree (`discover`, `ModelParts`, `attention_module`).
* `hidden_states`: every layer's residual stream, recorded for a block (`recording_hidden_states`).
* `forward`: the one teacher-forced pass (`teacher_forced_forward`, `ForwardOutput`).
* `attention`: the attention implementation (`attention_implementation_of`, switched only by
  `set_attention_implementation` / `using_attention_implementation`), the registered last-row
  kernel, `attention_modules`, and rows rebuilt from a KV cache (`rebuilt_attention_rows`).
* `capture`: what a generate call keeps of its own passes (`GenerationCapture`, `CaptureRecorder`).
"""

from __future__ import annotations

from evalrx.internals.attention import (
    LAST_ROW_ATTENTION,
    attention_implementation_of,
    attention_modules,
    cached_keys,
    rebuilt_attention_rows,
    register_last_row_attention,
    rows_rebuildable,
    set_attention_implementation,
    using_attention_implementation,
)
from evalrx.internals.capture import (
    CAPTURE_KINDS,
    CaptureRecorder,
    GenerationCapture,
    RebuiltAttention,
    capture_kinds,
)
from evalrx.internals.discover import (
    DiscoveryError,
    ModelParts,
    attention_module,
    discover,
    find_decoder_layers,
    get_final_norm,
    get_unembed,
    resolve,
)
from evalrx.internals.forward import (
    ForwardOutput,
    cache_argument,
    output_cache,
    takes_argument,
    teacher_forced_forward,
)
from evalrx.internals.hidden_states import recording_hidden_states

__all__ = [
    "CAPTURE_KINDS",
    "CaptureRecorder",
    "DiscoveryError",
    "ForwardOutput",
    "GenerationCapture",
    "LAST_ROW_ATTENTION",
    "ModelParts",
    "RebuiltAttention",
    "attention_implementation_of",
    "attention_module",
    "attention_modules",
    "cache_argument",
    "cached_keys",
    "capture_kinds",
    "discover",
    "find_decoder_layers",
    "get_final_norm",
    "get_unembed",
    "output_cache",
    "rebuilt_attention_rows",
    "recording_hidden_states",
    "register_last_row_attention",
    "resolve",
    "rows_rebuildable",
    "set_attention_implementation",
    "takes_argument",
    "teacher_forced_forward",
    "using_attention_implementation",
]

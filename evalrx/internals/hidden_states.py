"""Hidden-state recording: every residual stream `output_hidden_states` would give, without its module hooks.

torch is never imported here: the recording only wraps the modules' `forward` for a block.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


@contextlib.contextmanager
def recording_hidden_states(parts: Any) -> Iterator[list]:
    """Within the block, keep every hidden state `output_hidden_states` would give, one entry per forward.

    Yields `L + 1` lists: each decoder layer's input (the embeddings, then each layer's output), then
    the final norm's output. The modules' `forward` are wrapped for the block only: transformers' own
    collection installs module hooks that stay on the model for good and put every later forward,
    recording or not, on torch's slower hooked call path (+3.5% on a plain demo-model run).
    """

    def keep_input(forward: Any, kept: list) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            kept.append(args[0] if args else kwargs["hidden_states"])
            return forward(*args, **kwargs)

        return wrapped

    def keep_output(forward: Any, kept: list) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = forward(*args, **kwargs)
            kept.append(out)
            return out

        return wrapped

    modules = list(parts.layers) + [parts.final_norm]
    states: list = [[] for _ in modules]
    wrapped: list = []
    try:
        for i, module in enumerate(modules):
            wrap = keep_output if i == len(modules) - 1 else keep_input
            wrapped.append((module, module.__dict__.get("forward")))  # an accelerate hook's own forward stays
            module.forward = wrap(module.forward, states[i])
        yield states
    finally:
        for module, own in wrapped:
            if own is None:
                del module.forward
            else:
                module.forward = own


__all__ = ["recording_hidden_states"]

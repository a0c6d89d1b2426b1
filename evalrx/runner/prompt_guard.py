"""The prompt guard: a case whose prompt is too large for the run is refused before any model call.

The worker records such a case as an error trajectory (`PromptTooLarge`'s message says why) and
goes on with the job.
"""

from __future__ import annotations

from typing import Any

from evalrx.core.case import FailureCase

DEFAULT_PROMPT_BYTES = 1_000_000  # a longer prompt is an error trajectory, before any model call


class PromptTooLarge(ValueError):
    """A case's prompt is over the byte limit or the local model's context: it is not sent."""


def check_prompt(handle: Any, case: FailureCase, max_bytes: int) -> None:
    """Refuse a prompt over `max_bytes`, or longer than a local model's context window, with the reason."""
    prompt = case.inputs.prompt or ""
    size = len(prompt.encode("utf-8"))
    if size > max_bytes:
        raise PromptTooLarge(
            f"the prompt is {size:,} bytes, over the limit of {max_bytes:,} "
            "(evalrx worker --max-prompt-bytes); it was not sent to the model"
        )
    tokenizer = getattr(handle, "tokenizer", None)
    context = getattr(getattr(getattr(handle, "model", None), "config", None), "max_position_embeddings", None)
    if tokenizer is not None and isinstance(context, int) and size >= context:  # only long prompts pay for this
        n = len(tokenizer(prompt)["input_ids"])
        if n >= context:
            raise PromptTooLarge(
                f"the prompt is {n:,} tokens; the model's context is {context:,}; it was not sent to the model"
            )


__all__ = ["DEFAULT_PROMPT_BYTES", "PromptTooLarge", "check_prompt"]

"""The logit lens' precisions: how its unembedding of every layer is computed, by name, and the check of a name.

Below both the lens analyzer (`logit_lens`, `tool_decision`) and the forward that applies it (`_compute`).
"""

from __future__ import annotations

from typing import Any

# Per precision, the torch dtype of the lens' unembedding product: "exact" (None: the model's own dtype) or a
# named cheaper setting.
LENS_DTYPES = {"exact": None, "bfloat16": "bfloat16"}
PRECISIONS = tuple(LENS_DTYPES)


def checked_precision(value: Any) -> str:
    """A lens precision's name ("exact" when None), checked against `PRECISIONS`.

    Raises:
        ValueError: another name (the message lists the known ones).
    """
    name = str(value or "exact").strip().lower()
    if name not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return name


__all__ = ["LENS_DTYPES", "PRECISIONS", "checked_precision"]

"""What the api backend must never show: URL userinfo and the API key."""

from __future__ import annotations

from typing import Optional

from evalrx.core.secrets import redact_url

# A local server (vLLM, `evalrx serve`) needs no key, but the SDK refuses to start without one.
PLACEHOLDER_KEY = "EMPTY"


def scrub(text: str, secret: Optional[str]) -> str:
    """`text` with every occurrence of a real key (not the placeholder, at least 4 characters) as `***`."""
    if secret and secret != PLACEHOLDER_KEY and len(secret) >= 4:
        text = text.replace(secret, "***")
    return text


__all__ = ["PLACEHOLDER_KEY", "redact_url", "scrub"]

"""What the api backend must never show: URL userinfo and the API key."""

from __future__ import annotations

import re
from typing import Optional

# A local server (vLLM, `evalrx serve`) needs no key, but the SDK refuses to start without one.
PLACEHOLDER_KEY = "EMPTY"


def redact_url(url: Optional[str]) -> str:
    """A URL fit for messages: any `user:password@` part is replaced by `***@`."""
    if not url:
        return ""
    return re.sub(r"(^[a-zA-Z][\w+.-]*://)[^/@]*@", r"\1***@", url)


def scrub(text: str, secret: Optional[str]) -> str:
    """`text` with every occurrence of a real key (not the placeholder, at least 4 characters) as `***`."""
    if secret and secret != PLACEHOLDER_KEY and len(secret) >= 4:
        text = text.replace(secret, "***")
    return text


__all__ = ["PLACEHOLDER_KEY", "redact_url", "scrub"]

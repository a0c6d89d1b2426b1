"""What counts as a secret in a config, in one place: the store drops such values, MCP server configs
refuse them written literally (`${VAR}` names an environment variable instead, read where it is used)."""

from __future__ import annotations

import re
from typing import Any

# A key is secret when one of its words is one of these (`api_key`, `hf_token`, `Authorization`, `headers`),
# but not `max_new_tokens`.
SECRET_WORDS = frozenset(
    {
        "key",
        "apikey",
        "secret",
        "password",
        "passwd",
        "token",
        "authorization",
        "auth",
        "header",
        "headers",
        "cookie",
        "credential",
        "credentials",
        "bearer",
    }
)
# The name of an environment variable (where a key is held): a flag or form that takes one takes nothing else.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
# `${VAR}`, and Cursor's `${env:VAR}`: the name of an environment variable, not its value.
ENV_REFERENCE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")
# A URL's scheme, then everything up to its last `@` before the query or fragment.
_USERINFO = re.compile(r"(^[a-zA-Z][\w+.-]*://)[^?#]*@")


def is_env_name(text: Any) -> bool:
    """True for the name of an environment variable (letters, digits and _), never a key's value."""
    return isinstance(text, str) and bool(ENV_NAME.fullmatch(text))


def is_secret_name(name: Any) -> bool:
    """True for a key whose value is a secret (`OPENAI_API_KEY`, `Authorization`), by its words."""
    return bool(SECRET_WORDS & set(re.split(r"[^a-z0-9]+", str(name).lower())))


def redact_url(url: Any) -> str:
    """A URL fit for messages: its `user:password@` part, if any, replaced by `***@`.

    The part ends at the last `@` before any `?` or `#`: a password with an unescaped `@` or `/`
    (`u:p@ss@host`) is hidden whole, where a parser's first-`@` rule would show its tail as the host.
    A path holding an `@` is hidden too: more hidden, nothing shown.
    """
    if not url:
        return ""
    return _USERINFO.sub(r"\1***@", str(url))


def has_env_reference(value: Any) -> bool:
    """True for a value that takes its secret from the environment (`"${TOKEN}"`, `"Bearer ${TOKEN}"`)."""
    return isinstance(value, str) and bool(ENV_REFERENCE.search(value))


__all__ = ["ENV_REFERENCE", "SECRET_WORDS", "has_env_reference", "is_secret_name", "redact_url"]

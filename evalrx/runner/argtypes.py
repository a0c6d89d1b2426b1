"""The argparse types of evalrx's command lines (`evalrx run`, `evalrx worker`): one set, one set of ranges.

Each one turns bad input into argparse's one-line error that says the accepted range, never a
traceback.
"""

from __future__ import annotations

import argparse
from typing import Callable, Optional

from evalrx.models.backends.api_http import MAX_RETRIES, MAX_TIMEOUT_S, check_call_budget

# Worker intervals (--poll, --heartbeat, --stale-after): 0 or less would spin a core.
MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 86400.0
MAX_TEMPERATURE = 5.0


def whole(low: int, high: Optional[int] = None) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` (to `high`, when there is one), else one line saying the range."""

    def parse(text: str) -> int:
        try:
            value: Optional[int] = int(text)
        except ValueError:
            value = None
        if high is None:
            if value is None:
                raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
            if value < low:
                raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
            return value
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high}, not {text!r}")
        return value

    return parse


positive_int = whole(1)  # ids and counts with no upper limit (--run, --max-jobs, --max-prompt-bytes)
retries = whole(0, MAX_RETRIES)  # `--retries`: tries after the first (the api backend's range)


def interval_seconds(text: str) -> float:
    """Seconds between a worker's polls or heartbeats: from 0.01 to 86400 (NaN fails too)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"must be between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g} seconds, got {text}"
        )
    return value


def call_timeout(text: str) -> float:
    """`--timeout`: the budget of one model call, seconds in (0, 3600] (`check_call_budget`'s range)."""
    try:
        return check_call_budget(text, 0)[0]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be seconds > 0 and <= {MAX_TIMEOUT_S:g}, not {text!r}") from None


def temperature(text: str) -> float:
    """`--temperature`: a sampling temperature from 0 to 5."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= MAX_TEMPERATURE:
        raise argparse.ArgumentTypeError(f"{text!r} is not a temperature from 0 to {MAX_TEMPERATURE:g}")
    return value


def env_var_name(text: str) -> str:
    """`--api-key-env`: the NAME of an environment variable. The value is never echoed: a key pasted here by
    mistake must not reach a terminal, a log or a shell history again."""
    from evalrx.core.secrets import is_env_name

    if not is_env_name(text):
        raise argparse.ArgumentTypeError(
            "takes the NAME of an environment variable (letters, digits and _), not a key: "
            "export the key in a variable and pass its name"
        )
    return text


def analyzer_names(text: str) -> list:
    """`--analyzers`: comma-separated names of the analyzer registry (`evalrx.analyzers.ANALYZERS`), each
    optionally with settings as `name:key=value[:key=value]` (e.g. `logit_lens:precision=bfloat16`),
    which become `{"name": ..., key: value}` entries; a value that reads as a whole number is one."""
    from evalrx.analyzers import ANALYZERS

    entries: list = []
    unknown = []
    for item in (n.strip() for n in text.split(",")):
        if not item:
            continue
        name, *settings = [part.strip() for part in item.split(":")]
        if name not in ANALYZERS:
            unknown.append(name)
            continue
        kwargs = {}
        for setting in settings:
            key, eq, value = setting.partition("=")
            if not eq or not key.strip() or not value.strip():
                raise argparse.ArgumentTypeError(f"{item}: a setting is key=value, got {setting!r}")
            value = value.strip()
            kwargs[key.strip()] = int(value) if value.lstrip("-").isdigit() else value
        entries.append({"name": name, **kwargs} if kwargs else name)
    if not entries or unknown:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) or repr(text)}: not an analyzer; known: {', '.join(sorted(ANALYZERS))}"
        )
    return entries


__all__ = [
    "analyzer_names",
    "call_timeout",
    "env_var_name",
    "interval_seconds",
    "positive_int",
    "retries",
    "temperature",
    "whole",
]

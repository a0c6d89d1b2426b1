"""PLACEHOLDER - being written (Agent loop)."""
from __future__ import annotations
class ToolExecutor:  # noqa
    pass
class Agent:  # noqa
    pass
def run_batch(*a, **k):  # noqa
    raise NotImplementedError

"""What a handler reads of the worker that runs it (`evalrx.runner.worker.Worker` is one)."""

from __future__ import annotations

import threading
from typing import Optional, Protocol

from evalrx.store import Store


class WorkerContext(Protocol):
    store: Store
    worker_id: str
    stop_event: threading.Event  # set: stop after the current piece of work, handing the job back
    run_key: Optional[str]  # a pinned run's own API key
    max_case_attempts: int
    max_prompt_bytes: int

    def lost(self) -> bool:
        """Whether the heartbeat found the current job taken from this worker."""
        ...

"""The runner: queue runs on the store and execute them in worker processes.

    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import enqueue_run

    run_id = enqueue_run(RunConfig(model=ModelConfig("evalrx-tiny"), tools=["calculator", "lookup"],
                                   suite="demo/arithmetic_easy"))
    # then, in another process: `evalrx worker` (or `evalrx.runner.worker_main([])`)

`evalrx.runner.offline` runs a suite straight to a JSONL file without a store.
Importing this package imports no model code.
"""

from evalrx.runner.analysis import AnalysisRecord, CaseContext, register_hook
from evalrx.runner.enqueue import cancel_run, enqueue_run, retry_run
from evalrx.runner.spawn import ensure_worker
from evalrx.runner.worker import Worker, worker_main


__all__ = [
    "AnalysisRecord",
    "CaseContext",
    "Worker",
    "cancel_run",
    "enqueue_run",
    "ensure_worker",
    "register_hook",
    "retry_run",
    "worker_main",
]

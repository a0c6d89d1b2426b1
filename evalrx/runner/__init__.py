"""The runner: queue runs on the store and execute them in worker processes.

    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import enqueue_run

    run_id = enqueue_run(RunConfig(model=ModelConfig("evalrx-tiny"), tools=["calculator", "lookup"],
                                   suite="demo/arithmetic_easy"))
    # then, in another process: `evalrx worker` (or `evalrx.runner.worker_main([])`)

`evalrx.runner.offline` runs a suite straight to a JSONL file without a store.
Importing this package imports no model code.
"""

from typing import Any

from evalrx._lazy import lazy_attribute

# Loaded on first use, so `evalrx.runner.offline` and the CLI's command table stay light.
_EXPORTS = {
    "AnalysisRecord": "evalrx.runner.analysis",
    "CaseContext": "evalrx.runner.analysis",
    "register_hook": "evalrx.runner.analysis",
    "cancel_run": "evalrx.runner.enqueue",
    "enqueue_run": "evalrx.runner.enqueue",
    "retry_run": "evalrx.runner.enqueue",
    "ensure_worker": "evalrx.runner.spawn",
    "start_keyed_worker": "evalrx.runner.keyed_worker",
    "run_tools": "evalrx.runner.toolset",
    "tool_list": "evalrx.runner.toolset",
    "rediagnose": "evalrx.runner.diagnose",
    "JUDGE_BUDGET": "evalrx.runner.judge_jobs",
    "JudgeConfig": "evalrx.runner.judge_jobs",
    "JudgeEstimate": "evalrx.runner.judge_jobs",
    "estimate_judge": "evalrx.runner.judge_jobs",
    "judge_list_targets": "evalrx.runner.judge_jobs",
    "queue_judge": "evalrx.runner.judge_jobs",
    "run_concurrency": "evalrx.runner.judge_jobs",
    "Worker": "evalrx.runner.worker",
    "worker_main": "evalrx.runner.worker",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _EXPORTS, name)


__all__ = sorted(_EXPORTS)

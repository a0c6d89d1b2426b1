"""Rows and figures for the Runs page (pure Python over RunInfo / RunStats)."""

from __future__ import annotations

from typing import Any, Optional

from evalrx.store import ACTIVE_STATUSES, JobStatus


def is_active(run: Any) -> bool:
    return run.status in ACTIVE_STATUSES


def success_rate(run: Any) -> Optional[float]:
    graded = run.n_pass + run.n_fail
    return run.n_pass / graded if graded else None


def run_row(run: Any, stats: Any = None) -> dict:
    """One row of the runs table; `stats` (a RunStats) adds latency and tokens."""
    sr = success_rate(run)
    row = {
        "id": run.id,
        "name": run.name or f"run {run.id}",
        "status": run.status + (" (cancelling)" if run.cancel_requested and is_active(run) else ""),
        "model": run.spec_key or "",
        "backend": run.backend or "",
        "progress": run.progress,
        "done": f"{run.n_done}/{run.n_cases}",
        "pass": run.n_pass,
        "fail": run.n_fail,
        "error": run.n_error,
        "success": None if sr is None else round(100 * sr, 1),
        "p50 ms": None,
        "p95 ms": None,
        "tokens": None,
        "created": run.created_at.strftime("%Y-%m-%d %H:%M"),
    }
    if stats is not None:
        row["p50 ms"] = measured(stats.latency_p50_ms, 1)
        row["p95 ms"] = measured(stats.latency_p95_ms, 1)
        row["tokens"] = measured(stats.prompt_tokens + stats.completion_tokens)
    return row


def measured(value: Optional[float], digits: Optional[int] = None) -> Optional[float]:
    """A run's time or token figure, None where nothing was measured: the store keeps 0 then (an imported log
    without timings or token counts), which the pages show as "—", not "0 ms"."""
    if not value:
        return None
    return round(value, digits) if digits is not None else value


def run_suite(run: Any) -> Optional[str]:
    """The suite a run ran (its config's), None for an import."""
    return (run.config or {}).get("suite") or None


def run_title(run: Any) -> str:
    """A run as a picker shows it (plain text): id, name, model, suite and date."""
    bits = [str(run.id), run.name or "", run.spec_key or "", run_suite(run) or "", f"{run.created_at:%Y-%m-%d}"]
    return " · ".join(b for b in bits if b)


def baseline_run(run: Any, runs: list) -> Optional[int]:
    """The run to compare `run` with: the newest older run of its suite (of no suite, for an import), or None."""
    suite = run_suite(run)
    return next((o.id for o in runs if o.id < run.id and run_suite(o) == suite), None)


def progress_text(run: Any) -> str:
    """Plain text under a live progress bar."""
    bits = [f"{run.n_done}/{run.n_cases} cases", f"{run.n_pass} pass", f"{run.n_fail} fail"]
    if run.n_error:
        bits.append(f"{run.n_error} error")
    if run.status == JobStatus.QUEUED:
        bits.append("waiting for a worker")
    if run.cancel_requested:
        bits.append("cancel requested: stops after the current case")
    return " · ".join(bits)

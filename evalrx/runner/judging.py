"""A judge model over stored trajectories: `evalrx diagnose RUN --judge SPEC`.

Each trajectory's verdict is looked up by the digest of what the judge would be asked
(`evalrx.diagnosis.judge.verdict_key`: the prompt, the judge and the strategy) before the model is called, so
judging again costs nothing. A checked
verdict becomes the trajectory's `judge` candidate beside the other sources' (replacing an earlier judge's);
a refused answer is cached with its one-line reason and leaves the stored diagnoses as they are; a failed call
(server down, deadline, rate limit past the budget) is neither stored nor cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from evalrx.core.case import Label
from evalrx.core.failures import Diagnosis
from evalrx.core.model import Model
from evalrx.runner.diagnose import JUDGE, stored_case
from evalrx.store import (
    JudgeVerdict,
    Store,
    cached_verdict,
    get_trajectory,
    list_kinds,
    matching_ids,
    resolve,
    save_verdict,
    update_diagnoses,
)


@dataclass
class Judged:
    """One trajectory's outcome: its checked diagnosis or the refusal, and where it came from."""

    trajectory_id: int
    sample_id: str
    diagnosis: Optional[Diagnosis] = None
    refusal: Optional[str] = None
    cached: bool = False
    failed: bool = False  # the call failed: nothing stored
    answer: str = ""  # what the judge wrote (untrusted): read a refusal by it

    def line(self) -> str:
        """One inert line: the kind and step, or why there is none."""
        head = f"trajectory {self.trajectory_id} ({inert(self.sample_id, 60)}): "
        d = self.diagnosis
        if d is not None:
            what = f"{d.kind} at step {d.first_wrong_step}" if d.kind else "nothing went wrong"
        else:
            what = ("failed: " if self.failed else "refused: ") + inert(self.refusal or "", 240)
        return head + what + (" (cached)" if self.cached else "")


def judge_targets(
    run_id: Optional[int] = None,
    *,
    trajectory_ids: Optional[Sequence[int]] = None,
    include_passing: bool = False,
    limit: Optional[int] = None,
    store: "Store | str | None" = None,
) -> "list[int]":
    """The trajectories a judge reads: the failed ones of a run (or the chosen ones), with the passing ones too
    when `include_passing` (to count false alarms); never errored ones (the server failed, not the agent)."""
    outcomes = [Label.FAIL.value, Label.UNKNOWN.value] + [Label.PASS.value] * include_passing
    ids = matching_ids(run_id=run_id, outcome=outcomes, store=store)
    if trajectory_ids is not None:
        chosen = set(trajectory_ids)
        ids = [i for i in ids if i in chosen]
    return ids[:limit] if limit is not None else ids


def judge_trajectories(
    trajectory_ids: Sequence[int],
    model: Model,
    *,
    server: Optional[str] = None,
    with_findings: bool = False,
    store: "Store | str | None" = None,
    on_result: Optional[Callable[[Judged], None]] = None,
    max_new_tokens: Optional[int] = None,
    max_steps: Optional[int] = None,
    max_step_chars: Optional[int] = None,
    strategy: Optional[str] = None,
) -> "list[Judged]":
    """Judge each trajectory with `model` (from the cache where it was asked the same before) and store
    each checked verdict as its `judge` candidate.

    Args:
        trajectory_ids: the trajectories (`judge_targets`).
        model: the judge, any `Model` handle.
        server: the judge's server URL, redacted: recorded with each verdict.
        with_findings: show the judge what the other sources found (the prompt variant `with_findings`).
        store: the store (default when None).
        on_result: called after each trajectory (a progress bar, a line).
        max_new_tokens, max_steps, max_step_chars: the answer's token limit and how much of each trajectory
            the prompt shows (`evalrx.diagnosis.judge` defaults when None): smaller for a small local judge.
        strategy: how the judge reads each log (`evalrx.diagnosis.judge.STRATEGIES`; None: `all_at_once`, the
            whole log at once). A verdict of one strategy is cached apart from another's.

    Raises:
        ValueError: an unknown strategy (before any model is asked).
    """
    from evalrx.diagnosis import DIAGNOSIS_VERSION, combine
    from evalrx.diagnosis.judge import (
        DEFAULT_STRATEGY,
        MAX_ANSWER_TOKENS,
        MAX_STEP_CHARS,
        MAX_STEPS,
        STRATEGIES,
        build_prompt,
        judge,
        verdict_key,
    )

    strategy = strategy or DEFAULT_STRATEGY
    if strategy not in STRATEGIES:
        raise ValueError(f"the judge's strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")

    shown = {"max_steps": max_steps or MAX_STEPS, "max_step_chars": max_step_chars or MAX_STEP_CHARS}

    st = resolve(store)
    kinds = [(k.key, k.definition) for k in list_kinds(store=st)]  # built-in and this store's own kinds
    # The cache's judge is its spec and backend: a server's port changes between runs of one judge.
    judge_id = {"spec": model.spec.key, "backend": model.backend}
    json_schema: Optional[bool] = None
    out: "list[Judged]" = []
    for tid in trajectory_ids:
        detail = get_trajectory(tid, store=st)
        if detail is None:
            continue
        traj, case = detail.trajectory, stored_case(detail.case)
        findings = [d for d in detail.diagnoses if d.source != JUDGE] if with_findings else None
        key = verdict_key(traj, build_prompt(traj, case, kinds, findings=findings, **shown), judge_id, strategy)
        hit = cached_verdict(key, store=st)
        if hit is not None:
            done = Judged(tid, traj.sample_id, hit.diagnosis, hit.refusal, cached=True, answer=hit.answer)
        else:
            result = judge(
                traj,
                case,
                model,
                kinds,
                findings=findings,
                json_schema=json_schema,
                meta={"server": server},
                max_new_tokens=max_new_tokens or MAX_ANSWER_TOKENS,
                strategy=strategy,
                **shown,
            )
            if result.meta.get("json_schema") is False:
                json_schema = False  # the server refused the response format once: do not ask it again
            done = Judged(
                tid, traj.sample_id, result.diagnosis, result.refusal, failed=result.failed, answer=result.answer
            )
            if not result.failed:
                save_verdict(
                    JudgeVerdict(
                        digest=key,
                        spec=judge_id["spec"],
                        backend=judge_id["backend"],
                        prompt_version=int(result.meta["prompt_version"]),
                        diagnosis=result.diagnosis,
                        refusal=result.refusal,
                        answer=result.answer,
                        meta=result.meta,
                    ),
                    store=st,
                )
        if done.diagnosis is not None:
            verdict = done.diagnosis
            update_diagnoses(  # the other sources' stay
                tid,
                lambda stored: combine([verdict], [d for d in stored if d.source != JUDGE]),
                version=DIAGNOSIS_VERSION,
                store=st,
            )
        out.append(done)
        if on_result is not None:
            on_result(done)
    return out


def inert(text: str, limit: int) -> str:
    """Untrusted text (a model's words, a case id) as one printable line: no newline, no terminal escape."""
    flat = " ".join(str(text).split())
    flat = "".join(ch if ch.isprintable() else "?" for ch in flat)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


__all__ = ["Judged", "inert", "judge_targets", "judge_trajectories"]

"""Builders of cases and trajectories for the store tests."""

from __future__ import annotations

import random
from typing import Optional

from evalrx.core import FailureCase, Inputs, Label, Step, StepRole, Trajectory

TOOLS = ("calculator", "lookup", "image_zoom")
TERMINATIONS = ("final", "max_turns", "forced_final", "error")


def make_case(i: int, image: Optional[bytes] = None) -> FailureCase:
    return FailureCase(
        inputs=Inputs(prompt=f"Question {i}: what is {i} * 7?", image=image),
        id=f"q{i:04d}",
        expected=i * 7,
        grader={"kind": "numeric"},
        meta={"suite": "test", "i": i},
    )


def make_trajectory(case: FailureCase, rng: random.Random, *, n_turns: Optional[int] = None) -> Trajectory:
    """A plausible agent trajectory with tool calls, observations, spans and metrics."""
    n_turns = n_turns if n_turns is not None else rng.randint(1, 4)
    steps = [Step(idx=0, role=StepRole.USER, content=case.inputs.prompt, span={"has_image": False})]
    total_lat = total_tool = 0.0
    pt = ct = calls = perr = 0
    for turn in range(1, n_turns + 1):
        lat = round(rng.uniform(5, 500), 3)
        p, c = rng.randint(50, 500), rng.randint(5, 80)
        total_lat, pt, ct = total_lat + lat, pt + p, ct + c
        last = turn == n_turns
        span = {"latency_ms": lat, "prompt_tokens": p, "completion_tokens": c, "turn": turn}
        if last:
            steps.append(
                Step(idx=len(steps), role=StepRole.ACTOR, content=f"The answer is {case.expected}.", span=span)
            )
            break
        tool = rng.choice(TOOLS)
        bad = rng.random() < 0.15
        steps.append(
            Step(
                idx=len(steps),
                role=StepRole.ACTOR,
                content=f'<tool_call>\n{{"name": "{tool}", "arguments": {{"x": {turn}}}}}\n</tool_call>',
                tool_calls=[] if bad else [{"name": tool, "args": {"x": turn}}],
                parse_error="Expecting value: line 1 column 9" if bad else None,
                span=span,
            )
        )
        if bad:
            perr += 1
            steps.append(
                Step(
                    idx=len(steps),
                    role=StepRole.TOOL,
                    content="",
                    observation="[parse error]",
                    span={"turn": turn, "parse_error": True},
                )
            )
            continue
        calls += 1
        tl = round(rng.uniform(0.01, 3), 3)
        total_tool += tl
        steps.append(
            Step(
                idx=len(steps),
                role=StepRole.TOOL,
                content=tool,
                observation={"text": f"result {turn} of {tool}", "n_images": 0},
                span={
                    "turn": turn,
                    "call": 0,
                    "latency_ms": tl,
                    **({"repeat_blocked": True} if rng.random() < 0.1 else {}),
                },
            )
        )
    outcome = rng.choice([Label.PASS, Label.FAIL, Label.FAIL])
    terminated = rng.choice(TERMINATIONS)
    return Trajectory(
        sample_id=case.id,
        goal=case.inputs.prompt,
        steps=steps,
        final_answer=None if terminated == "max_turns" else f"The answer is {case.expected}.",
        ground_truth=case.expected,
        outcome=outcome,
        metrics={
            "n_steps": len(steps),
            "n_turns": n_turns,
            "n_tool_calls": calls,
            "n_parse_errors": perr,
            "terminated": terminated,
            "total_latency_ms": round(total_lat, 3),
            "total_tool_latency_ms": round(total_tool, 3),
            "total_prompt_tokens": pt,
            "total_completion_tokens": ct,
        },
    )


def fill_run(store, n: int, *, seed: int = 0, name: str = "run", config: Optional[dict] = None):
    """A run of `n` cases, every one with a trajectory; returns (run_id, cases, trajectories)."""
    from evalrx.store import runs
    from evalrx.store.queries import pending_cases

    rng = random.Random(seed)
    cases = [make_case(i + seed * 10000) for i in range(n)]
    trajs = [make_trajectory(c, rng) for c in cases]
    with store.write() as s:
        run_id = runs.create_run(
            s, name=name, config=config or {"model": {"name": "m", "backend": "hf_local"}}, cases=cases
        )
        for pos, case_row_id, _ in pending_cases(s, run_id):
            runs.save_trajectory(s, run_id, case_row_id, trajs[pos])
    return run_id, cases, trajs

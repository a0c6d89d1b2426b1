"""Stores filled with plausible trajectories for the app's tests (no model needed)."""

from __future__ import annotations

import random
from typing import Optional

from evalrx.core import FailureCase, Inputs, Label, Step, StepRole, Trajectory

TOOLS = ("calculator", "lookup")
XSS_SCRIPT = "<script>window.__evalrx_xss = 1; alert('xss')</script>"
XSS_IMG = "<img src=x onerror=\"window.__evalrx_xss = 2; alert('img')\">"
XSS_MD = "[click me](javascript:alert(1)) :red[red] **bold** $x^2$"
XSS = f"{XSS_SCRIPT} {XSS_IMG} {XSS_MD}"


def tiny_png() -> bytes:
    """A valid 2x2 PNG without Pillow."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def make_case(i: int, *, prefix: str = "q", image: Optional[bytes] = None) -> FailureCase:
    return FailureCase(
        inputs=Inputs(prompt=f"Question {i}: what is {i} * 7?", image=image),
        id=f"{prefix}{i:05d}",
        expected=i * 7,
        grader={"kind": "numeric"},
        meta={"suite": "test"},
    )


def make_trajectory(case: FailureCase, rng: random.Random, *, outcome: Optional[Label] = None) -> Trajectory:
    """1-4 model turns with calls, observations, a parse error now and then, timing and tokens."""
    n_turns = rng.randint(1, 4)
    steps = [Step(idx=0, role=StepRole.USER, content=case.inputs.prompt)]
    lat = tool_lat = 0.0
    pt = ct = calls = perr = 0
    for turn in range(1, n_turns + 1):
        ms, p, c = round(rng.uniform(5, 400), 3), rng.randint(50, 400), rng.randint(5, 60)
        lat, pt, ct = lat + ms, pt + p, ct + c
        span = {"latency_ms": ms, "prompt_tokens": p, "completion_tokens": c, "turn": turn}
        if turn == n_turns:
            steps.append(
                Step(idx=len(steps), role=StepRole.ACTOR, content=f"The answer is {case.expected}.", span=span)
            )
            break
        tool = rng.choice(TOOLS)
        if rng.random() < 0.15:
            perr += 1
            steps.append(
                Step(
                    idx=len(steps),
                    role=StepRole.ACTOR,
                    content='<tool_call>\n{"name": oops\n</tool_call>',
                    parse_error="Expecting value: line 1 column 10",
                    span=span,
                )
            )
            steps.append(
                Step(
                    idx=len(steps),
                    role=StepRole.TOOL,
                    content="",
                    observation="Your tool call was malformed.",
                    span={"turn": turn, "parse_error": True},
                )
            )
            continue
        calls += 1
        args = {"expression": f"{turn} * 7"} if tool == "calculator" else {"query": f"fact {turn}"}
        steps.append(
            Step(
                idx=len(steps),
                role=StepRole.ACTOR,
                content=f'<tool_call>\n{{"name": "{tool}", "arguments": {args}}}\n</tool_call>',
                tool_calls=[{"name": tool, "args": args}],
                span=span,
            )
        )
        tl = round(rng.uniform(0.05, 3), 3)
        tool_lat += tl
        steps.append(
            Step(
                idx=len(steps),
                role=StepRole.TOOL,
                content=tool,
                observation={"text": f"{turn * 7}", "n_images": 0},
                span={
                    "turn": turn,
                    "call": 0,
                    "latency_ms": tl,
                    **({"repeat_blocked": True} if rng.random() < 0.1 else {}),
                },
            )
        )
    outcome = outcome or rng.choice([Label.PASS, Label.FAIL, Label.FAIL])
    return Trajectory(
        sample_id=case.id,
        goal=case.inputs.prompt,
        steps=steps,
        final_answer=f"The answer is {case.expected}.",
        ground_truth=case.expected,
        outcome=outcome,
        metrics={
            "terminated": rng.choice(["final", "final", "max_turns", "forced_final"]),
            "total_latency_ms": round(lat, 3),
            "total_tool_latency_ms": round(tool_lat, 3),
            "total_prompt_tokens": pt,
            "total_completion_tokens": ct,
            "n_tool_calls": calls,
            "n_parse_errors": perr,
        },
    )


def xss_trajectory(case: FailureCase) -> Trajectory:
    """A failed trajectory whose every model- and tool-controlled field carries markup."""
    steps = [
        Step(idx=0, role=StepRole.USER, content=case.inputs.prompt),
        Step(
            idx=1,
            role=StepRole.ACTOR,
            content=f"Let me call. {XSS}",
            tool_calls=[{"name": f"lookup{XSS_IMG}", "args": {"query": XSS}}],
            span={"latency_ms": 12.5, "prompt_tokens": 40, "completion_tokens": 9, "turn": 1},
        ),
        Step(
            idx=2,
            role=StepRole.TOOL,
            content=f"lookup{XSS_IMG}",
            observation={"text": f"obs {XSS}", "n_images": 0},
            span={"turn": 1, "call": 0, "latency_ms": 0.4},
        ),
        Step(
            idx=3,
            role=StepRole.ACTOR,
            content=f"bad {XSS}",
            parse_error=f"bad json near {XSS}",
            span={"latency_ms": 20.0, "prompt_tokens": 60, "completion_tokens": 12, "turn": 2},
        ),
        Step(
            idx=4,
            role=StepRole.ACTOR,
            content=f"Final: {XSS}",
            span={"latency_ms": 8.0, "prompt_tokens": 80, "completion_tokens": 5, "turn": 3, "forced_final": True},
        ),
    ]
    return Trajectory(
        sample_id=case.id,
        goal=case.inputs.prompt,
        steps=steps,
        final_answer=f"answer {XSS}",
        ground_truth=case.expected,
        outcome=Label.FAIL,
        metrics={"terminated": "forced_final", "n_parse_errors": 1, "n_tool_calls": 1},
    )


def fill_run(
    url: str,
    n: int,
    *,
    seed: int = 0,
    name: str = "run",
    prefix: str = "q",
    outcomes: Optional[list] = None,
    status: str = "done",
) -> tuple[int, list[int]]:
    """A finished run of `n` trajectories; returns (run id, trajectory ids in case order)."""
    import evalrx.store as S
    from evalrx.store import runs
    from evalrx.store.queries import pending_cases

    store = S.connect(url)
    rng = random.Random(seed)
    cases = [make_case(i, prefix=prefix) for i in range(n)]
    ids = []
    with store.write() as s:
        run_id = runs.create_run(
            s, name=name, config={"model": {"name": "evalrx-tiny", "backend": "hf_local"}}, cases=cases, status=status
        )
        for pos, case_id, _ in pending_cases(s, run_id):
            o = outcomes[pos] if outcomes else None
            ids.append(runs.save_trajectory(s, run_id, case_id, make_trajectory(cases[pos], rng, outcome=o)))
        from evalrx.store import schema as t

        run = s.get(t.Run, run_id)
        run.n_done = n
        run.n_pass = sum(1 for i in ids if s.get(t.Trajectory, i).outcome == "pass")
        run.n_fail = n - run.n_pass
    return run_id, ids


def add_xss_run(url: str) -> tuple[int, int]:
    """A run with one hostile trajectory (and a case image); returns (run id, trajectory id)."""
    import evalrx.store as S
    from evalrx.store import runs
    from evalrx.store.queries import pending_cases

    store = S.connect(url)
    case = FailureCase(
        inputs=Inputs(prompt=f"Hostile {XSS}", image=tiny_png()),
        id=f"xss{XSS_SCRIPT}",
        expected="<b>42</b>",
        meta={"suite": "xss"},
    )
    with store.write() as s:
        run_id = runs.create_run(
            s, name=f"xss {XSS_SCRIPT}", config={"model": {"name": "evalrx-tiny"}}, cases=[case], status="done"
        )
        ((pos, case_id, _),) = pending_cases(s, run_id)
        tid = runs.save_trajectory(s, run_id, case_id, xss_trajectory(case))
    return run_id, tid


def call_trajectory(
    case: FailureCase, calls: list, *, outcome: str, answer: object = None, attempt: int = 1
) -> Trajectory:
    """A trajectory that makes `calls` ([(tool, args)]), one per model turn, then answers `answer`."""
    steps = [Step(idx=0, role=StepRole.USER, content=case.inputs.prompt)]
    for turn, (tool, args) in enumerate(calls, start=1):
        steps.append(
            Step(
                idx=len(steps),
                role=StepRole.ACTOR,
                content=f"calling {tool}",
                tool_calls=[{"name": tool, "args": args}],
                span={"latency_ms": 10.0 * turn, "prompt_tokens": 50 * turn, "completion_tokens": 8, "turn": turn},
            )
        )
        steps.append(
            Step(
                idx=len(steps),
                role=StepRole.TOOL,
                content=tool,
                observation={"text": "42", "n_images": 0},
                span={"turn": turn, "call": 0, "latency_ms": 0.5},
            )
        )
    answer = case.expected if answer is None else answer
    steps.append(
        Step(
            idx=len(steps),
            role=StepRole.ACTOR,
            content=f"The answer is {answer}.",
            span={"latency_ms": 5.0, "prompt_tokens": 60, "completion_tokens": 6, "turn": len(calls) + 1},
        )
    )
    return Trajectory(
        sample_id=case.id,
        goal=case.inputs.prompt,
        steps=steps,
        final_answer=f"The answer is {answer}.",
        ground_truth=case.expected,
        outcome=Label(outcome),
        attempt=attempt,
        metrics={
            "terminated": "final",
            "n_tool_calls": len(calls),
            "n_parse_errors": 0,
            "total_latency_ms": 10.0 * len(calls) + 5.0,
        },
    )


def fill_attempts(
    url: str, cases: list, make: object, *, repeats: int = 1, name: str = "run", diagnose: object = None
) -> tuple[int, dict]:
    """A finished run whose attempt `a` of case `pos` is `make(pos, a)` (a Trajectory), diagnosed with
    `diagnose(pos, a)` (a list of Diagnosis, or None); returns (run id, {(case id, attempt): trajectory id})."""
    import evalrx.store as S
    from evalrx.store import runs
    from evalrx.store import schema as t
    from evalrx.store.queries import pending_cases

    store = S.connect(url)
    ids = {}
    with store.write() as s:
        run_id = runs.create_run(
            s,
            name=name,
            config={"model": {"name": "evalrx-tiny", "backend": "hf_local"}},
            cases=cases,
            repeats=repeats,
            status="done",
        )
        for pos, case_id, attempt in pending_cases(s, run_id):
            traj = make(pos, attempt)
            traj.attempt = attempt
            ids[(cases[pos].id, attempt)] = runs.save_trajectory(
                s, run_id, case_id, traj, diagnoses=(diagnose(pos, attempt) or []) if diagnose else []
            )
        run = s.get(t.Run, run_id)
        outcomes = [s.get(t.Trajectory, i).outcome for i in ids.values()]
        run.n_done, run.n_pass, run.n_fail = len(ids), outcomes.count("pass"), outcomes.count("fail")
    return run_id, ids

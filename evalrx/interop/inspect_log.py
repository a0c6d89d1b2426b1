"""Inspect AI `.json` eval logs (parsed whole: the format has no sample boundaries to stream by).

`from_inspect_sample` also reads the samples of `.eval` logs (`evalrx.interop.inspect_eval`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Optional

from evalrx.core.case import FailureCase, Inputs, Label, StepRole, Termination, Trajectory
from evalrx.interop.errors import ImportFormatError
from evalrx.interop.messages import (
    as_dict,
    as_list,
    message_pictures,
    messages_to_steps,
    outcome_of,
    resolve_attachment,
    trajectory_metrics,
)
from evalrx.interop.records import Reading, Record, checked_attempt
from evalrx.interop.registry import Format, register


def from_inspect_sample(sample: Any) -> tuple[FailureCase, Trajectory]:
    """One sample of an Inspect AI eval log (a `.json` log's `samples[i]` or a `.eval` log's sample entry).

    The messages give the steps; the events add each model call's latency, tokens and logprobs
    and each tool call's latency and error, matched by message and tool-call id. The epoch is
    the trajectory's attempt: every epoch of a sample is the same case (id = the sample id),
    so pass@k and comparisons pair epochs as they pair a run's repeated attempts.
    `attachment://` references are resolved from the sample's `attachments`.
    """
    if not isinstance(sample, dict):
        raise ValueError("the sample is not an object")
    if "id" not in sample:
        raise ValueError("the sample has no `id`")
    attachments = sample.get("attachments") if isinstance(sample.get("attachments"), dict) else None
    messages = sample_messages(sample)
    steps, system, final, goal = messages_to_steps(messages, style="inspect", attachments=attachments)
    _add_event_spans(steps, messages, sample.get("events"), attachments)
    inp = sample.get("input")
    if isinstance(inp, str):
        goal = resolve_attachment(inp, attachments)
    output = sample.get("output") or {}
    completion = output.get("completion") if isinstance(output, dict) else None
    if final is None and completion and steps and steps[-1].role is StepRole.ACTOR and not steps[-1].tool_calls:
        final = resolve_attachment(completion, attachments)
    sid = str(sample["id"])
    epoch = checked_attempt(sample.get("epoch", 1), "`epoch`")
    scores = sample.get("scores") or {}
    if not isinstance(scores, dict):
        raise ValueError("`scores` must be an object")
    scorer, first = next(iter(scores.items()), (None, None))
    value = first.get("value") if isinstance(first, dict) else None
    outcome = outcome_of(value)
    extra: dict = {"source": "inspect"}
    usage = sample.get("model_usage") or {}
    if isinstance(usage, dict) and usage:
        models = [u for u in usage.values() if isinstance(u, dict)]  # a model's usage that is not an object: none
        extra["total_prompt_tokens"] = sum(int(u.get("input_tokens") or 0) for u in models)
        extra["total_completion_tokens"] = sum(int(u.get("output_tokens") or 0) for u in models)
    if sample.get("working_time") is not None:
        extra["total_latency_ms"] = round(float(sample["working_time"]) * 1000, 3)
    if sample.get("total_time") is not None:
        extra["total_time_s"] = float(sample["total_time"])
    if scores:
        extra["scores"] = scores
        extra["grade"] = {"source": "inspect", "scorer": scorer, "value": value}
    if sample.get("error"):
        err = sample["error"]
        extra["terminated"] = Termination.ERROR.value
        extra["error"] = err.get("message") if isinstance(err, dict) else str(err)
        outcome = Label.ERROR  # the sample did not run to the end: not a verdict on the model
    elif sample.get("limit"):
        lim = sample["limit"]
        extra["terminated"] = Termination.limit(lim.get("type") if isinstance(lim, dict) else lim)
    target = sample.get("target")
    meta = dict(sample.get("metadata") or {}) if isinstance(sample.get("metadata"), dict) else {}
    meta["inspect_id"] = sample["id"]  # not the epoch: every epoch of a sample is the same case
    if system is not None:
        meta["system"] = system
    image, _ = message_pictures(messages, steps, attachments)
    case = FailureCase(inputs=Inputs(prompt=goal, image=image), id=sid, expected=target, meta=meta)
    traj = Trajectory(
        sample_id=sid,
        goal=goal,
        steps=steps,
        final_answer=final,
        ground_truth=target,
        outcome=outcome,
        metrics=trajectory_metrics(steps, final, extra),
        attempt=epoch,
    )
    return case, traj


def _add_event_spans(steps: list, messages: list, events: Any, attachments: Optional[dict]) -> None:
    """Copy model and tool events' timing, tokens, logprobs and errors onto the steps they produced."""
    if not isinstance(events, list) or not events:
        return
    by_message: dict = {}  # message id -> step index
    by_call: dict = {}  # tool call id -> the tool step answering it
    k = 0
    for msg in messages:
        if not isinstance(msg, dict) or msg.get("role") in ("system", "developer"):
            continue  # messages_to_steps makes no step of these
        if msg.get("id"):
            by_message[msg["id"]] = k
        if msg.get("role") == "tool" and msg.get("tool_call_id"):
            by_call[msg["tool_call_id"]] = k
        k += 1
    unmatched: list = []
    for ev in events:
        if not isinstance(ev, dict):
            continue
        kind = ev.get("event")
        if kind == "model":
            span, message_id = _model_span(ev, attachments)
            if message_id in by_message:
                steps[by_message[message_id]].span.update(span)
            else:  # a scorer's or sub-agent's call, or a log from before messages had ids
                unmatched.append(span)
        elif kind == "tool" and ev.get("id") in by_call:
            span = _timing(ev)
            err = ev.get("error")
            if err:
                span["tool_error"] = True
                if isinstance(err, dict) and err.get("type"):
                    span["tool_error_type"] = str(err["type"])
            steps[by_call[ev["id"]]].span.update(span)
    plain = [s for s in steps if s.role is StepRole.ACTOR and "started_at" not in s.span]
    if not by_message and len(unmatched) == len(plain):  # no ids at all: one model event per turn, in order
        for step, span in zip(plain, unmatched):
            step.span.update(span)


def _timing(ev: dict) -> dict:
    span: dict = {}
    if ev.get("timestamp"):
        span["started_at"] = str(ev["timestamp"])
    if isinstance(ev.get("working_time"), (int, float)):
        span["latency_ms"] = round(float(ev["working_time"]) * 1000, 3)
    return span


def _model_span(ev: dict, attachments: Optional[dict]) -> tuple[dict, Optional[str]]:
    """A model event's span fields and the id of the message it produced."""
    span = _timing(ev)
    out = as_dict(ev.get("output"))
    if "latency_ms" not in span and isinstance(out.get("time"), (int, float)):
        span["latency_ms"] = round(float(out["time"]) * 1000, 3)
    usage = as_dict(out.get("usage"))
    for ours, theirs in (
        ("prompt_tokens", "input_tokens"),
        ("completion_tokens", "output_tokens"),
        ("cached_tokens", "input_tokens_cache_read"),
        ("reasoning_tokens", "reasoning_tokens"),
    ):
        if isinstance(usage.get(theirs), int):
            span[ours] = usage[theirs]
    if ev.get("error"):
        span["model_error"] = resolve_attachment(str(ev["error"]), attachments)
    choices = as_list(out.get("choices"))
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    logprobs = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    if isinstance(logprobs, list) and logprobs:
        span["logprobs"] = [_logprob(lp) for lp in logprobs if isinstance(lp, dict)]
    message = as_dict(choice.get("message"))
    return span, message.get("id")


def _logprob(lp: dict) -> dict:
    """One token's logprob without its byte list (the token text says the same)."""
    out = {"token": lp.get("token"), "logprob": lp.get("logprob")}
    top = lp.get("top_logprobs")
    if isinstance(top, list) and top:
        out["top_logprobs"] = [
            {"token": t.get("token"), "logprob": t.get("logprob")} for t in top if isinstance(t, dict)
        ]
    return out


def sample_messages(sample: dict) -> list:
    """A sample's transcript: its messages, or for a log without transcripts its input as the one message."""
    messages = sample.get("messages")
    if messages:
        return messages
    inp = sample.get("input")
    return inp if isinstance(inp, list) else [{"role": "user", "content": inp or ""}]


def sample_pictures(sample: dict, traj: Trajectory) -> dict:
    """`{step: [picture bytes]}` the pictures a sample's messages hold beyond the case's (`message_pictures`)."""
    attachments = sample.get("attachments") if isinstance(sample.get("attachments"), dict) else None
    return message_pictures(sample_messages(sample), traj.steps, attachments)[1]


def inspect_run_info(log: dict) -> tuple[str, dict]:
    """A run name and config for an Inspect log's header."""
    ev = log.get("eval") or {}
    task, model = ev.get("task") or "inspect", ev.get("model") or "unknown"
    config = {
        "model": {"name": model, "backend": "inspect"},
        "inspect": {k: ev.get(k) for k in ("task", "task_id", "run_id", "created", "model", "dataset") if k in ev},
    }
    return f"{task} ({model})", config


def sample_where(i: int, sample: Any) -> str:
    """Where the `i`-th sample of a log is, for an error line: its index and its id."""
    return f"sample {i}" + (f" (id {sample.get('id')!r})" if isinstance(sample, dict) else "")


def sample_record(sample: Any, path: Path, where: str, run: "tuple[str, dict, dict]") -> Record:
    """One sample as a record of the run `(name, config, meta)`; a bad one is one line saying `where`."""
    try:
        case, traj = from_inspect_sample(sample)
        pictures = sample_pictures(sample, traj)
    except (ValueError, TypeError, KeyError) as exc:
        raise ImportFormatError(path, where, str(exc)) from None
    name, config, meta = run
    return Record(case=case, traj=traj, where=where, run_name=name, run_config=config, run_meta=meta, pictures=pictures)


def _is_inspect_log(obj: dict, whole: bool) -> bool:
    # A log written on one JSONL line must hold its samples; a whole document is read as a log by its `eval`.
    return "eval" in obj and (whole or "samples" in obj)


def read_inspect_log(log: dict, where: Any, reading: Reading) -> Iterator[Record]:
    """The samples of an Inspect `.json` log, each one's memory let go once it is read."""
    path = reading.path
    if not isinstance(log.get("eval"), dict):
        raise ImportFormatError(path, 1, "not an Inspect AI eval log (no top-level `eval` object)")
    samples = log.get("samples")
    if not isinstance(samples, list) or not samples:
        raise ImportFormatError(path, 1, "the log has no samples (was it written with log_samples=False?)")
    run = (*inspect_run_info(log), {"inspect_status": log.get("status")})
    reading.kinds.add("inspect")
    for i, sample in enumerate(samples):
        record = sample_record(sample, path, sample_where(i, sample), run)
        samples[i] = None  # each sample's memory goes once it is stored
        yield record


register(
    Format(
        name="inspect",
        title="Inspect .json log",
        sniff_rank=10,
        sniff_record=_is_inspect_log,
        read_record=read_inspect_log,
    )
)

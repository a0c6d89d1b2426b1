"""The agent loop: a backend-agnostic tool-calling loop over any model handle.

`Agent(handle, tools)` runs the same way on an API model and a local one: it needs
only GENERATE and TOOL_CALLS (checked up front). The one model-specific piece is
the `ToolCallCodec`, chosen by `codec_for(handle)`. Tools run through a pluggable
executor. Model-output problems (malformed calls, unknown tools) are recorded in
the trajectory and fed back to the model; they never raise out of the loop.
Torch-free.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import time
import warnings
from typing import Any, Callable, Iterable, Optional

from evalrx.config import RunConfig
from evalrx.core.capability import Capability, CapabilityError
from evalrx.core.case import FailureCase, Inputs, Label, Step, StepRole, Termination, Trajectory
from evalrx.core.model import ContextOverflow, Model
from evalrx.core.observation import Observation, observation_text
from evalrx.core.tool import ChatTurn, Tool, ToolCall, ToolResult
from evalrx.grade import ends_at_calls
from evalrx.models.conversation import FINAL_NUDGE, REPEAT_NUDGE, ConversationBuilder
from evalrx.models.toolcodec import ToolCallCodec, codec_for

__all__ = [
    "FINAL_NUDGE",
    "Agent",
    "ToolError",
    "ToolExecutor",
    "drop_generation_captures",
    "error_trajectory",
    "generation_captures",
    "run_batch",
    "run_case",
    "case_system",
    "user_prompts",
]

_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
# A trajectory's generation captures ride on the object, outside its fields: never serialized or stored.
_CAPTURES_ATTR = "_generation_captures"


def generation_captures(trajectory: Any) -> dict:
    """`{actor step index: ChatTurn.capture}` the agent loop kept of its generation (`chat_kwargs={"capture": ...}`).

    Empty for a trajectory that was stored, imported or produced without capture.
    """
    return getattr(trajectory, _CAPTURES_ATTR, None) or {}


def drop_generation_captures(trajectory: Any) -> None:
    """Release a trajectory's generation captures (their tensors) once they have been analysed."""
    if getattr(trajectory, _CAPTURES_ATTR, None) is not None:
        setattr(trajectory, _CAPTURES_ATTR, None)


class ToolError(str):
    """An error observation: plain text for the model, marked so the loop can flag the step."""


class ToolExecutor:
    """Runs a decoded `ToolCall` against the registered tools as `tool.fn(**args)`.

    Unknown tools, missing implementations, bad arguments and exceptions raised by
    the tool all come back as `ToolError` text, so the model sees what went wrong.
    """

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._by_name = {t.name: t for t in tools}
        self._signatures: dict = {}

    @property
    def tool_names(self) -> list:
        return list(self._by_name)

    def execute(self, call: ToolCall) -> Any:
        """Run one call.

        Args:
            call: the decoded call.

        Returns:
            Whatever the tool returned (str, `ToolResult`, ...), or a `ToolError`.
        """
        tool = self._by_name.get(call.name)
        if tool is None:
            names = ", ".join(self._by_name) or "(none)"
            return ToolError(f"[tool error: unknown tool {call.name!r}; available tools: {names}]")
        if tool.fn is None:
            return ToolError(f"[tool error in {call.name!r}: the tool has no implementation]")
        args = call.args or {}
        bad = self._bad_arguments(tool, args)
        if bad:
            return ToolError(f"[tool error in {call.name!r}: bad arguments: {bad}]")
        try:
            return tool.fn(**args)
        except Exception as exc:  # a tool failure is an observation for the model, not a crash
            return ToolError(f"[tool error in {call.name!r}: {type(exc).__name__}: {exc}]")

    def _bad_arguments(self, tool: Tool, args: dict) -> Optional[str]:
        """Why `args` cannot bind to the tool's signature, or None (checked first so a
        TypeError raised inside the tool is not mistaken for a bad call)."""
        sig = self._signatures.get(tool.name, False)
        if sig is False:
            try:
                sig = inspect.signature(tool.fn) if tool.fn is not None else None
            except (TypeError, ValueError):  # builtins without a signature: let the call decide
                sig = None
            self._signatures[tool.name] = sig
        if sig is None:
            return None
        try:
            sig.bind(**args)
        except TypeError as exc:
            params = sig.parameters
            takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
            unexpected = [] if takes_any else [a for a in args if a not in params]
            extra = f"unexpected argument(s) {', '.join(map(repr, unexpected))}; " if unexpected else ""
            return f"{extra}{exc}; expected {tool.name}{sig}"
        return None


def _as_case(data: Any) -> FailureCase:
    if isinstance(data, FailureCase):
        return data
    if isinstance(data, Inputs):
        return FailureCase(inputs=data)
    if isinstance(data, str):
        return FailureCase.from_prompt(data)
    raise TypeError(f"Agent.run expects str | Inputs | FailureCase, got {type(data).__name__}")


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class Agent:
    """A tool-calling agent composed over a model handle (any backend).

    Loop policies (both off by default; they are candidate fixes, kept as
    configuration so a validated repair is deployable):

    * `block_repeat_calls`: a call identical to the immediately preceding call is
      not executed; the model gets a nudge instead (`span["repeat_blocked"]`).
    * `force_final_answer`: when `max_turns` runs out without an answer, ask once
      more without tools (`terminated="forced_final"`).

    Args:
        handle: a model handle providing GENERATE and TOOL_CALLS.
        tools: the tools the model may call.
        codec: the tool-call codec; `codec_for(handle)` when None.
        executor: runs calls; `ToolExecutor(tools)` when None.
        max_turns: model turns allowed before the loop stops.
        system: optional system prompt.
        block_repeat_calls: see above.
        force_final_answer: see above.
        chat_kwargs: extra keyword arguments for every `handle.chat` call
            (e.g. `{"logprobs": True}`; returned logprobs land in the step span;
            `{"capture": True}` on hf_local keeps each turn's `ChatTurn.capture` on the
            returned trajectory, outside its fields: `generation_captures(trajectory)`).

    Raises:
        CapabilityError: the handle lacks GENERATE or TOOL_CALLS.
    """

    requires = frozenset({Capability.GENERATE, Capability.TOOL_CALLS})

    def __init__(
        self,
        handle: Model,
        tools: Iterable[Tool],
        codec: Optional[ToolCallCodec] = None,
        executor: Optional[Any] = None,
        max_turns: int = 10,
        system: Optional[str] = None,
        block_repeat_calls: bool = False,
        force_final_answer: bool = False,
        chat_kwargs: Optional[dict] = None,
    ) -> None:
        missing = self.requires - set(getattr(handle, "capabilities", frozenset()))
        model_id = getattr(getattr(handle, "spec", None), "key", None) or type(handle).__name__
        if missing:
            raise CapabilityError(analyzer="Agent", model=model_id, missing=missing)
        if not callable(getattr(handle, "chat", None)):
            raise TypeError(f"{type(handle).__name__} has no chat(); the agent loop needs a tool-aware chat method.")
        self.handle = handle
        self.tools = list(tools)
        self._names = _wire_names(self.tools)
        self.codec = codec or codec_for(handle)
        self.executor = executor or ToolExecutor(self.tools)
        self.max_turns = int(max_turns)
        self.system = system
        self.block_repeat_calls = block_repeat_calls
        self.force_final_answer = force_final_answer
        self.chat_kwargs = dict(chat_kwargs or {})
        self.capabilities = handle.capabilities

    def _chat(self, messages: list, tools: Optional[list]) -> "tuple[ChatTurn, dict]":
        """One model call, timed; returns the turn and the span fields it yields."""
        t0 = time.perf_counter()
        try:
            chat = self.handle.chat(messages, tools=tools, **self.chat_kwargs)
        except Exception as exc:  # the failed call's real time goes with the error (0 would be a lie)
            if getattr(exc, "elapsed_ms", None) is None:
                try:
                    setattr(exc, "elapsed_ms", _ms(time.perf_counter() - t0))
                except AttributeError:  # an exception type that takes no attributes
                    pass
            raise
        span: dict = {"latency_ms": _ms(time.perf_counter() - t0)}
        usage = chat.usage or {}
        for key in _USAGE_KEYS:
            if usage.get(key) is not None:
                span[key] = int(usage[key])
        if chat.finish_reason is not None:
            span["finish_reason"] = chat.finish_reason
        if chat.logprobs:
            span["logprobs"] = chat.logprobs
        return chat, span

    def run(self, data: Any) -> Trajectory:
        """Drive the tool loop to completion and return the trajectory.

        A case image goes into the first user message as a content block; images in
        a `ToolResult` are shown to the model in a user message after the turn's
        tool messages.

        Args:
            data: a prompt, `Inputs` or `FailureCase`.

        Returns:
            The `Trajectory`, with `metrics["terminated"]` one of `Termination`'s "final",
            "max_turns" or "forced_final".
        """
        case = _as_case(data)
        goal = case.inputs.prompt
        encoded = self.codec.encode(self.tools)
        codec = self.codec
        stop_at_calls = ends_at_calls(case)  # graded by its calls: they are the answer, never run

        conversation = ConversationBuilder(codec, case_system(self.system, case.meta))  # the one builder replay uses
        conversation.prompt(goal, case.inputs.image)
        messages = conversation.messages
        steps: list = [
            # "has_image" is a stored key: it keeps its first name.
            Step(idx=0, role=StepRole.USER, content=goal, span={"has_image": case.inputs.image is not None})
        ]

        captures: dict = {}  # actor step index -> ChatTurn.capture, when the chat kwargs asked for them
        final_answer: Optional[str] = None
        terminated = Termination.MAX_TURNS.value
        prev_sig: Optional[tuple] = None
        turns = 0
        n_calls = n_parse_errors = n_blocked = n_tool_errors = 0

        prompts = user_prompts(case)
        multi = len(prompts) > 1  # a conversation: the next user turn comes when the agent answers
        if multi:
            steps[0].span["user_turn"] = 0
        turn = 0
        failure: Optional[str] = None  # why the run ended early, when a model call failed
        for user_turn, prompt in enumerate(prompts):
            if user_turn:
                steps.append(Step(idx=len(steps), role=StepRole.USER, content=prompt, span={"user_turn": user_turn}))
                conversation.user(prompt, step=steps[-1].idx)
                final_answer, terminated = None, Termination.MAX_TURNS.value
            for _ in range(self.max_turns):
                turn += 1
                try:
                    chat, span = self._chat(messages, encoded)
                except Exception as exc:
                    # Past the context, or a server that failed after some turns: the run ends here, its steps
                    # kept. A first call that fails has nothing to keep (`run_case` records the error).
                    if not isinstance(exc, ContextOverflow) and len(steps) == 1:
                        raise
                    where = f"user turn {user_turn + 1} of {len(prompts)}: " if multi else ""
                    failure = f"{type(exc).__name__}: {where}{exc}"
                    turn -= 1  # no model turn was made
                    break
                span["turn"] = turn
                if multi:
                    span["user_turn"] = user_turn
                parsed = codec.parse(chat)
                wire_calls, errors = parsed.calls, parsed.errors
                # The model named tools by their wire names; the trajectory and the tools know them by their own.
                calls = [dataclasses.replace(c, name=self._names.get(c.name, c.name)) for c in wire_calls]
                if chat.capture is not None:
                    captures[len(steps)] = chat.capture
                steps.append(
                    Step(
                        idx=len(steps),
                        role=StepRole.ACTOR,
                        content=chat.text or "",
                        tool_calls=calls,
                        parse_error="; ".join(errors) if errors else None,
                        span=span,
                    )
                )
                conversation.assistant(chat, wire_calls)

                if not calls and not errors:
                    final_answer = parsed.text
                    terminated = Termination.FINAL.value
                    if multi and final_answer != chat.text:
                        span["answer"] = final_answer  # what grades this turn: the text without markup
                    break
                if stop_at_calls:
                    terminated = Termination.CALLS.value
                    break

                for i, (call, wire_call) in enumerate(zip(calls, wire_calls)):
                    n_calls += 1
                    sig = call.signature()
                    blocked = self.block_repeat_calls and sig == prev_sig
                    prev_sig = sig
                    tool_span: dict = {"turn": turn, "call": i}
                    if multi:
                        tool_span["user_turn"] = user_turn
                    t0 = time.perf_counter()
                    if blocked:
                        observation: Any = REPEAT_NUDGE
                        tool_span["repeat_blocked"] = True
                        n_blocked += 1
                    else:
                        observation = self.executor.execute(call)
                    tool_span["latency_ms"] = _ms(time.perf_counter() - t0)
                    if isinstance(observation, ToolError):
                        tool_span["tool_error"] = True
                        n_tool_errors += 1
                    steps.append(
                        Step(
                            idx=len(steps),
                            role=StepRole.TOOL,
                            content=call.name,
                            observation=Observation.of(observation),
                            span=tool_span,
                        )
                    )
                    images = observation.images if isinstance(observation, ToolResult) else ()
                    conversation.tool(wire_call, observation_text(observation, shown=True), images)

                if errors:
                    n_parse_errors += len(errors)
                    feedback = conversation.parse_error(errors)
                    steps.append(
                        Step(
                            idx=len(steps),
                            role=StepRole.TOOL,
                            content="",
                            observation=feedback["content"],
                            span=dict(
                                {"turn": turn, "parse_error": True}, **({"user_turn": user_turn} if multi else {})
                            ),
                        )
                    )
                conversation.end_turn()  # the tools' images, after every tool message of the turn
            if failure is not None or terminated != Termination.FINAL.value:
                break  # out of turns, out of context, or ended by calls: no later user turn is given
        turns = turn
        if failure is not None:
            terminated = Termination.ERROR.value

        if self.force_final_answer and final_answer is None and terminated == Termination.MAX_TURNS.value:
            # The codec places the nudge: a user turn may break the family's template (Mistral's alternation).
            conversation.final_nudge()
            final: Optional[ChatTurn] = None
            try:
                final, span = self._chat(messages, None)  # no tools: the reply is the answer
            except Exception as exc:  # the steps so far are kept, as when a turn's call fails
                failure, terminated = f"{type(exc).__name__}: {exc}", Termination.ERROR.value
            if final is not None:
                span["forced_final"] = True
                parsed = codec.parse(final)
                if parsed.calls or parsed.errors:  # the model still tried to call: recorded, not executed
                    span["ignored_calls"] = len(parsed.calls) + len(parsed.errors)
                final_answer = parsed.text
                if final.capture is not None:
                    captures[len(steps)] = final.capture
                steps.append(Step(idx=len(steps), role=StepRole.ACTOR, content=final.text or "", span=span))
                terminated = Termination.FORCED_FINAL.value

        actor = [s for s in steps if s.role is StepRole.ACTOR]
        metrics: dict = {
            "n_steps": len(steps),
            "n_turns": turns,
            "n_tool_calls": n_calls,
            "n_parse_errors": n_parse_errors,
            "n_repeat_blocked": n_blocked,
            "n_tool_errors": n_tool_errors,
            "terminated": terminated,
            "total_latency_ms": round(sum(s.span.get("latency_ms", 0.0) for s in actor), 3),
            "total_tool_latency_ms": round(
                sum(s.span.get("latency_ms", 0.0) for s in steps if s.role is StepRole.TOOL), 3
            ),
            "total_prompt_tokens": sum(int(s.span.get("prompt_tokens") or 0) for s in actor),
            "total_completion_tokens": sum(int(s.span.get("completion_tokens") or 0) for s in actor),
        }
        if multi:
            metrics["n_user_turns"] = len(prompts)
            metrics["user_turns_reached"] = 1 + max(int(s.span.get("user_turn", 0)) for s in steps)
        if failure is not None:
            metrics["error"] = failure
        trajectory = Trajectory(
            sample_id=case.id,
            goal=goal,
            steps=steps,
            final_answer=final_answer,
            ground_truth=case.expected,
            outcome=Label.UNKNOWN,  # grading is an analyzer's job
            metrics=metrics,
            offered_tools=[t.describe() for t in self.tools],
        )
        if captures:
            setattr(trajectory, _CAPTURES_ATTR, captures)
        return trajectory

    def __repr__(self) -> str:
        return f"Agent(handle={self.handle!r}, tools={[t.name for t in self.tools]}, codec={self.codec.name})"


def _wire_names(tools: "list[Tool]") -> dict:
    """{wire name: tool name} of a tool set (raises ValueError when two tools would look the same to the model)."""
    names: dict = {}
    sources: dict = {}
    for tool in tools:
        other = names.get(tool.wire_name)
        if other is not None and other != tool.name:
            raise ValueError(
                f"tools {other!r} and {tool.name!r} both reach the model as {tool.wire_name!r}; rename one of them"
            )
        if other is not None:  # the same name from two places: the model could not tell which it calls
            where = f"{sources[tool.name]} and {_where(tool)}"
            raise ValueError(f"two tools are named {tool.name!r} ({where}); offer one of them")
        names[tool.wire_name] = tool.name
        sources[tool.name] = _where(tool)
    return names


def _where(tool: Tool) -> str:
    return f"{tool.source} {tool.origin}".strip()


def user_prompts(case: FailureCase) -> list:
    """The user turns of a case, in order: its `meta["turns"]` prompts, else its one prompt."""
    turns = (case.meta or {}).get("turns")
    if (
        isinstance(turns, list)
        and turns
        and all(isinstance(t, dict) and isinstance(t.get("prompt"), str) for t in turns)
    ):
        return [t["prompt"] for t in turns]
    return [case.inputs.prompt]


def case_system(system: Optional[str], case_meta: Optional[dict]) -> Optional[str]:
    """The system prompt of one case: the run's, then the case's own (`meta["system"]`, e.g. a BFCL entry's)."""
    own = (case_meta or {}).get("system")
    parts = [p for p in (system, own if isinstance(own, str) else None) if p and p.strip()]
    return "\n\n".join(parts) or None


def error_trajectory(case: FailureCase, exc: BaseException) -> Trajectory:
    """The trajectory of a case whose run raised (a server, harness or limit error): the prompt and the error.

    A failed model call's real time (`exc.elapsed_ms`) is kept as the trajectory's latency.
    """
    metrics: dict = {"terminated": Termination.ERROR.value, "error": f"{type(exc).__name__}: {exc}"}
    elapsed = getattr(exc, "elapsed_ms", None)
    if elapsed is not None:
        metrics["total_latency_ms"] = float(elapsed)
    return Trajectory(
        sample_id=case.id,
        goal=case.inputs.prompt,
        steps=[Step(idx=0, role=StepRole.USER, content=case.inputs.prompt)],
        ground_truth=case.expected,
        metrics=metrics,
    )


def run_case(
    handle: Model,
    case: Any,
    tools: Iterable[Tool],
    *,
    grade: bool = False,
    seed: Optional[int] = None,
    **agent_kwargs: Any,
) -> Trajectory:
    """Run one case through the agent loop: the one place `run_batch`, the worker and the offline runner run a case.

    A run that raises (a server down, a limit) becomes an error trajectory instead of an exception.

    Args:
        handle: the model handle.
        case: a prompt, `Inputs` or `FailureCase`.
        tools: the case's tools.
        grade: also grade it against the case's expected answer (`evalrx.grade.grade_trajectory`).
        seed: seeds torch's sampler first, so a local model's sampled attempt can be reproduced.
        **agent_kwargs: `Agent` arguments (max_turns, system, codec, loop policies, chat_kwargs).
    """
    case = _as_case(case)
    if seed is not None and "torch" in sys.modules:  # only local models sample with torch; API runs never load it
        sys.modules["torch"].manual_seed(seed)
    try:
        trajectory = Agent(handle, list(tools), **agent_kwargs).run(case)
    except Exception as exc:  # the case fails, its caller goes on
        trajectory = error_trajectory(case, exc)
    if grade:
        from evalrx.grade import grade_trajectory

        try:
            trajectory.outcome = grade_trajectory(trajectory, case)
            if trajectory.outcome is Label.FAIL:
                from evalrx.grade import grade_explanation

                why = grade_explanation(trajectory, case)  # calls, state or turns: why, in one line (and where)
                if why is not None:
                    trajectory.metrics["grade_reason"] = why["reason"]
                    if "turn" in why:  # the conversation's failing user turn (0-based), for the lists
                        trajectory.metrics["grade_turn"] = why["turn"]
                    if "diff" in why:
                        trajectory.metrics["grade_diff"] = why["diff"]
        except Exception as exc:  # a bad grader spec is the case's problem, recorded on it
            trajectory.metrics["grade_error"] = f"{type(exc).__name__}: {exc}"
            trajectory.outcome = Label.UNKNOWN
    return trajectory


def run_batch(
    handle: Model,
    cases: Iterable[Any],
    *,
    tools_factory: "Callable[[FailureCase], Iterable[Tool]]",
    system: Optional[str] = None,
    max_turns: int = 10,
    codec: Optional[ToolCallCodec] = None,
    concurrency: Optional[int] = None,
    on_result: "Optional[Callable[[FailureCase, Trajectory], None]]" = None,
    agent_kwargs: Optional[dict] = None,
    grade: bool = False,
) -> list:
    """Run the agent loop over many cases.

    Threads are used only for API handles (HTTP calls are reentrant); any other
    backend runs one case at a time, with a warning only if more was asked for. A case
    whose run raises (endpoint down, a failing `tools_factory`) gets a stub
    trajectory with `metrics["terminated"] == "error"` instead of stopping the batch.

    Args:
        handle: the model handle.
        cases: prompts, `Inputs` or `FailureCase`s.
        tools_factory: builds each case's tools (tools may bind to the case's image).
        system: optional system prompt.
        max_turns: per-case turn budget.
        codec: codec shared by every case; `codec_for(handle)` per case when None.
        concurrency: worker threads for API handles; None: `RunConfig.concurrency` (4) for an API handle, one
            otherwise. More than one for any other handle warns (it cannot be honoured) and runs one at a time.
        on_result: called with (case, trajectory) as each case finishes.
        agent_kwargs: extra `Agent` keyword arguments (loop policies ...).
        grade: grade each trajectory as `run_case` does (a call or state grade says why, in its metrics).

    Returns:
        One trajectory per case, in input order.
    """
    from concurrent.futures import ThreadPoolExecutor

    normalized = [_as_case(c) for c in cases]
    api = getattr(handle, "backend", None) == "api"
    if concurrency is None:  # not asked: as many as the handle allows
        concurrency = RunConfig.concurrency if api else 1
    if concurrency > 1 and not api:
        warnings.warn(
            f"run_batch: {type(handle).__name__} (backend {getattr(handle, 'backend', None)!r}) is not an API "
            "handle; running cases one at a time (local backends are not thread-safe).",
            stacklevel=2,
        )
        concurrency = 1

    def one(case: FailureCase) -> Trajectory:
        try:
            tools = list(tools_factory(case))
        except Exception as exc:  # keep the batch alive; the error is recorded on the case
            trajectory = error_trajectory(case, exc)
        else:
            trajectory = run_case(
                handle,
                case,
                tools,
                grade=grade,
                codec=codec,
                max_turns=max_turns,
                system=system,
                **(agent_kwargs or {}),
            )
        if on_result is not None:
            on_result(case, trajectory)
        return trajectory

    if concurrency <= 1 or len(normalized) <= 1:
        return [one(c) for c in normalized]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(normalized))) as pool:
        return list(pool.map(one, normalized))

"""A judge's work handed to the workers: `evalrx diagnose RUN --judge SPEC --queue` and the app's "Diagnose with
a judge".

    config = JudgeConfig("gpt-4o-mini", base_url="http://127.0.0.1:8000/v1", api_key_env="JUDGE_KEY").checked()
    ids = judge_list_targets(run_id=3)                       # the run's failed trajectories
    print(estimate_judge(config, ids).line())                # what it may cost, before anything is asked
    job_id = queue_judge(config, ids, run_id=3)              # a worker runs it (`evalrx.runner.handlers.judge`)

The job holds the judge's spec, backend, base URL and the NAME of the environment variable with its key; the
worker reads the key from its own environment and sends it only to hosts its `EVALRX_KEY_HOSTS` allows, as it
does for queued API runs (`evalrx.runner.keys`). It judges with `judge_trajectories` (the cache, the checks and
the storing are the same as in the CLI's own process), `concurrency` calls at a time on the api backend,
recording each trajectory's outcome on the job as it goes and stopping between trajectories when cancelled
(`evalrx.runner.handlers.judge`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Optional, Sequence

from evalrx.core.secrets import is_env_name
from evalrx.diagnosis.judge import MAX_ANSWER_TOKENS, MAX_STEP_CHARS, MAX_STEPS
from evalrx.store import Store, clean_url, enqueue_judge_job, resolve, stored_run

log = logging.getLogger("evalrx.worker")  # the worker runs these: its log

BACKENDS = ("api", "hf_local")
MAX_CONCURRENCY = 64  # RunConfig's range
ESTIMATE_SAMPLE = 200  # prompts built for an estimate; a longer list is extrapolated from an even sample
CHARS_PER_TOKEN = 4  # rough, for any tokenizer: an estimate, said so
# What a job may set of the judge's budget: each setting's (lowest, highest, the judge's default where unset).
JUDGE_BUDGET = {
    "max_new_tokens": (8, 8192, MAX_ANSWER_TOKENS),
    "max_steps": (2, 10_000, MAX_STEPS),
    "max_step_chars": (40, 100_000, MAX_STEP_CHARS),
}


@dataclasses.dataclass
class JudgeConfig:
    """Which judge a queued job asks, from the form or the command line to the worker.

    Attributes:
        spec: the judge's model spec (or alias).
        backend: "api" or "hf_local"; None: api for API-only specs, else hf_local.
        base_url: the api backend's OpenAI-compatible server (None: the worker's `OPENAI_BASE_URL`, else OpenAI).
        api_key_env: the NAME of the environment variable holding the key, read by the worker (None: the
            worker's own `OPENAI_API_KEY`, where its `EVALRX_KEY_HOSTS` allows the host).
        timeout: api backend: seconds one call may take.
        retries: api backend: tries after the first.
        with_findings: show the judge what the other sources found (the prompt variant `with_findings`).
        concurrency: calls in flight at once on the api backend (a local judge asks one at a time).
        max_new_tokens, max_steps, max_step_chars: see `limits`.
        strategy: how the judge reads each log (`evalrx.diagnosis.judge.STRATEGIES`; None: all_at_once). Kept
            in the job's options where it is not the default.
    """

    spec: str
    backend: Optional[str] = None
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None
    timeout: Optional[float] = None
    retries: Optional[int] = None
    with_findings: bool = False
    concurrency: int = 1
    max_new_tokens: Optional[int] = None
    max_steps: Optional[int] = None
    max_step_chars: Optional[int] = None
    strategy: Optional[str] = None

    def limits(self) -> dict:
        """The answer's token limit and how much of each trajectory the prompt shows, where set
        (`judge_trajectories`' keywords; the judge's defaults elsewhere): smaller for a small local judge."""
        return {
            k: v
            for k, v in (
                ("max_new_tokens", self.max_new_tokens),
                ("max_steps", self.max_steps),
                ("max_step_chars", self.max_step_chars),
            )
            if v is not None
        }

    def checked(self) -> "JudgeConfig":
        """The same config with the spec's canonical key and the backend filled in.

        Raises:
            ValueError: one line: an unknown spec, a backend it cannot run on, an api-only setting on a local
                judge, a URL carrying credentials, a key variable that is not a variable's name, a bad budget.
        """
        from evalrx.diagnosis.judge import DEFAULT_STRATEGY, STRATEGIES
        from evalrx.models import resolve_spec_key
        from evalrx.models.backends.api_http import check_call_budget
        from evalrx.specs import get_spec

        if not str(self.spec or "").strip():
            raise ValueError("name the judge's model spec, e.g. gpt-4o-mini")
        spec = get_spec(resolve_spec_key(str(self.spec)))
        backend = self.backend or ("api" if spec.api_only else "hf_local")
        if backend not in BACKENDS:
            raise ValueError(f"a judge runs on {' or '.join(BACKENDS)}, not {backend!r}")
        if spec.api_only and backend != "api":
            raise ValueError(f"{spec.key} is API-only: judge with it on the api backend (with your server's URL)")
        base_url = (self.base_url or "").strip() or None
        key_env = (self.api_key_env or "").strip() or None
        if backend != "api":
            given = [
                name
                for name, value in (
                    ("a base URL", base_url),
                    ("a key variable", key_env),
                    ("a timeout", self.timeout),
                    ("retries", self.retries),
                )
                if value is not None
            ]
            if given:
                raise ValueError(f"{', '.join(given)}: for the api backend only, not {backend}")
        if base_url is not None:
            if not re.match(r"https?://[^/\s]+", base_url):
                raise ValueError(f"the base URL must start with http:// or https://, not {base_url[:80]!r}")
            if clean_url(base_url) != base_url:
                raise ValueError(
                    "the base URL carries credentials (user:password@ or a key in its query): "
                    "put the key in an environment variable and name it instead"
                )
        if key_env is not None and not is_env_name(key_env):
            raise ValueError(
                "the key's variable must be the NAME of an environment variable (letters, digits and _), "
                "never the key itself"
            )
        if self.timeout is not None:
            check_call_budget(self.timeout, 0)
        if self.retries is not None:
            check_call_budget(1.0, self.retries)
        for name, (low, high, _) in JUDGE_BUDGET.items():
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
            ):
                raise ValueError(f"{name} must be a whole number from {low} to {high}, not {value!r}")
        strategy = self.strategy or None
        if strategy is not None and strategy not in STRATEGIES:
            raise ValueError(f"the judge's strategy must be one of {', '.join(STRATEGIES)}, not {str(strategy)[:40]!r}")
        concurrency = self.concurrency
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise ValueError(f"concurrency must be a whole number from 1 to {MAX_CONCURRENCY}, not {concurrency!r}")
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be from 1 to {MAX_CONCURRENCY}, not {concurrency}")
        return dataclasses.replace(
            self,
            spec=spec.key,
            backend=backend,
            base_url=base_url,
            api_key_env=key_env,
            with_findings=bool(self.with_findings),
            strategy=None if strategy == DEFAULT_STRATEGY else strategy,
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "JudgeConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(data).items() if k in names})


@dataclasses.dataclass
class JudgeEstimate:
    """What judging a list may cost: prompts from `build_prompt` (characters / 4) and the answer limit, for the
    trajectories the cache cannot answer (extrapolated from `sampled` prompts on a long list)."""

    trajectories: int
    cached: int
    prompt_tokens: int
    answer_tokens: int
    max_answer_tokens: int
    sampled: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.answer_tokens

    def line(self) -> str:
        """The estimate in one line of plain text."""
        ask = self.trajectories - self.cached
        many = "trajectory" if self.trajectories == 1 else "trajectories"
        bits = [f"about {self.tokens:,} tokens for {self.trajectories:,} {many}"]
        if self.cached:
            bits.append(f"{self.cached:,} already judged by this judge (free, from the cache)")
        bits.append(
            f"{ask:,} to ask: prompts about {self.prompt_tokens:,} (characters / {CHARS_PER_TOKEN}), "
            f"answers up to {self.answer_tokens:,} ({self.max_answer_tokens:,} each)"
        )
        bits.append("an answer that fails its checks is asked again once, up to twice the cost")
        if self.sampled < self.trajectories:
            bits.append(f"estimated from {self.sampled:,} of them")
        return "; ".join(bits)


def run_concurrency(run_id: Optional[int], *, store: "Store | str | None" = None) -> int:
    """The run's own concurrency (its API calls in flight), what its judge uses by default; 1 without a run."""
    if run_id is None:
        return 1
    try:
        return max(1, min(MAX_CONCURRENCY, int(stored_run(run_id, store=store).concurrency)))
    except Exception:  # an imported run's config: no concurrency of its own
        return 1


def judge_list_targets(
    *,
    run_id: Optional[int] = None,
    filters: Optional[dict] = None,
    trajectory_ids: Optional[Sequence[int]] = None,
    include_passing: bool = False,
    store: "Store | str | None" = None,
) -> "list[int]":
    """The trajectories a judge reads: a run's failed ones (`judge_targets`), those of a filtered list
    (`list_trajectories` filters) or of `trajectory_ids` that failed; with `include_passing`, the passing ones too.
    Never errored ones."""
    from evalrx.runner.judging import judge_targets
    from evalrx.store import matching_ids

    st = resolve(store)
    if trajectory_ids is not None:
        return judge_targets(run_id, trajectory_ids=trajectory_ids, include_passing=include_passing, store=st)
    if filters is None:
        return judge_targets(run_id, include_passing=include_passing, store=st)
    chosen = matching_ids(store=st, **filters)
    run = filters.get("run_id") if isinstance(filters.get("run_id"), int) else None
    return judge_targets(run, trajectory_ids=chosen, include_passing=include_passing, store=st)


def estimate_judge(
    config: JudgeConfig, trajectory_ids: Sequence[int], *, store: "Store | str | None" = None
) -> JudgeEstimate:
    """How many tokens judging `trajectory_ids` with `config` may take (see `JudgeEstimate`); asks no model."""
    from evalrx.diagnosis.judge import DEFAULT_STRATEGY, MAX_ANSWER_TOKENS, build_prompt, verdict_key
    from evalrx.diagnosis.judge_strategies import question_count
    from evalrx.runner.diagnose import JUDGE, stored_case
    from evalrx.store import cached_verdict, get_trajectory, list_kinds

    st = resolve(store)
    ids = list(trajectory_ids)
    step = max(1, -(-len(ids) // ESTIMATE_SAMPLE))
    sample = ids[::step]
    kinds = [(k.key, k.definition) for k in list_kinds(store=st)]
    judge_id = {"spec": config.spec, "backend": config.backend}
    strategy = config.strategy or DEFAULT_STRATEGY
    chars = cached = built = questions = 0
    for tid in sample:
        detail = get_trajectory(tid, store=st)
        if detail is None:
            continue
        built += 1
        traj = detail.trajectory
        findings = [d for d in detail.diagnoses if d.source != JUDGE] if config.with_findings else None
        shown = {k: v for k, v in config.limits().items() if k != "max_new_tokens"}
        messages = build_prompt(traj, stored_case(detail.case), kinds, findings=findings, **shown)
        if cached_verdict(verdict_key(traj, messages, judge_id, strategy), store=st) is not None:
            cached += 1
        else:
            # Another strategy asks several questions, each showing up to the whole log: counted at most.
            asks = question_count(traj, strategy)
            questions += asks
            chars += asks * sum(len(str(m.get("content") or "")) for m in messages)
    scale = len(ids) / built if built else 0.0
    n_cached = min(len(ids), round(cached * scale))
    asked = round(questions * scale) if strategy != DEFAULT_STRATEGY else len(ids) - n_cached
    return JudgeEstimate(
        trajectories=len(ids),
        cached=n_cached,
        prompt_tokens=round(chars * scale / CHARS_PER_TOKEN),
        answer_tokens=asked * (config.max_new_tokens or MAX_ANSWER_TOKENS),
        max_answer_tokens=config.max_new_tokens or MAX_ANSWER_TOKENS,
        sampled=built,
    )


def queue_judge(
    config: JudgeConfig,
    trajectory_ids: Sequence[int],
    *,
    run_id: Optional[int] = None,
    scope: str = "",
    store: "Store | str | None" = None,
) -> int:
    """Queue a judge job over `trajectory_ids` for the workers; returns its id.

    Raises:
        ValueError: a bad config (`JudgeConfig.checked`), or no trajectory to judge.
    """
    checked = config.checked()
    ids = list(dict.fromkeys(int(i) for i in trajectory_ids))
    if not ids:
        raise ValueError("no trajectory to judge")
    options: dict = {k: v for k, v in (("timeout", checked.timeout), ("max_retries", checked.retries)) if v is not None}
    options.update(checked.limits())
    if checked.strategy is not None:  # all_at_once, the default, is the absence of one (as jobs always had)
        options["strategy"] = checked.strategy
    return enqueue_judge_job(
        trajectory_ids=ids,
        spec=checked.spec,
        backend=str(checked.backend),
        run_id=run_id,
        scope=scope or (f"run {run_id}" if run_id is not None else f"{len(ids)} trajectories"),
        base_url=checked.base_url,
        api_key_env=checked.api_key_env,
        with_findings=checked.with_findings,
        concurrency=checked.concurrency,
        options=options,
        store=store,
    )


__all__ = [
    "JUDGE_BUDGET",
    "JudgeConfig",
    "JudgeEstimate",
    "estimate_judge",
    "judge_list_targets",
    "queue_judge",
    "run_concurrency",
]

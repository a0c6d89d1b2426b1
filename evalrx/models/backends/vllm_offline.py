"""vLLM offline backend: fast batched generation, no internals. vllm is imported lazily."""

from __future__ import annotations

import time
from typing import Any

from evalrx.core.capability import Capability
from evalrx.core.model import Model
from evalrx.core.tool import ChatTurn
from evalrx.models.backends.registry import BackendInfo, RuntimeConfig, register_backend
from evalrx.specs import ModelSpec


def _provides(spec: ModelSpec) -> frozenset:
    if spec.api_only:
        return frozenset()
    caps = {Capability.GENERATE, Capability.TOOL_CALLS, Capability.LOGPROBS}
    if spec.vision:
        caps.add(Capability.VISION)
    return frozenset(caps)


class VLLMOfflineModel:
    """A handle over `vllm.LLM`; chat renders tools through the model's own template.

    `LLM(...)` loads the weights and warms the engine up before it returns; `load_ms`
    records that time, apart from any step's latency.
    """

    backend = "vllm_offline"

    def __init__(self, spec: ModelSpec, runtime: RuntimeConfig) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:
            raise ImportError(
                "The 'vllm_offline' backend needs vLLM, which is not installed. "
                "Install it with `pip install vllm` (Linux with a CUDA GPU), or use backend "
                "'hf_local' (CPU/GPU, internals) or 'api' (any OpenAI-compatible server, e.g. `vllm serve`)."
            ) from exc
        self.spec = spec
        self.runtime = runtime
        self.capabilities = _provides(spec)
        t0 = time.perf_counter()
        self._llm = LLM(model=spec.hf_repo, dtype=runtime.dtype or "auto")
        self.load_ms = round((time.perf_counter() - t0) * 1000.0, 3)
        self._params = SamplingParams(temperature=runtime.temperature, max_tokens=runtime.max_new_tokens, logprobs=1)

    def chat(self, messages: list[dict], tools: "list[dict] | None" = None, **kw: Any) -> ChatTurn:
        out = self._llm.chat(messages, self._params, tools=tools or None, use_tqdm=False)[0]
        gen = out.outputs[0]
        logprobs = None
        if gen.logprobs:
            logprobs = [
                {"token": lp[tid].decoded_token, "logprob": float(lp[tid].logprob)}
                for tid, lp in zip(gen.token_ids, gen.logprobs)
            ]
        return ChatTurn(
            text=gen.text,
            finish_reason=gen.finish_reason,
            usage={"prompt_tokens": len(out.prompt_token_ids), "completion_tokens": len(gen.token_ids)},
            logprobs=logprobs,
        )

    def __repr__(self) -> str:
        return f"VLLMOfflineModel({self.spec.key!r})"


def _build(spec: ModelSpec, runtime: RuntimeConfig, want: frozenset) -> Model:
    return VLLMOfflineModel(spec, runtime)


register_backend(
    BackendInfo(
        name="vllm_offline",
        description="vLLM in-process: fast batched generation with log-probs, no internals.",
        provides=_provides,
        build=_build,
        install_hint="pip install vllm",
    )
)

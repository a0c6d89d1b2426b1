"""The `hf_local` backend: a transformers model in this process, with full access to its internals.

`HFLocalModel` is what `evalrx.load(..., backend="hf_local")` and `evalrx.wrap(model, tok)`
return. It chats (greedy, deterministic by default, raw text with `<tool_call>` blocks
left in) and runs teacher-forced forward passes that return logits, hidden states and,
under eager attention, attention maps. torch and transformers are imported inside
functions so registering the backend stays light.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Optional

from evalrx.core.capability import Capability, CapabilityError
from evalrx.core.content import content_text, has_picture
from evalrx.core.model import ContextOverflow
from evalrx.core.tool import ChatTurn
from evalrx.internals import (
    CaptureRecorder,
    ForwardOutput,
    attention_implementation_of,
    cache_argument,
    capture_kinds,
    discover,
    output_cache,
    rows_rebuildable,
    set_attention_implementation,
    teacher_forced_forward,
)
from evalrx.models.backends.registry import BackendInfo, RuntimeConfig, register_backend
from evalrx.models.checkpoints import CheckpointNotFoundError, fix_hint, locate_checkpoint
from evalrx.models.runtime_tuning import page_in, resolve_device, resolve_dtype, settle_cpu_threads
from evalrx.specs import ModelSpec, WeightsNotInstalledError, resolve_weights

# Capabilities every live causal LM gives in process, whatever its attention kernel.
_ALWAYS = frozenset({Capability.GENERATE, Capability.LOGPROBS, Capability.LOGITS, Capability.HIDDEN_STATES})

_ATTENTION_HINT = (
    "Load it with want=['attention'] (evalrx.load(..., want=['attention']) or "
    "evalrx.wrap(model, tokenizer, want=['attention'])) so it runs eager attention."
)


def _elapsed_ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


def _is_vision_model(model: Any) -> bool:
    return getattr(getattr(model, "config", None), "vision_config", None) is not None


def _text_only(messages: list[dict]) -> list[dict]:
    """Fold text content blocks into plain strings (text-model templates expect strings)."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            m = dict(m, content=content_text(content))
        out.append(m)
    return out


def _decode_generated(tokenizer: Any, ids: list) -> str:
    """Generated text without special tokens (end of turn, padding), but with the tool-call control
    tokens of the registered codecs (`[TOOL_CALLS]`, `<|python_tag|>`) kept: they belong to the
    call, and without them the stored turn no longer re-tokenizes into the ids the model generated."""
    from evalrx.models.toolcodec import CODECS

    keep = {t for factory in CODECS.values() for t in getattr(factory, "control_tokens", ())}
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    special = {i for i, t in added.items() if getattr(t, "special", False)} | set(tokenizer.all_special_ids)
    kept = {i for i in special if getattr(added.get(i), "content", None) in keep}
    if kept.isdisjoint(ids):
        return tokenizer.decode(ids, skip_special_tokens=True)
    return tokenizer.decode([i for i in ids if i in kept or i not in special], skip_special_tokens=False)


def _append_ids(enc: dict, ids: list) -> dict:
    """Model inputs with `ids` appended to the sequence (an assistant prefill after the generation prompt).

    Per-token inputs (`attention_mask`, a processor's token type ids) grow with it: the mask
    with ones, the others with zeros (text tokens).
    """
    import torch

    input_ids = enc["input_ids"]
    tail = torch.tensor([ids], dtype=input_ids.dtype, device=input_ids.device)
    out = dict(enc)
    for key, value in enc.items():
        if not hasattr(value, "shape") or tuple(value.shape) != tuple(input_ids.shape):
            continue
        if key == "input_ids":
            fill = tail
        elif key == "attention_mask":
            fill = torch.ones_like(tail, dtype=value.dtype)
        else:
            fill = torch.zeros_like(tail, dtype=value.dtype)
        out[key] = torch.cat([value, fill], dim=1)
    return out


_NO_RECORDER = contextlib.nullcontext()
# Shorter shared prefixes are not worth keeping a cache for (a chat template's header alone).
_MIN_PREFIX_TOKENS = 32


def _shared_prefix(a: Any, b: Any) -> int:
    """How many leading ids two 1-D id tensors share."""
    n = min(int(a.shape[0]), int(b.shape[0]))
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0, 0]) if differ.numel() else n


def _croppable(cache: Any) -> bool:
    """A plain full-attention DynamicCache: one whose positions can be cut back to a prefix exactly (a
    sliding-window or linear-attention layer keeps less than every position, so it cannot)."""
    if type(cache).__name__ != "DynamicCache" or not hasattr(cache, "crop"):
        return False
    layers = getattr(cache, "layers", None)
    return layers is None or all(type(layer).__name__ == "DynamicLayer" for layer in layers)


class HFLocalModel:
    """A transformers causal LM and its tokenizer, with chat and white-box forward passes.

    Build it with `evalrx.load(key, checkpoint=...)`, `HFLocalModel.from_spec(...)` or
    `evalrx.wrap(model, tokenizer)` (`HFLocalModel.from_loaded`).

    Attributes:
        spec: the `ModelSpec` it was built from (synthesized by `from_loaded`).
        model: the live transformers model.
        tokenizer: its tokenizer (the processor's tokenizer for a VLM).
        processor: the multimodal processor, or `None`.
        runtime: decoding limits and placement.
        load_ms: wall-clock milliseconds spent building this handle: for `from_spec`,
            reading the tokenizer and the weights into memory and placing them; for
            `from_loaded`, paging the given model's weights in. Never part of a step's
            latency (`None` for a handle built directly).
    """

    backend = "hf_local"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        spec: ModelSpec,
        runtime: Optional[RuntimeConfig] = None,
        processor: Any = None,
    ) -> None:
        if tokenizer is None and processor is None:
            raise ValueError("HFLocalModel needs a tokenizer (or a processor) next to the model.")
        self.model = model
        self.processor = processor
        self.tokenizer: Any = tokenizer if tokenizer is not None else getattr(processor, "tokenizer", None)
        self.spec = spec
        self.runtime = runtime or RuntimeConfig()
        self.load_ms: Optional[float] = None
        self.cpu_threads: Optional[dict] = None  # what `from_spec` chose for torch's CPU threads, and why
        self._parts: Any = None
        self._head_reproduces_logits: Optional[bool] = None  # see `CaptureRecorder.check_head`
        self._rows_after_ok: Optional[bool] = None  # see `attention_rows_rebuildable`
        # The last plain chat's ids and KV cache (`RuntimeConfig.prefix_cache`); taken out under the lock, so
        # two threads never extend one cache.
        self._prefix: Optional[tuple[Any, Any]] = None
        self._prefix_lock = threading.Lock()
        # Rendered chat-template texts by conversation prefix: a case's generation and its analyses render
        # the same prefixes (`render`), so each is rendered once.
        self._renders: "OrderedDict[tuple, str]" = OrderedDict()
        self._renders_lock = threading.Lock()

    # ----------------------------------------------------------------- building

    @classmethod
    def from_spec(
        cls, spec: ModelSpec, runtime: Optional[RuntimeConfig] = None, want: Iterable[Capability] = ()
    ) -> "HFLocalModel":
        """Load the spec's weights (`resolve_weights`: `hf_repo`, or a file of its `weights_package`)
        from a local directory, a GGUF file (converted once, cached) or the hub cache.

        On CPU the intra-op thread count is settled here too (`settle_cpu_threads`), and a
        spec's `chat_template` replaces the tokenizer's.

        Raises:
            CheckpointNotFoundError: the checkpoint cannot be found, or the package holding
                it is not installed (one clear message, with the install command).
        """
        import torch  # noqa: F401  (fail here, not deep inside transformers, when torch is missing)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        t0 = time.perf_counter()
        runtime = runtime or RuntimeConfig()
        want = frozenset(Capability.parse(w) for w in want)
        try:
            repo = resolve_weights(spec)
        except WeightsNotInstalledError as exc:
            raise CheckpointNotFoundError(str(exc)) from None
        name, where = locate_checkpoint(repo)
        device = resolve_device(runtime)
        kwargs: dict = dict(where, dtype=resolve_dtype(runtime, device), trust_remote_code=runtime.trust_remote_code)
        attn = "eager" if Capability.ATTENTION in want else runtime.attn_implementation
        if attn:
            kwargs["attn_implementation"] = attn
        if device == "auto":
            kwargs["device_map"] = "auto"
        common = dict(where, trust_remote_code=runtime.trust_remote_code)
        model: Any  # a causal LM or an image-text-to-text one
        try:
            processor = None
            if spec.vision:
                from transformers import AutoModelForImageTextToText, AutoProcessor

                processor = AutoProcessor.from_pretrained(name, **common)
                tokenizer = getattr(processor, "tokenizer", None)
                model = AutoModelForImageTextToText.from_pretrained(name, **kwargs)
            else:
                tokenizer = AutoTokenizer.from_pretrained(name, **common)
                model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
        except OSError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            is_path = Path(name).is_dir()
            raise CheckpointNotFoundError(
                f"Could not load {repo!r}: {first}", fix_hint(repo or "", is_path), repo=repo or "", is_path=is_path
            ) from None
        if device != "auto":
            model = model.to(device)
        model.eval()
        if spec.chat_template:
            for owner in (tokenizer, processor):
                if owner is not None:
                    owner.chat_template = spec.chat_template
        page_in(model)
        threads = settle_cpu_threads(model, runtime) if device == "cpu" else None
        handle = cls(model, tokenizer, spec, runtime, processor=processor)
        handle.cpu_threads = threads
        handle.load_ms = _elapsed_ms(t0)
        return handle

    @classmethod
    def from_loaded(
        cls,
        model: Any,
        tokenizer: Any = None,
        *,
        runtime: Optional[RuntimeConfig] = None,
        want: Iterable[Capability] = (),
    ) -> "HFLocalModel":
        """Wrap an already-loaded model and its tokenizer or processor (`evalrx.wrap`).

        The spec is synthesized from the model's config. Wanting ATTENTION switches a
        non-eager model to eager attention in place. Weights still memory-mapped from
        their checkpoint are paged in here (`load_ms`), not in the first chat.
        """
        t0 = time.perf_counter()
        want = frozenset(Capability.parse(w) for w in want)
        cfg = getattr(model, "config", None)
        name = (getattr(cfg, "name_or_path", "") or "").strip()
        processor = None
        if tokenizer is not None and hasattr(tokenizer, "image_processor"):
            processor, tokenizer = tokenizer, getattr(tokenizer, "tokenizer", None)
        if tokenizer is None and processor is None:
            if not name:
                raise ValueError("evalrx.wrap(model) needs the tokenizer: call evalrx.wrap(model, tokenizer).")
            from transformers import AutoTokenizer

            where_name, where = locate_checkpoint(name)
            tokenizer = AutoTokenizer.from_pretrained(where_name, **where)
        if Capability.ATTENTION in want and attention_implementation_of(model) != "eager":
            set_attention_implementation(model, "eager")
        spec = ModelSpec(
            key=name or type(model).__name__,
            family=getattr(cfg, "model_type", None) or "unknown",
            hf_repo=name or None,
            tool_call_style="hermes",
            vision=_is_vision_model(model) and processor is not None,
            notes="wrapped with evalrx.wrap",
        )
        page_in(model)
        handle = cls(model, tokenizer, spec, runtime or RuntimeConfig(), processor=processor)
        handle.load_ms = _elapsed_ms(t0)
        return handle

    # ------------------------------------------------------------- properties

    @property
    def captures_attention(self) -> bool:
        """Whether `chat(capture=["attention"])` can keep attention rows: under eager attention, or under sdpa
        (the newest position's row computed beside it, `evalrx.internals.LAST_ROW_ATTENTION`)."""
        return attention_implementation_of(self.model) in ("eager", "sdpa")

    @property
    def capabilities(self) -> frozenset:
        """What this live model provides (read from the model, not the spec)."""
        caps = set(_ALWAYS)
        template_owner = self.processor if self.processor is not None else self.tokenizer
        if getattr(template_owner, "chat_template", None) or getattr(self.tokenizer, "chat_template", None):
            caps.add(Capability.TOOL_CALLS)
        if attention_implementation_of(self.model) == "eager":
            caps.add(Capability.ATTENTION)
        if self.processor is not None and _is_vision_model(self.model):
            caps.add(Capability.VISION)
        return frozenset(caps)

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    @property
    def parts(self) -> Any:
        """Discovered decoder layers, final norm and unembedding (`evalrx.internals.ModelParts`), cached."""
        if self._parts is None:
            self._parts = discover(self.model)
        return self._parts

    @property
    def num_layers(self) -> int:
        return self.parts.num_layers

    @property
    def attention_rows_rebuildable(self) -> bool:
        """Whether attention rows can be rebuilt from this model's KV cache (`evalrx.internals.rows_rebuildable`),
        checked once per handle."""
        if self._rows_after_ok is None:
            self._rows_after_ok = rows_rebuildable(self.model, self.parts.layers, multimodal=self.processor is not None)
        return self._rows_after_ok

    # ---------------------------------------------------------------- text I/O

    def _template_owner(self) -> Any:
        return self.processor if self.processor is not None else self.tokenizer

    def _prepare_messages(self, messages: list[dict], where: str) -> list[dict]:
        if has_picture(messages):
            if Capability.VISION not in self.capabilities:
                raise CapabilityError(
                    analyzer=f"{where} with image content",
                    model=f"{self.spec.key} on hf_local",
                    missing={Capability.VISION},
                    hint="This spec has no VISION: use a vision-language spec or drop the image blocks.",
                )
            return list(messages)
        return _text_only(messages) if self.processor is None else list(messages)

    def render(
        self, messages: list[dict], tools: Optional[list[dict]] = None, add_generation_prompt: bool = False
    ) -> str:
        """The chat-template text for `messages` (and `tools`), exactly what `chat`/`forward` tokenize.

        For a VLM each image appears here as one placeholder token, which the processor
        expands to the image's patch tokens in `encode_messages`.
        """
        msgs = self._prepare_messages(messages, "render")
        owner = self._template_owner()
        key = _render_key(owner, msgs, tools, add_generation_prompt)
        with self._renders_lock:  # a run's cases may share the handle across threads
            text = self._renders.get(key) if key is not None else None
            if key is not None and text is not None:
                self._renders.move_to_end(key)
                return text
        text = owner.apply_chat_template(msgs, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False)
        if key is not None and isinstance(text, str):
            with self._renders_lock:
                self._renders[key] = text
                while len(self._renders) > RENDER_CACHE_SIZE:
                    self._renders.popitem(last=False)
        return text

    def encode_messages(
        self, messages: list[dict], tools: Optional[list[dict]] = None, add_generation_prompt: bool = False
    ) -> dict:
        """Model inputs (`input_ids`, `attention_mask`, pixel values for a VLM) for a conversation."""
        if self.processor is None and not has_picture(messages):  # a text model: the rendered text, tokenized
            text = self.render(messages, tools, add_generation_prompt)
            enc = self.tokenizer(text, add_special_tokens=False, return_tensors="pt")
            return {k: v.to(self.device) if hasattr(v, "to") else v for k, v in dict(enc).items()}
        msgs = self._prepare_messages(messages, "encode")
        enc = self._template_owner().apply_chat_template(
            msgs,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
        )
        return {k: v.to(self.device) if hasattr(v, "to") else v for k, v in dict(enc).items()}

    def tokenize(
        self,
        text: Optional[str] = None,
        *,
        messages: Optional[list[dict]] = None,
        tools: Optional[list[dict]] = None,
        add_generation_prompt: bool = False,
        add_special_tokens: bool = True,
    ) -> Any:
        """Token ids ``[1, T]`` on the model's device for raw `text` or a templated conversation."""
        if (text is None) == (messages is None):
            raise ValueError("tokenize() takes exactly one of text= or messages=.")
        if messages is not None:
            return self.encode_messages(messages, tools, add_generation_prompt)["input_ids"]
        enc = self.tokenizer(text, return_tensors="pt", add_special_tokens=add_special_tokens)
        return enc["input_ids"].to(self.device)

    def _eos_ids(self) -> list[int]:
        ids: list[int] = []
        for source in (getattr(self.model, "generation_config", None), self.tokenizer):
            value = getattr(source, "eos_token_id", None)
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(v, int) and v not in ids:
                    ids.append(v)
        return ids

    def context_length(self) -> Optional[int]:
        """The model's context window in tokens: the smaller of its config's positions and the spec's length."""
        config = getattr(self.model, "config", None)
        positions = getattr(config, "max_position_embeddings", None) or getattr(
            getattr(config, "text_config", None), "max_position_embeddings", None
        )
        known = [n for n in (positions, getattr(self.spec, "context_length", None)) if isinstance(n, int) and n > 0]
        return min(known) if known else None

    def chat(
        self,
        messages: list[dict],
        tools: Optional[list[dict]] = None,
        *,
        max_new_tokens: Optional[int] = None,
        logprobs: bool = False,
        temperature: Optional[float] = None,
        capture: Any = False,
        prefill: Optional[str] = None,
    ) -> ChatTurn:
        """Generate the next assistant turn.

        Args:
            messages: OpenAI-style chat messages (content may be text/image blocks).
            tools: OpenAI tool schemas, rendered by the chat template.
            max_new_tokens: generation limit (default `runtime.max_new_tokens`).
            logprobs: also return each generated token's log-probability under the model (fp32).
            temperature: > 0 samples; default `runtime.temperature` (0 = greedy, deterministic).
            capture: keep what this generate call computed at the positions that predict its
                tokens, on `ChatTurn.capture` (a `GenerationCapture`): True, or kinds from
                `evalrx.internals.CAPTURE_KINDS` ("hidden_states": every layer; "attention": head-averaged
                rows, only under eager attention, else a note says why not).
            prefill: text the turn is forced to start with (an assistant prefill, e.g. a codec's
                `call_prefix`): its tokens follow the generation prompt and the model writes the
                rest. The returned text starts with it; its tokens count as completion tokens and
                against `max_new_tokens`; logprobs cover the generated tokens only. Not with `capture`.

        Returns:
            A `ChatTurn` with the raw generated text (tool-call markup kept, control tokens
            stripped), `tool_calls=[]`, finish_reason "stop"/"length", usage, optional logprobs
            and the optional capture.

        Raises:
            CapabilityError: image content sent to a model without VISION.
            ValueError: an unknown capture kind, or `prefill` with `capture`.
        """
        import torch

        kinds = capture_kinds(capture)
        if prefill and kinds:
            raise ValueError("chat(): prefill= cannot be combined with capture= (the capture reads generated tokens).")

        enc = self.encode_messages(messages, tools, add_generation_prompt=True)
        forced: list = []
        if prefill:
            forced = self.tokenizer(prefill, add_special_tokens=False)["input_ids"]
            enc = _append_ids(enc, forced)
        prompt_len = int(enc["input_ids"].shape[1])
        # The prefill is part of the turn: it counts against the limit, as against the completion tokens.
        budget = max(1, int(max_new_tokens or self.runtime.max_new_tokens) - len(forced))
        context = self.context_length()
        if context and prompt_len >= context:  # nothing left to generate in: say so instead of truncating
            raise ContextOverflow(prompt_len, context)
        eos = self._eos_ids()
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else (eos[0] if eos else 0)
        temp = self.runtime.temperature if temperature is None else temperature
        sampling = (
            dict(do_sample=True, temperature=float(temp), top_k=None, top_p=None)
            if temp and temp > 0
            else dict(do_sample=False, temperature=None, top_k=None, top_p=None)
        )
        recorder = CaptureRecorder(self, kinds, head_reproduces_logits=self._head_reproduces_logits) if kinds else None
        # A capture keeps only the prompt's last position and the generated ones, which a reused prefix still
        # computes; an image's tokens are not ids, so a VLM's prompt is prefilled in full.
        reuse = self.runtime.prefix_cache and set(enc) <= {"input_ids", "attention_mask"}
        cached = self._take_prefix(enc["input_ids"][0]) if reuse else {}
        with torch.no_grad(), recorder or _NO_RECORDER:
            out = self.model.generate(
                **enc,
                **cached,
                max_new_tokens=budget,
                pad_token_id=pad,
                eos_token_id=eos or None,
                # Explicit so a checkpoint's generation_config (beams, repetition penalty) cannot
                # make "greedy" differ from the argmax of the logits the analyzers read.
                num_beams=1,
                repetition_penalty=1.0,
                no_repeat_ngram_size=0,
                min_new_tokens=0,
                return_dict_in_generate=True,
                output_logits=bool(logprobs) or (recorder is not None and recorder.wants_logits),
                **sampling,
            )
            new_ids = out.sequences[0, prompt_len:].tolist()
            finish = "stop" if new_ids and new_ids[-1] in eos else "length"
            if reuse:
                self._keep_prefix(out)
            turn_capture = None
            if recorder is not None:
                turn_capture = recorder.finish(enc, out, new_ids, finish)
                self._head_reproduces_logits = recorder.head_reproduces_logits
        text = _decode_generated(self.tokenizer, forced + new_ids)
        lp = None
        if logprobs:
            lp = []
            for tid, step_logits in zip(new_ids, out.logits):
                value = torch.log_softmax(step_logits[0].float(), dim=-1)[tid].item()
                lp.append({"token": self.tokenizer.decode([tid]), "token_id": int(tid), "logprob": float(value)})
        return ChatTurn(
            text=text,
            tool_calls=[],
            finish_reason=finish,
            usage={"prompt_tokens": prompt_len - len(forced), "completion_tokens": len(forced) + len(new_ids)},
            logprobs=lp,
            capture=turn_capture,
        )

    def _take_prefix(self, ids: Any) -> dict:
        """The kept KV cache, cut back to the prefix it shares with `ids` (at least one id left to run), as
        generate's cache argument; empty when nothing worth reusing is kept."""
        with self._prefix_lock:
            kept, self._prefix = self._prefix, None
        if kept is None:
            return {}
        kept_ids, cache = kept
        shared = min(_shared_prefix(kept_ids, ids), int(ids.shape[0]) - 1)
        if shared < _MIN_PREFIX_TOKENS:
            return {}
        cache.crop(shared - cache.get_seq_length())  # negative: drop that many positions from the end
        return {cache_argument(self.model): cache}

    def _keep_prefix(self, out: Any) -> None:
        """Keep this call's cache and the ids it holds (the prompt and all generated ids but the last)."""
        cache = output_cache(out)
        if cache is None or not _croppable(cache):
            return
        held = cache.get_seq_length()
        with self._prefix_lock:
            self._prefix = (out.sequences[0, :held].clone(), cache)

    def clear_prefix_cache(self) -> None:
        """Forget the kept KV cache (`RuntimeConfig.prefix_cache`), freeing its memory."""
        with self._prefix_lock:
            self._prefix = None

    # --------------------------------------------------------------- white box

    def forward(
        self,
        input_ids: Any = None,
        *,
        text: Optional[str] = None,
        messages: Optional[list[dict]] = None,
        tools: Optional[list[dict]] = None,
        add_generation_prompt: bool = False,
        output_hidden_states: bool = True,
        output_attentions: bool = False,
    ) -> ForwardOutput:
        """One teacher-forced forward pass over ids, raw text or a templated conversation.

        The pass itself is `teacher_forced_forward`, the one the analyzers run too.

        Args:
            input_ids: a list of ids, a 1-D or ``[1, T]`` tensor.
            text: raw text, tokenized with the tokenizer's own special tokens.
            messages: a conversation, rendered with the chat template (with `tools`).
            add_generation_prompt: append the assistant header after `messages`.
            output_hidden_states: return the residual stream of every layer.
            output_attentions: return attention maps (needs eager attention).

        Raises:
            CapabilityError: attentions requested from a model not running eager attention.
            ValueError: not exactly one of input_ids / text / messages.
        """
        import torch

        if sum(x is not None for x in (input_ids, text, messages)) != 1:
            raise ValueError("forward() takes exactly one of input_ids, text= or messages=.")
        if output_attentions and Capability.ATTENTION not in self.capabilities:
            raise CapabilityError(
                analyzer="forward(output_attentions=True)",
                model=f"{self.spec.key} (attn_implementation={attention_implementation_of(self.model)!r})",
                missing={Capability.ATTENTION},
                hint=_ATTENTION_HINT,
            )
        extra: dict = {}
        if messages is not None:
            enc = self.encode_messages(messages, tools, add_generation_prompt)
            ids = enc.pop("input_ids")
            extra = {k: v for k, v in enc.items() if k != "attention_mask"}
        elif text is not None:
            ids = self.tokenize(text)
        else:
            ids = input_ids if isinstance(input_ids, torch.Tensor) else torch.tensor(list(input_ids))
            if ids.dim() == 1:
                ids = ids.unsqueeze(0)
            ids = ids.to(self.device)
        return teacher_forced_forward(
            self.model,
            ids,
            output_hidden_states=output_hidden_states,
            parts=self.parts,
            output_attentions=output_attentions,
            inputs=extra,
        )

    def __repr__(self) -> str:
        caps = ",".join(sorted(c.value for c in self.capabilities))
        try:
            where = f"{self.device}, {next(self.model.parameters()).dtype}".replace("torch.", "")
        except StopIteration:  # a model without parameters is only possible in tests
            where = "no parameters"
        return (
            f"HFLocalModel({self.spec.key!r}, family={self.spec.family!r}, {where}, "
            f"attn={attention_implementation_of(self.model)!r}, capabilities=[{caps}])"
        )


def _provides(spec: ModelSpec) -> frozenset:
    if spec.api_only:
        return frozenset()
    return frozenset(Capability) if spec.vision else frozenset(Capability) - {Capability.VISION}


def _build(spec: ModelSpec, runtime: RuntimeConfig, want: frozenset) -> HFLocalModel:
    return HFLocalModel.from_spec(spec, runtime, want)


register_backend(
    BackendInfo(
        "hf_local",
        "transformers in this process: generation plus logits, hidden states and attention",
        _provides,
        _build,
        install_hint="pip install 'evalrx[local]'",
    )
)

__all__ = ["HFLocalModel"]


# Rendered conversation prefixes a handle keeps (`HFLocalModel.render`): a case's turns, and then some.
RENDER_CACHE_SIZE = 64


def _render_key(owner: Any, messages: list, tools: Optional[list], add_generation_prompt: bool) -> Optional[tuple]:
    """What a rendering depends on: the template and the conversation's content (None: not cached, a
    conversation with pictures or something JSON cannot write)."""
    if has_picture(messages):
        return None
    try:
        content = json.dumps([messages, tools], sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return None
    template = getattr(owner, "chat_template", None)
    if not isinstance(template, (str, type(None))):  # a family's templates by name
        template = json.dumps(template, sort_keys=True, default=str)
    return (template, content, bool(add_generation_prompt))

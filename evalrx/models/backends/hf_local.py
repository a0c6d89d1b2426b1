"""The `hf_local` backend: a transformers model in this process, with full access to its internals.

`HFLocalModel` is what `evalrx.load(..., backend="hf_local")` and `evalrx.wrap(model, tok)`
return. It chats (greedy, deterministic by default, raw text with `<tool_call>` blocks
left in) and runs teacher-forced forward passes that return logits, hidden states and,
under eager attention, attention maps. torch and transformers are imported inside
functions so registering the backend stays light.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from evalrx.core.capability import Capability, CapabilityError
from evalrx.core.tool import ChatTurn
from evalrx.models.backends import BackendInfo, RuntimeConfig, register_backend
from evalrx.specs import ModelSpec, WeightsNotInstalledError, resolve_weights

# Capabilities every live causal LM gives in process, whatever its attention kernel.
_ALWAYS = frozenset({Capability.GENERATE, Capability.LOGPROBS, Capability.LOGITS, Capability.HIDDEN_STATES})

_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_TRUTHY = {"1", "true", "yes", "on"}
_ATTENTION_HINT = (
    "Load it with want=['attention'] (evalrx.load(..., want=['attention']) or "
    "evalrx.wrap(model, tokenizer, want=['attention'])) so it runs eager attention."
)


class CheckpointNotFoundError(FileNotFoundError):
    """A checkpoint is neither a local directory nor a hub id available from the cache or a reachable hub."""


@dataclass
class ForwardOutput:
    """One teacher-forced forward pass.

    Attributes:
        input_ids: ``[1, T]`` token ids that were run.
        logits: ``[1, T, V]`` model logits.
        hidden_states: ``L + 1`` tensors ``[1, T, H]``; ``[0]`` is the embedding output,
            ``[i]`` the output of layer ``i - 1``, ``[-1]`` already after the final norm.
            ``None`` when not requested.
        attentions: ``L`` tensors ``[1, heads, T, T]`` when requested, else ``None``.
        cache: the pass's KV cache when requested (what `rebuilt_attention_rows` reads), else ``None``.
    """

    input_ids: Any
    logits: Any
    hidden_states: Optional[tuple] = None
    attentions: Optional[tuple] = None
    cache: Any = None


CAPTURE_KINDS = ("hidden_states", "attention")


@dataclass
class GenerationCapture:
    """What one `chat(..., capture=...)` call kept of its own forward passes, for the white-box analyzers.

    Positions are the turn's own: the prompt holds positions ``0 .. P-1``, generated token ``j``
    sits at ``P + j``. The captured positions are those that predict a generated token:
    ``P - 1`` (the prefill's last position) and each position fed back by a decoding step,
    ``n_positions`` in all (one more when the turn ran out of tokens: the last generated
    token is then run once more, for the end-of-turn token a rebuilt conversation adds).
    Nothing else is kept: no prompt positions, no per-step vocabulary logits (the final
    layer's logits are the unembedding of ``hidden[-1]``, checked once per handle).

    Attributes:
        prompt_ids: the token ids the model was given.
        generated_ids: the ids it generated (its end-of-turn token included when it stopped).
        hidden: ``[L + 1, n, D]`` fp32 on CPU: every layer's residual stream at the captured
            positions (layer 0 the embeddings, layer L after the final norm, as
            ``output_hidden_states`` gives them); None when not captured.
        attention: ``[L, n, P + n - 1]`` fp32 on CPU: each layer's attention row at the captured
            positions, averaged over heads, zero past the row's own length; None when not
            captured (it needs eager attention).
        attn_implementation: the attention kernel generation ran with.
        notes: why something asked for was not captured.
        model_ref: ``id`` of the transformers model that generated (a capture is read only on it).
    """

    prompt_ids: list
    generated_ids: list
    hidden: Any = None
    attention: Any = None
    attn_implementation: Optional[str] = None
    notes: list = field(default_factory=list)
    model_ref: int = 0

    @property
    def first_position(self) -> int:
        """The position of the first captured row (the prompt's last token)."""
        return len(self.prompt_ids) - 1

    @property
    def n_positions(self) -> int:
        """Captured positions (rows of `hidden` / `attention`)."""
        for rows in (self.hidden, self.attention):
            if rows is not None:
                return int(rows.shape[1])
        return 0

    @property
    def fed_ids(self) -> list:
        """The generated ids the captured positions were computed from (each row's own token is fed)."""
        return list(self.generated_ids[: max(0, self.n_positions - 1)])

    @property
    def nbytes(self) -> int:
        return sum(int(t.numel() * t.element_size()) for t in (self.hidden, self.attention) if t is not None)


def _capture_kinds(capture: Any) -> frozenset:
    """The kinds `chat(capture=...)` asks for: True (all), False/None (none), a kind or kinds."""
    if capture is None or capture is False:
        return frozenset()
    if capture is True:
        return frozenset(CAPTURE_KINDS)
    kinds = frozenset([capture] if isinstance(capture, str) else capture)
    unknown = kinds - set(CAPTURE_KINDS)
    if unknown:
        raise ValueError(f"capture= takes True, False or kinds from {list(CAPTURE_KINDS)}; got {sorted(unknown)}")
    return kinds


def _truthy_env(*names: str) -> bool:
    return any(os.environ.get(n, "").strip().lower() in _TRUTHY for n in names)


def _hub_cache_dir() -> str:
    """The hub cache directory, read from the environment now (not at import time)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return os.path.expanduser(os.environ[var])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return os.path.join(os.path.expanduser(home), "hub")


def _is_cached(repo_id: str, cache_dir: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir)
    except Exception:  # a malformed id or cache is simply "not cached"
        return False
    return isinstance(hit, str)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub endpoint accepts a TCP connection (avoids minutes of download retries)."""
    import socket
    from urllib.parse import urlparse

    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    url = urlparse(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


def _fix_hint(repo: str, is_path: bool = False) -> str:
    if is_path:
        return (
            "Fix: pass checkpoint= an existing local directory holding config.json, the tokenizer and the "
            "weights (evalrx.load(key, checkpoint='/path/to/model')), a GGUF file (checkpoint='model.gguf'), "
            "or a hub id already in the local cache."
        )
    return (
        f"Fix: pass checkpoint= a local directory holding the weights (evalrx.load(key, checkpoint='/path/to/model')), "
        f"or pre-download it where a hub is reachable (`hf download {repo}`) into the cache this machine uses (HF_HOME)."
    )


def locate_checkpoint(repo: Optional[str]) -> tuple[str, dict]:
    """Decide where to load `repo` from, failing fast with one clear error.

    Args:
        repo: a local directory, a GGUF file (``.gguf``) or a hub id (``org/name``). A GGUF
            file is converted once into a cached safetensors directory, which is returned
            (`evalrx.models.gguf.converted_dir`: the first call takes as long as transformers
            needs to read the file, later ones only hash it).

    Returns:
        ``(name_or_path, from_pretrained_kwargs)``.

    Raises:
        CheckpointNotFoundError: the path does not exist, or the hub id is not cached and
            no hub is reachable (offline mode or no connection).
        ImportError: a GGUF file without the `gguf` package installed.
    """
    if not repo:
        raise CheckpointNotFoundError("This spec has no hf_repo to load. Pass checkpoint= a local model directory.")
    path = Path(repo).expanduser()
    from evalrx.models import gguf

    if gguf.is_gguf(path):
        return str(gguf.converted_dir(path)), {}
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise CheckpointNotFoundError(
                f"Checkpoint directory {repo!r} has no config.json, so it is not a saved transformers model. "
                + _fix_hint(repo, is_path=True)
            )
        return str(path), {}
    if path.exists() or not _HUB_ID.match(repo) or repo.startswith((".", "~")):
        raise CheckpointNotFoundError(
            f"Checkpoint path {repo!r} does not exist or is not a directory. " + _fix_hint(repo, is_path=True)
        )
    cache_dir = _hub_cache_dir()
    if _is_cached(repo, cache_dir):
        return repo, {"cache_dir": cache_dir, "local_files_only": True}
    if _truthy_env("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        raise CheckpointNotFoundError(
            f"Model {repo!r} is neither a local directory nor in the Hugging Face cache ({cache_dir}), "
            "and HF_HUB_OFFLINE is set, so no hub is reachable. " + _fix_hint(repo)
        )
    if not _hub_reachable():
        raise CheckpointNotFoundError(
            f"Model {repo!r} is neither a local directory nor in the Hugging Face cache ({cache_dir}), "
            "and no hub is reachable from this machine. " + _fix_hint(repo)
        )
    return repo, {"cache_dir": cache_dir}


def _resolve_device(runtime: RuntimeConfig) -> str:
    if runtime.device:
        return runtime.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _resolve_dtype(runtime: RuntimeConfig, device: str) -> Any:
    import torch

    name = (runtime.dtype or "").strip().lower()
    if name == "auto":
        return "auto"
    if not name:
        # fp32 on CPU (bf16 matmuls are slow there and the lens wants precision); the checkpoint's dtype on GPUs.
        return torch.float32 if device == "cpu" else "auto"
    if name not in _DTYPES:
        raise ValueError(f"Unknown dtype {runtime.dtype!r}; use one of {sorted(set(_DTYPES))} or 'auto'.")
    return getattr(torch, _DTYPES[name])


def _attn_impl(model: Any) -> Optional[str]:
    cfg = getattr(model, "config", None)
    impl = getattr(cfg, "_attn_implementation", None)
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    text_impl = getattr(text_cfg, "_attn_implementation", impl)
    # A VLM is eager for our purpose only when its language tower is.
    return impl if impl == text_impl else text_impl


def _elapsed_ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


def _page_in(model: Any) -> None:
    """Read every page of the model's CPU-resident weights now, at load time.

    transformers 5 memory-maps safetensors checkpoints: on CPU, `from_pretrained` returns
    parameters that are views of the file, read from disk only when first touched, that is
    inside the first generate call, which would bill the load to the first agent step. One
    byte per page brings them in; tensors on an accelerator or on `meta` are left alone.
    """
    import torch

    seen: set = set()
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        if tensor.device.type != "cpu":
            continue
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # a wrapper subclass without plain storage
            continue
        key = (storage.data_ptr(), storage.nbytes())
        if not key[1] or key in seen:
            continue
        seen.add(key)
        raw = torch.empty(0, dtype=torch.uint8).set_(storage)
        # Consecutive strided bytes sit in consecutive pages; the last byte covers the tail page.
        raw[:: mmap.PAGESIZE].sum()
        raw[-1].item()


THREADS_ENV = "EVALRX_NUM_THREADS"
# Below this many parameters a step costs milliseconds whatever the thread count, so the process's
# threads are left as they are unless asked (`threads="auto"`): the demo model's runs stay as they were.
AUTO_THREADS_MIN_PARAMS = 50_000_000


def _decode_probe(model: Any, prompt: int = 8, steps: int = 3) -> float:
    """Seconds for a short greedy-decode-shaped workload: a prefill, then single-token steps on its cache."""
    import torch

    vocab = int(getattr(model.get_input_embeddings(), "num_embeddings", 1000) or 1000)
    ids = (torch.arange(prompt, dtype=torch.long).unsqueeze(0) * 7919 + 11) % vocab
    ids = ids.to(next(model.parameters()).device)
    cache_arg = "cache" if _takes(model, "cache") else "past_key_values"
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True, **({"logits_to_keep": 1} if _takes(model, "logits_to_keep") else {}))
        for _ in range(steps):
            cache = output_cache(out)
            out = model(input_ids=out.logits[:, -1:].argmax(-1), use_cache=True, **{cache_arg: cache})
    return time.perf_counter() - t0


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _settle_cpu_threads(model: Any, runtime: RuntimeConfig) -> Optional[dict]:
    """Choose torch's intra-op thread count for a CPU model; returns what was chosen and why.

    torch runs every op on all cores by default (OpenMP). When other processes keep some of
    those cores busy, each parallel op waits at its barrier for a thread the OS has
    descheduled: a 135M model then spends milliseconds per op instead of microseconds (the
    attention kernel of one decoding step: 37 us on one thread, 5.5 ms on two threads of two
    busy cores) and a forward costs a second or more whatever its length. So, unless told,
    for a model of `AUTO_THREADS_MIN_PARAMS` or more:

    * at most the cores the load average leaves free (runnable tasks beyond this one,
      rounded) are used: one on a 2-core machine that something else keeps busy;
    * with more than one free, a short decode is timed on that count, half of it and one
      thread (interleaved, best of two), and more threads are kept only when at least 25%
      faster: a wrong "more" costs several times over once the machine gets busy, a wrong
      "fewer" at most the parallel speed-up.

    The setting is torch's and so process-wide; it is not revisited when the load changes.
    Told: `RuntimeConfig.extra["threads"]` or `$EVALRX_NUM_THREADS` (a number, or "auto" to
    decide even for a small model); `OMP_NUM_THREADS` / `MKL_NUM_THREADS` set by the user are
    left alone.
    """
    import torch

    asked = runtime.extra.get("threads") if isinstance(runtime.extra, dict) else None
    if asked is None:
        asked = os.environ.get(THREADS_ENV) or None
    before = torch.get_num_threads()
    if asked is not None and str(asked).strip().lower() != "auto":
        n = int(asked)
        if n < 1:
            raise ValueError(f"threads must be a whole number >= 1 or 'auto', got {asked!r}")
        torch.set_num_threads(n)
        return {"threads": n, "how": "asked", "default": before}
    if asked is None and (os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS")):
        return {"threads": before, "how": "OMP_NUM_THREADS", "default": before}
    params = sum(p.numel() for p in model.parameters())
    if before <= 1 or (asked is None and params < AUTO_THREADS_MIN_PARAMS):
        return {"threads": before, "how": "default", "default": before}
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    free = max(1, min(before, _usable_cpus() - max(0, round(load1 - 1))))
    info: dict = {"default": before, "loadavg": round(load1, 2), "free_cpus": free}
    candidates = sorted({free, max(1, free // 2), 1})
    if len(candidates) == 1:
        torch.set_num_threads(1)
        return dict(info, threads=1, how="load average: no other core free")
    timings: dict = {n: [] for n in candidates}
    try:
        _decode_probe(model, steps=1)  # warm-up: first-call allocations, lazy inits
        for _ in range(2):
            for n in reversed(candidates):
                torch.set_num_threads(n)
                timings[n].append(_decode_probe(model))
    except Exception as exc:  # a model the probe cannot drive keeps the default
        torch.set_num_threads(before)
        return dict(info, threads=before, how=f"default (probe failed: {type(exc).__name__})")
    best = {n: min(ts) for n, ts in timings.items()}
    chosen = 1
    for n in candidates:
        if best[n] * 1.25 <= best[chosen]:
            chosen = n
    torch.set_num_threads(chosen)
    return dict(info, threads=chosen, how="timed", probe_ms={n: round(v * 1000, 1) for n, v in best.items()})


def _is_vision_model(model: Any) -> bool:
    return getattr(getattr(model, "config", None), "vision_config", None) is not None


def _has_image(messages: Iterable[dict]) -> bool:
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            if any(isinstance(b, dict) and b.get("type") in ("image", "image_url") for b in content):
                return True
    return False


def _text_only(messages: list[dict]) -> list[dict]:
    """Fold text content blocks into plain strings (text-model templates expect strings)."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            m = dict(m, content="".join(b.get("text", "") for b in content if isinstance(b, dict)))
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


LAST_ROW_ATTENTION = "evalrx_last_row"


def _last_row_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    **kwargs: Any,
) -> tuple:
    """sdpa's output, plus the softmax weights of the newest query position only (`[b, heads, 1, kv]`).

    What a capturing generate needs: eager attention would build every `[heads, P, P]` map of the
    prefill to keep its last row. The row is computed as eager computes it (scaled q.k, the mask's
    last row, an fp32 softmax).
    """
    import torch
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    out, _ = sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )
    keys = repeat_kv(key, getattr(module, "num_key_value_groups", 1))
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query[:, :, -1:], keys.transpose(2, 3)) * scale
    if attention_mask is not None:  # None: causal, and the newest position sees every key
        row = attention_mask[:, :, -1:, : keys.shape[-2]]
        scores = scores.masked_fill(~row, float("-inf")) if row.dtype == torch.bool else scores + row
    return out, torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)


def _register_last_row_attention() -> None:
    """Make `LAST_ROW_ATTENTION` an attention implementation transformers dispatches to (sdpa's masks)."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if LAST_ROW_ATTENTION not in ALL_ATTENTION_FUNCTIONS:
        ALL_ATTENTION_FUNCTIONS.register(LAST_ROW_ATTENTION, _last_row_attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(LAST_ROW_ATTENTION, sdpa_mask)


def output_cache(out: Any) -> Any:
    """The KV cache a transformers forward or generate call returned (None when it kept none)."""
    return getattr(out, "cache", None) or getattr(out, "past_key_values", None)


def _rows_after_supported(handle: Any) -> bool:
    """Whether `rebuilt_attention_rows` can rebuild this model's attention rows: a text decoder on one device
    whose layers attend the Llama way (input norm, q projection, optional q norm, rotary; no sliding window,
    no logit softcap), all with the same head layout, with a rotary embedding on the decoder."""
    import sys

    model = handle.model
    if handle.processor is not None:
        return False
    if len(set((getattr(model, "hf_device_map", None) or {}).values())) > 1:  # layers spread over devices
        return False
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(cfg, "attn_logit_softcapping", None) or (
        getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True) is not False
    ):
        return False
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ())):
        return False
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    if decoder is None or not hasattr(decoder, "rotary_emb"):
        return False
    shapes = set()
    for layer in handle.parts.layers:
        attn = getattr(layer, "self_attn", None)
        if (
            attn is None
            or not hasattr(layer, "input_layernorm")
            or not all(hasattr(attn, a) for a in ("q_proj", "head_dim", "scaling", "num_key_value_groups"))
        ):
            return False
        if not hasattr(sys.modules.get(type(attn).__module__), "apply_rotary_pos_emb"):
            return False
        shapes.add((type(attn), attn.head_dim, float(attn.scaling), attn.num_key_value_groups))
    return len(shapes) == 1  # the rows of every layer are computed in one batch


def rows_rebuildable(handle: Any) -> bool:
    """`_rows_after_supported` for a local handle, checked once per handle (False for any other handle)."""
    if not isinstance(handle, HFLocalModel):
        return False
    if handle._rows_after_ok is None:
        handle._rows_after_ok = _rows_after_supported(handle)
    return handle._rows_after_ok


def cached_keys(cache: Any, width: int) -> Optional[list]:
    """Each layer's cached keys when the cache holds `width` positions of every layer, else None."""
    layers = getattr(cache, "layers", None)
    if not layers or any(int(layer.keys.shape[-2]) < width for layer in layers):
        return None
    return [layer.keys[:, :, :width] for layer in layers]


def rebuilt_attention_rows(handle: "HFLocalModel", states: Any, keys: list, positions: Any) -> Any:
    """``[L, P, W]`` fp32 head-averaged attention rows at query `positions` (``[P]``, any order), as the model's
    attention computed them, rebuilt from the residual streams entering each layer there (`states`,
    ``[L (+ 1), P, D]``) and each layer's cached keys (`keys`, ``[1, kv heads, W, head_dim]``, rotary applied).

    Each layer's queries are built as its attention builds them (input norm, q projection, q norm, rotary),
    then one batched product serves every layer. Only for a handle where `rows_rebuildable` holds.
    """
    import sys

    import torch
    from transformers.integrations.sdpa_attention import repeat_kv

    model = handle.model
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    n, width = int(positions.shape[0]), int(keys[0].shape[-2])
    with torch.inference_mode():
        queries = []
        for i, layer in enumerate(handle.parts.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(states[i])  # the residual stream entering layer i
            q = attn.q_proj(x).view(n, -1, attn.head_dim)
            if getattr(attn, "q_norm", None) is not None:
                q = attn.q_norm(q)
            queries.append(q.transpose(0, 1))  # [heads, n, head_dim]
        # Every layer has the same shape (checked once per handle): the rest is one batch over layers.
        attn = handle.parts.layers[0].self_attn
        q = torch.stack(queries)  # [L, heads, n, head_dim]
        cos, sin = decoder.rotary_emb(states[:1], positions.unsqueeze(0))
        q, _ = sys.modules[type(attn).__module__].apply_rotary_pos_emb(q, q[:, :1], cos, sin)
        scores = torch.matmul(q * attn.scaling, repeat_kv(torch.cat(keys), attn.num_key_value_groups).transpose(2, 3))
        # Causal: a query sees every key up to its own position, so only columns past the earliest query can be masked.
        lo = int(positions.min()) + 1
        if lo < width:
            future = torch.arange(lo, width, device=scores.device)[None, :] > positions.to(scores.device)[:, None]
            scores[..., lo:].masked_fill_(future, float("-inf"))
        return torch.softmax(scores, dim=-1, dtype=torch.float32).mean(1)


@contextlib.contextmanager
def _attention_kernel(model: Any, impl: str) -> Iterator[None]:
    """Run the block with the model's language layers on attention implementation `impl`, then restore."""
    cfg = getattr(model, "config", None)
    configs = [
        c
        for c in {
            id(c): c for c in (cfg, cfg.get_text_config() if hasattr(cfg, "get_text_config") else None) if c is not None
        }.values()
    ]
    before = [getattr(c, "_attn_implementation", None) for c in configs]
    for c in configs:
        c._attn_implementation = impl
    try:
        yield
    finally:
        for c, b in zip(configs, before):
            c._attn_implementation = b


@contextlib.contextmanager
def recording_hidden_states(parts: Any) -> Iterator[list]:
    """Within the block, keep every hidden state `output_hidden_states` would give, one entry per forward.

    Yields `L + 1` lists: each decoder layer's input (the embeddings, then each layer's output), then
    the final norm's output. The modules' `forward` are wrapped for the block only: transformers' own
    collection installs module hooks that stay on the model for good and put every later forward,
    recording or not, on torch's slower hooked call path (+3.5% on a plain demo-model run).
    """

    def keep_input(forward: Any, kept: list) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            kept.append(args[0] if args else kwargs["hidden_states"])
            return forward(*args, **kwargs)

        return wrapped

    def keep_output(forward: Any, kept: list) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = forward(*args, **kwargs)
            kept.append(out)
            return out

        return wrapped

    modules = list(parts.layers) + [parts.final_norm]
    states: list = [[] for _ in modules]
    wrapped: list = []
    try:
        for i, module in enumerate(modules):
            wrap = keep_output if i == len(modules) - 1 else keep_input
            wrapped.append((module, module.__dict__.get("forward")))  # an accelerate hook's own forward stays
            module.forward = wrap(module.forward, states[i])
        yield states
    finally:
        for module, own in wrapped:
            if own is None:
                del module.forward
            else:
                module.forward = own


class _CaptureRecorder:
    """One capturing generate call: what it records of each forward and the `GenerationCapture` built from it.

    Hidden states are what `output_hidden_states` gives, recorded for the call by
    `recording_hidden_states`; each forward's last position is kept at the end. Attention rows
    come from hooks on each layer's attention module that keep the last query row averaged over
    heads (eager), from a kernel that adds that row to sdpa's output, or are rebuilt after
    generation (`_rows_after`).
    """

    def __init__(self, handle: "HFLocalModel", kinds: frozenset) -> None:
        self.handle = handle
        self.impl = _attn_impl(handle.model)
        self.hidden = "hidden_states" in kinds
        # Under sdpa the newest position's row is computed beside sdpa's output (`_last_row_attention`):
        # the same weights eager gives, without eager's [heads, P, P] prefill maps.
        # With the hidden states captured too, a Llama-shaped model's rows are computed once per layer after
        # generation from those states and the KV cache (`_rows_after`): no per-step work at all.
        self.after = "attention" in kinds and self.hidden and self.impl == "sdpa" and rows_rebuildable(handle)
        self.kernel = LAST_ROW_ATTENTION if "attention" in kinds and self.impl == "sdpa" and not self.after else None
        self.attention = "attention" in kinds and (self.impl == "eager" or self.kernel is not None or self.after)
        self.notes: list = []
        if "attention" in kinds and not self.attention:
            self.notes.append(f"attention needs eager or sdpa attention; generation ran with {self.impl!r}")
        self._kernel_ctx: Any = None
        # Whether the final layer's logits are the unembedding of hidden[-1] is checked once per handle.
        self.check_head = self.hidden and handle._head_reproduces_logits is None
        self.rows: list = []
        self._hooks: list = []
        self._states: list = []  # per hidden state (L + 1), what each forward gave
        self._recording: Any = None

    def __enter__(self) -> "_CaptureRecorder":
        if self.hidden:
            self._recording = recording_hidden_states(self.handle.parts)
            self._states = self._recording.__enter__()
        if self.kernel is not None:
            _register_last_row_attention()
            self._kernel_ctx = _attention_kernel(self.handle.model, self.kernel)
            self._kernel_ctx.__enter__()
        if self.attention and not self.after:
            from evalrx.models._discover import _ATTN_ATTRS

            for i, layer in enumerate(self.handle.parts.layers):
                module = next((getattr(layer, a) for a in _ATTN_ATTRS if hasattr(layer, a)), None)
                if module is None:
                    self.notes.append(f"decoder layer {i} has no attention module to hook")
                    self.attention = False
                    break
                self.rows.append([])
                self._hooks.append(module.register_forward_hook(self._keep_last_row(self.rows[-1])))
        return self

    def __exit__(self, *exc: Any) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        if self._recording is not None:
            self._recording.__exit__(*exc)
            self._recording = None
        if self._kernel_ctx is not None:
            self._kernel_ctx.__exit__(*exc)
            self._kernel_ctx = None

    @staticmethod
    def _keep_last_row(rows: list) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if weights is None:
                return
            # [1, heads, q, kv]: the last query is this forward's newest position. The prefill's row is
            # copied out of its [heads, P, P] weights; a decoding step's is its only row. Averaging over
            # heads waits for the end of the call (one operation per layer, not one per step).
            rows.append(weights[0, :, -1, :].clone() if weights.shape[2] > 1 else weights[0, :, 0, :])

        return hook

    def _run_last_token(self, out: Any) -> bool:
        """One more decoding step on the last generated token (a turn cut by the token limit), recorded as
        generation's steps are; False (with a note) when it cannot run."""
        import inspect

        model = self.handle.model
        cache = output_cache(out)
        if cache is None or self.handle.processor is not None:
            self.notes.append("the last token of a turn cut by the token limit was not run (no cache to extend)")
            return False
        try:
            params = inspect.signature(model.forward).parameters
        except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
            params = {}
        kwargs = {"cache" if "cache" in params else "past_key_values": cache}
        try:
            model(input_ids=out.sequences[:, -1:], use_cache=True, return_dict=True, **kwargs)
        except Exception as exc:  # a model that cannot extend its cache: the analysis falls back, the turn stands
            self.notes.append(
                f"the last token of a turn cut by the token limit was not run: {type(exc).__name__}: {exc}"
            )
            return False
        return True

    def finish(self, enc: dict, out: Any, new_ids: list, finish: str) -> GenerationCapture:
        import torch

        prompt_ids = enc["input_ids"][0].tolist()
        extra = self._run_last_token(out) if finish == "length" and new_ids else False
        n = len(new_ids) + extra
        hidden = attention = None
        if self.hidden:
            steps = list(zip(*self._states))  # per forward, its L + 1 hidden states
            if len(steps) != n or not n or any(len(kept) != len(steps) for kept in self._states):
                self.notes.append(f"generation recorded hidden states for {len(steps)} of {n} positions")
            else:
                # The prefill's layers are [1, P, D]: only the last position is kept, before anything is stacked.
                first = torch.stack([layer[0, -1] for layer in steps[0]]).unsqueeze(1)  # [L + 1, 1, D]
                if n > 1:  # every decoding step's layers are [1, 1, D]: one concatenation for all of them
                    rest = torch.cat([layer for step in steps[1:] for layer in step]).view(n - 1, len(steps[0]), -1)
                    states = torch.cat([first, rest.transpose(0, 1)], dim=1)  # [L + 1, n, D]
                else:
                    states = first
                hidden = states.float().cpu()
                if self.after:
                    attention = self._rows_after(states, out, len(prompt_ids), n)
                if self.check_head:
                    self.handle._head_reproduces_logits = self._head_matches(steps, out)
                if not self.handle._head_reproduces_logits:
                    self.notes.append(
                        "the model's logits are not the unembedding of its last hidden state; "
                        "hidden states were not captured"
                    )
                    hidden = None
        if self.attention and not self.after:
            attention = self._attention_rows(len(prompt_ids), n)
        return GenerationCapture(
            prompt_ids, list(new_ids), hidden, attention, self.impl, list(self.notes), id(self.handle.model)
        )

    def _rows_after(self, states: Any, out: Any, n_prompt: int, n: int) -> Any:
        """``[L, n, P + n - 1]`` attention rows of the captured positions (`rebuilt_attention_rows`) from their
        residual streams (`states`, ``[L + 1, n, D]``) and the call's KV cache."""
        import torch

        keys = cached_keys(output_cache(out), n_prompt + n - 1)
        if keys is None:
            self.notes.append("attention rows were not captured: the cache does not hold every position")
            return None
        positions = torch.arange(n_prompt - 1, n_prompt - 1 + n, device=states.device)
        return rebuilt_attention_rows(self.handle, states, keys, positions).cpu()

    def _head_matches(self, steps: list, out: Any) -> bool:
        """Whether the model's own logits at its last generate step equal unembed(hidden[-1]) (softcap included)."""
        import torch

        logits = getattr(out, "logits", None)
        if not logits:
            return False
        parts = self.handle.parts
        last = steps[len(logits) - 1][-1][0, -1:]
        ours = parts.unembed(last)
        if parts.logit_softcap:
            ours = torch.tanh(ours / parts.logit_softcap) * parts.logit_softcap
        theirs = logits[-1].to(ours.device)
        return bool(torch.allclose(ours.float(), theirs.float(), rtol=1e-3, atol=1e-3))

    def _attention_rows(self, n_prompt: int, n: int) -> Any:
        """``[L, n, P + n - 1]`` rows from the hooks; None (with a note) when they do not line up with the positions."""
        import torch

        for layer, rows in enumerate(self.rows):
            lengths = [int(r.shape[-1]) for r in rows]
            if lengths != [n_prompt + j for j in range(n)]:
                # A sliding-window cache (or a layer that returned no weights) breaks the position mapping.
                self.notes.append(
                    f"layer {layer} returned attention rows of lengths {lengths[:3]}... for {n} positions"
                )
                return None
        out = []
        for rows in self.rows:  # [heads, kv] per position -> [n, P + n - 1] averaged over heads, zero-padded
            padded = torch.nn.utils.rnn.pad_sequence([r.transpose(0, 1) for r in rows], batch_first=True)
            out.append(padded.float().mean(-1))
        return torch.stack(out).cpu()


_NO_RECORDER = contextlib.nullcontext()


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
        self.tokenizer = tokenizer if tokenizer is not None else getattr(processor, "tokenizer", None)
        self.spec = spec
        self.runtime = runtime or RuntimeConfig()
        self.load_ms: Optional[float] = None
        self.cpu_threads: Optional[dict] = None  # what `from_spec` chose for torch's CPU threads, and why
        self._parts: Any = None
        self._head_reproduces_logits: Optional[bool] = None  # see `_CaptureRecorder.check_head`
        self._rows_after_ok: Optional[bool] = None  # see `_rows_after_supported`

    # ----------------------------------------------------------------- building

    @classmethod
    def from_spec(
        cls, spec: ModelSpec, runtime: Optional[RuntimeConfig] = None, want: Iterable[Capability] = ()
    ) -> "HFLocalModel":
        """Load the spec's weights (`resolve_weights`: `hf_repo`, or a file of its `weights_package`)
        from a local directory, a GGUF file (converted once, cached) or the hub cache.

        On CPU the intra-op thread count is settled here too (`_settle_cpu_threads`), and a
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
        device = _resolve_device(runtime)
        kwargs: dict = dict(where, dtype=_resolve_dtype(runtime, device), trust_remote_code=runtime.trust_remote_code)
        attn = "eager" if Capability.ATTENTION in want else runtime.attn_implementation
        if attn:
            kwargs["attn_implementation"] = attn
        if device == "auto":
            kwargs["device_map"] = "auto"
        common = dict(where, trust_remote_code=runtime.trust_remote_code)
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
            raise CheckpointNotFoundError(
                f"Could not load {repo!r}: {first} " + _fix_hint(repo or "", is_path=Path(name).is_dir())
            ) from None
        if device != "auto":
            model = model.to(device)
        model.eval()
        if spec.chat_template:
            for owner in (tokenizer, processor):
                if owner is not None:
                    owner.chat_template = spec.chat_template
        _page_in(model)
        threads = _settle_cpu_threads(model, runtime) if device == "cpu" else None
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
        if Capability.ATTENTION in want and _attn_impl(model) != "eager":
            if hasattr(model, "set_attn_implementation"):
                model.set_attn_implementation("eager")
            else:
                cfg._attn_implementation = "eager"
        spec = ModelSpec(
            key=name or type(model).__name__,
            family=getattr(cfg, "model_type", None) or "unknown",
            hf_repo=name or None,
            tool_call_style="hermes",
            vision=_is_vision_model(model) and processor is not None,
            notes="wrapped with evalrx.wrap",
        )
        _page_in(model)
        handle = cls(model, tokenizer, spec, runtime or RuntimeConfig(), processor=processor)
        handle.load_ms = _elapsed_ms(t0)
        return handle

    # ------------------------------------------------------------- properties

    @property
    def captures_attention(self) -> bool:
        """Whether `chat(capture=["attention"])` can keep attention rows: under eager attention, or under sdpa
        (the newest position's row computed beside it, `_last_row_attention`)."""
        return _attn_impl(self.model) in ("eager", "sdpa")

    @property
    def capabilities(self) -> frozenset:
        """What this live model provides (read from the model, not the spec)."""
        caps = set(_ALWAYS)
        template_owner = self.processor if self.processor is not None else self.tokenizer
        if getattr(template_owner, "chat_template", None) or getattr(self.tokenizer, "chat_template", None):
            caps.add(Capability.TOOL_CALLS)
        if _attn_impl(self.model) == "eager":
            caps.add(Capability.ATTENTION)
        if self.processor is not None and _is_vision_model(self.model):
            caps.add(Capability.VISION)
        return frozenset(caps)

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    @property
    def parts(self) -> Any:
        """Discovered decoder layers, final norm and unembedding (`_discover.ModelParts`), cached."""
        if self._parts is None:
            from evalrx.models._discover import discover

            self._parts = discover(self.model)
        return self._parts

    @property
    def num_layers(self) -> int:
        return self.parts.num_layers

    # ---------------------------------------------------------------- text I/O

    def _template_owner(self) -> Any:
        return self.processor if self.processor is not None else self.tokenizer

    def _prepare_messages(self, messages: list[dict], where: str) -> list[dict]:
        if _has_image(messages):
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
        return self._template_owner().apply_chat_template(
            msgs, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False
        )

    def encode_messages(
        self, messages: list[dict], tools: Optional[list[dict]] = None, add_generation_prompt: bool = False
    ) -> dict:
        """Model inputs (`input_ids`, `attention_mask`, pixel values for a VLM) for a conversation."""
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

    def chat(
        self,
        messages: list[dict],
        tools: Optional[list[dict]] = None,
        *,
        max_new_tokens: Optional[int] = None,
        logprobs: bool = False,
        temperature: Optional[float] = None,
        capture: Any = False,
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
                `CAPTURE_KINDS` ("hidden_states": every layer; "attention": head-averaged
                rows, only under eager attention, else a note says why not).

        Returns:
            A `ChatTurn` with the raw generated text (tool-call markup kept, control tokens
            stripped), `tool_calls=[]`, finish_reason "stop"/"length", usage, optional logprobs
            and the optional capture.

        Raises:
            CapabilityError: image content sent to a model without VISION.
            ValueError: an unknown capture kind.
        """
        import torch

        kinds = _capture_kinds(capture)

        enc = self.encode_messages(messages, tools, add_generation_prompt=True)
        prompt_len = int(enc["input_ids"].shape[1])
        eos = self._eos_ids()
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else (eos[0] if eos else 0)
        temp = self.runtime.temperature if temperature is None else temperature
        sampling = (
            dict(do_sample=True, temperature=float(temp), top_k=None, top_p=None)
            if temp and temp > 0
            else dict(do_sample=False, temperature=None, top_k=None, top_p=None)
        )
        recorder = _CaptureRecorder(self, kinds) if kinds else None
        with torch.no_grad(), recorder or _NO_RECORDER:
            out = self.model.generate(
                **enc,
                max_new_tokens=int(max_new_tokens or self.runtime.max_new_tokens),
                pad_token_id=pad,
                eos_token_id=eos or None,
                # Explicit so a checkpoint's generation_config (beams, repetition penalty) cannot
                # make "greedy" differ from the argmax of the logits the analyzers read.
                num_beams=1,
                repetition_penalty=1.0,
                no_repeat_ngram_size=0,
                min_new_tokens=0,
                return_dict_in_generate=True,
                output_logits=bool(logprobs) or (recorder is not None and recorder.check_head),
                **sampling,
            )
            new_ids = out.sequences[0, prompt_len:].tolist()
            finish = "stop" if new_ids and new_ids[-1] in eos else "length"
            turn_capture = recorder.finish(enc, out, new_ids, finish) if recorder is not None else None
        text = _decode_generated(self.tokenizer, new_ids)
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
            usage={"prompt_tokens": prompt_len, "completion_tokens": len(new_ids)},
            logprobs=lp,
            capture=turn_capture,
        )

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
                model=f"{self.spec.key} (attn_implementation={_attn_impl(self.model)!r})",
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
            f"attn={_attn_impl(self.model)!r}, capabilities=[{caps}])"
        )


def _takes(model: Any, name: str) -> bool:
    """Whether the model's `forward` has a parameter `name`."""
    import inspect

    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
        return False


def teacher_forced_forward(
    model: Any,
    input_ids: Any,
    *,
    keep: Optional[Iterable[int]] = None,
    output_hidden_states: bool = True,
    output_attentions: bool = False,
    inputs: Optional[dict] = None,
    parts: Any = None,
    cache: bool = False,
) -> ForwardOutput:
    """The one teacher-forced pass of evalrx: `HFLocalModel.forward` and every analyzer run it.

    Args:
        model: a transformers model.
        input_ids: ``[1, T]`` token ids on the model's device.
        keep: positions whose logits are needed (all when None); passed as `logits_to_keep`
            when the model takes it, so the vocabulary projection runs only there.
        output_hidden_states: return the residual stream of every layer.
        output_attentions: return attention maps (the model must run eager attention).
        inputs: further model inputs (a VLM's pixel values).
        parts: the model's `ModelParts` (discovered when None): the hidden states are recorded
            with `recording_hidden_states`; a model whose parts cannot be found returns them
            through `output_hidden_states`.
        cache: also return the pass's KV cache (`ForwardOutput.cache`).

    Returns:
        `ForwardOutput`, its logits ``[1, len(keep) or T, V]`` in the model's dtype.
    """
    import torch

    kwargs: dict = {"input_ids": input_ids, "use_cache": bool(cache), "return_dict": True, **(inputs or {})}
    if output_attentions:
        kwargs["output_attentions"] = True
    recording: Any = contextlib.nullcontext()
    if output_hidden_states:
        if parts is None:
            from evalrx.models._discover import discover

            try:
                parts = discover(model)
            except Exception:  # an unknown layout: transformers collects them
                kwargs["output_hidden_states"] = True
        if parts is not None:
            recording = recording_hidden_states(parts)
    keep = None if keep is None else torch.tensor(list(keep), dtype=torch.long, device=input_ids.device)
    sliced = keep is not None and _takes(model, "logits_to_keep")
    if sliced:
        kwargs["logits_to_keep"] = keep
    with torch.no_grad(), recording as states:
        out = model(**kwargs)
    logits = out.logits
    if keep is not None and not sliced:
        logits = logits[:, keep.to(logits.device)]
    hidden = None
    if states is not None:
        hidden = tuple(kept[-1] for kept in states)
    elif output_hidden_states and getattr(out, "hidden_states", None) is not None:
        hidden = tuple(out.hidden_states)
    attn = tuple(out.attentions) if output_attentions and out.attentions else None
    return ForwardOutput(
        input_ids=input_ids,
        logits=logits,
        hidden_states=hidden,
        attentions=attn,
        cache=output_cache(out) if cache else None,
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

__all__ = [
    "CAPTURE_KINDS",
    "CheckpointNotFoundError",
    "ForwardOutput",
    "GenerationCapture",
    "HFLocalModel",
    "cached_keys",
    "locate_checkpoint",
    "output_cache",
    "rebuilt_attention_rows",
    "rows_rebuildable",
    "teacher_forced_forward",
]

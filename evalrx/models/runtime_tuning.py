"""Runtime tuning of a local model: its device and dtype, its weights paged in at load, torch's CPU threads.

What `HFLocalModel.from_spec` (and `from_loaded`, for paging in) settles before the first step, so
that no step's latency pays for it. torch is imported inside functions.
"""

from __future__ import annotations

import itertools
import mmap
import os
import time
from typing import Any, Optional

from evalrx.internals import cache_argument, output_cache, takes_argument
from evalrx.models.backends import RuntimeConfig

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


def resolve_device(runtime: RuntimeConfig) -> str:
    if runtime.device:
        return runtime.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(runtime: RuntimeConfig, device: str) -> Any:
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


def page_in(model: Any) -> None:
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
    cache_arg = cache_argument(model)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model(
            input_ids=ids, use_cache=True, **({"logits_to_keep": 1} if takes_argument(model, "logits_to_keep") else {})
        )
        for _ in range(steps):
            cache = output_cache(out)
            out = model(input_ids=out.logits[:, -1:].argmax(-1), use_cache=True, **{cache_arg: cache})
    return time.perf_counter() - t0


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def settle_cpu_threads(model: Any, runtime: RuntimeConfig) -> Optional[dict]:
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


__all__ = ["AUTO_THREADS_MIN_PARAMS", "THREADS_ENV", "page_in", "resolve_device", "resolve_dtype", "settle_cpu_threads"]

"""Runtime tuning of a local model: its device and dtype, its weights paged in at load, torch's CPU threads.

What `HFLocalModel.from_spec` (and `from_loaded`, for paging in) settles before the first step, so
that no step's latency pays for it. torch is imported inside functions.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import time
from typing import Any, Iterator, Optional

from evalrx.internals import cache_argument, output_cache, takes_argument
from evalrx.models.backends.registry import RuntimeConfig

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


_TORCH_DEFAULT: dict = {}  # torch's thread count before this module first changed it


def _default_threads() -> int:
    """torch's own thread count, as it was before any model of this process settled it (a second model
    loaded in one process must not take the first one's choice for the machine's default)."""
    import torch

    return int(_TORCH_DEFAULT.setdefault("threads", torch.get_num_threads()))


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

    * at most the cores other processes leave free (`free_cpus`: their CPU time lately, rounded)
      are used: one on a 2-core machine that something else keeps busy;
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
    before = _default_threads()
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
        torch.set_num_threads(before)  # an earlier model of this process may have settled fewer
        return {"threads": before, "how": "default", "default": before}
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    free = free_cpus(before)
    info: dict = {"default": before, "loadavg": round(load1, 2), "free_cpus": free}
    candidates = sorted({free, max(1, free // 2), 1})
    if len(candidates) == 1:
        torch.set_num_threads(1)
        return dict(info, threads=1, how="no other core free")
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


_LAST_SAMPLE: dict = {}  # the previous `_cpu_sample`, so a worker's next case reads the interval since


def _cpu_sample() -> "Optional[tuple[float, int, int]]":
    """(monotonic time, busy jiffies of all CPUs, this process's jiffies) from /proc; None off Linux."""
    try:
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:9]]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()
        busy = sum(cpu) - cpu[3] - cpu[4]  # all but idle and iowait
        return time.monotonic(), busy, int(own[11]) + int(own[12])  # utime, stime
    except (OSError, ValueError, IndexError):
        return None


def other_busy_cores() -> Optional[float]:
    """How many cores other processes kept busy lately (this process's own threads not counted).

    Read from /proc over the interval since the previous reading when that is 0.5-60 s old; within
    0.5 s the previous answer stands (a short case must not pay for a reading); else over a fresh
    0.1 s. None where /proc cannot be read. The load average cannot say this: it counts this
    process's own threads, so a process that used two threads would see no core free.
    """
    now = _cpu_sample()
    if now is None:
        return None
    last = _LAST_SAMPLE.get("sample")
    if last is not None and now[0] - last[0] < 0.5 and "busy" in _LAST_SAMPLE:
        return _LAST_SAMPLE["busy"]
    if last is None or now[0] - last[0] > 60:
        time.sleep(0.1)
        last, now = now, _cpu_sample()
        if now is None:
            return None
    ticks = (now[0] - last[0]) * os.sysconf("SC_CLK_TCK")
    busy = max(0.0, ((now[1] - last[1]) - (now[2] - last[2])) / ticks) if ticks > 0 else 0.0
    _LAST_SAMPLE.update(sample=now, busy=busy)
    return busy


def free_cpus(limit: int) -> int:
    """The cores other processes leave free for this one, 1 to `limit` (the load average where /proc is missing)."""
    others = other_busy_cores()
    if others is None:
        load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        others = max(0.0, load1 - 1)  # the load counts this process once
    return max(1, min(limit, _usable_cpus() - round(others)))


@contextlib.contextmanager
def batch_threads(handle: Any) -> Iterator[int]:
    """torch's CPU threads, for the duration, for batched arithmetic on `handle`'s model: the cores free now.

    `settle_cpu_threads` often leaves a small model's decoding on one thread, since one token's
    forward is too short to share; a teacher-forced pass over a whole conversation or the logit
    lens' unembedding of every layer is a large matrix product that two cores do in about 60% of
    one core's time (SmolLM2-135M's lens: 96 -> 168 GFLOP/s on this 2-core machine). So the analyzers
    run on the cores other processes leave free (`free_cpus`), up to torch's default, and the decoding count
    comes back afterwards. A count the user set (`threads`, `$EVALRX_NUM_THREADS`, `OMP_NUM_THREADS`)
    and a model that is not on the CPU are left alone. Yields the count in force.
    """
    import torch

    info = getattr(handle, "cpu_threads", None)
    before = torch.get_num_threads()
    default = int(info.get("default") or before) if isinstance(info, dict) else before
    if (
        not isinstance(info, dict) or default <= before or info.get("how") in ("asked", "OMP_NUM_THREADS")
    ):  # nothing to widen: no reading
        yield before
        return
    wanted = free_cpus(default)
    if wanted == before:
        yield before
        return
    torch.set_num_threads(wanted)
    try:
        yield wanted
    finally:
        torch.set_num_threads(before)


__all__ = [
    "AUTO_THREADS_MIN_PARAMS",
    "THREADS_ENV",
    "batch_threads",
    "free_cpus",
    "page_in",
    "resolve_device",
    "resolve_dtype",
    "settle_cpu_threads",
]

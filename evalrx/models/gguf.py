"""GGUF checkpoints for `hf_local`: converted once into a cached safetensors directory.

transformers reads a `.gguf` file (`from_pretrained(dir, gguf_file=...)`), but it
de-quantizes every tensor and rebuilds the tokenizer from the file's vocabulary on
every load (half a minute for a 135M model on two cores), and the model it returns
carries a GGUF quantizer that refuses `save_pretrained`. `converted_dir(path)` does
that work once: it loads the file, drops the quantizer (the weights are plain float32
tensors by then), saves model and tokenizer with `save_pretrained` under
``<cache>/gguf/<sha256 of the file>/`` and returns that directory, which
`hf_local` then loads like any other checkpoint (memory-mapped safetensors: seconds). Telling a
GGUF file from other checkpoints is lookup: `evalrx.models.checkpoints.is_gguf`.

The cache root is ``$EVALRX_CACHE/gguf``, else ``$XDG_CACHE_HOME/evalrx/gguf``, else
``~/.cache/evalrx/gguf``. A conversion is written to a temporary directory next to its
target and renamed into place, so a reader never sees half a conversion and two
processes converting the same file at once both end with the same directory.

Nothing here imports torch, transformers or gguf at module level.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Optional

CACHE_ENV = "EVALRX_CACHE"
MARKER = "evalrx_gguf.json"  # written last: a directory holding it is a finished conversion
_CHUNK = 1 << 20
_SHA_MEMO: dict = {}  # (path, size, mtime_ns) -> sha256: one hash per file per process


class GGUFConversionError(ValueError):
    """transformers could not read a GGUF file (an architecture or quantization it does not support, ...)."""


def file_sha256(path: "str | os.PathLike") -> str:
    """The sha256 of a file, read in 1 MiB chunks (memoized per process on path, size and mtime)."""
    p = Path(path).expanduser().resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _SHA_MEMO:
        digest = hashlib.sha256()
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                digest.update(chunk)
        _SHA_MEMO[key] = digest.hexdigest()
    return _SHA_MEMO[key]


def cache_root() -> Path:
    """Where converted GGUF checkpoints live (read from the environment now, not at import time)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser() / "gguf"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base).expanduser() / "evalrx" / "gguf"


def cached_dir(path: "str | os.PathLike") -> Optional[Path]:
    """The finished conversion of `path`, or None when it has not been converted yet."""
    target = cache_root() / file_sha256(path)
    return target if (target / MARKER).is_file() else None


def converted_dir(path: "str | os.PathLike") -> Path:
    """A safetensors checkpoint directory equal to the GGUF file `path`, converting it the first time.

    Args:
        path: a `.gguf` file.

    Returns:
        ``<cache_root()>/<sha256>``, holding config.json, model.safetensors, the tokenizer
        (with the file's chat template) and `evalrx_gguf.json` (source, sha256, timing).

    Raises:
        FileNotFoundError: `path` is not a file.
        ImportError: the `gguf` package is missing.
        GGUFConversionError: transformers cannot read the file.
    """
    src = Path(path).expanduser().resolve()
    if not src.is_file():
        raise FileNotFoundError(f"GGUF file {str(path)!r} does not exist")
    sha = file_sha256(src)
    target = cache_root() / sha
    if (target / MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-", dir=target.parent))
    try:
        info = _convert(src, tmp)
        info.update(source=str(src), sha256=sha, bytes=src.stat().st_size)
        (tmp / MARKER).write_text(json.dumps(info, indent=1))
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first (or a stale unfinished directory): keep a finished one
            if not (target / MARKER).is_file():
                shutil.rmtree(target, ignore_errors=True)
                os.rename(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert(src: Path, out: Path) -> dict:
    """Load the GGUF file with transformers (de-quantized to float32) and save it as safetensors in `out`."""
    try:
        import gguf  # noqa: F401  (transformers' own message for a missing gguf is an ImportError deep inside)
    except ImportError:
        raise ImportError(
            f"Reading the GGUF file {src.name} needs the `gguf` package: pip install gguf accelerate "
            "(or pip install 'evalrx[local]')."
        ) from None
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict = {"dtype": torch.float32}
    if hasattr(transformers, "GgufConfig"):  # unpack every weight, even where a packed-GGUF kernel is installed
        kwargs["quantization_config"] = transformers.GgufConfig(gguf_file=src.name, dequantize=True)
    t0 = time.perf_counter()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        t_tok = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, **kwargs)
    except (OSError, ValueError, KeyError, NotImplementedError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise GGUFConversionError(f"transformers could not read GGUF file {src}: {first}") from None
    t_model = time.perf_counter()
    packed = sorted({type(m).__name__ for m in model.modules() if "gguf" in type(m).__name__.lower()})
    if packed or any(not p.is_floating_point() for p in model.parameters()):
        raise GGUFConversionError(
            f"transformers left weights of {src.name} packed ({', '.join(packed) or 'integer'} "
            "tensors); a dense checkpoint cannot be saved from them"
        )
    # The weights are de-quantized float32 tensors by now; the quantizer left on the model only
    # makes save_pretrained refuse ("quantized with gguf and is not serializable").
    setattr(model, "hf_quantizer", None)  # typed by torch's Module.__setattr__ as a tensor or module only
    for cfg in (model.config, getattr(model.config, "get_text_config", lambda: None)()):
        if cfg is not None and hasattr(cfg, "quantization_config"):
            delattr(cfg, "quantization_config")
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return {
        "architecture": type(model).__name__,
        "dtype": str(model.dtype).replace("torch.", ""),
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "transformers": transformers.__version__,
        "tokenizer_s": round(t_tok - t0, 3),
        "model_s": round(t_model - t_tok, 3),
        "save_s": round(time.perf_counter() - t_model, 3),
    }


__all__ = ["GGUFConversionError", "cache_root", "cached_dir", "converted_dir", "file_sha256"]

"""Where a checkpoint is loaded from: a local directory, a GGUF file or a hub id (cache first, then the hub).

`locate_checkpoint` decides it and fails fast with one clear `CheckpointNotFoundError`:
an uncached hub id offline or with no hub reachable costs a TCP probe, not minutes of
download retries. A GGUF file is converted once into a cached safetensors directory
(`evalrx.models.gguf`). Nothing here imports torch or transformers at module level.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from evalrx.models import gguf

GGUF_MAGIC = b"GGUF"
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_TRUTHY = {"1", "true", "yes", "on"}


class CheckpointNotFoundError(FileNotFoundError):
    """A checkpoint is neither a local directory nor a hub id available from the cache or a reachable hub.

    `problem` says what is missing and `fix` how to mend it, apart, so a caller that offers another way
    to give the weights (a form's field, a command's flag) can say that one (`with_fix`).
    """

    def __init__(self, problem: str, fix: str = "", *, repo: Optional[str] = None, is_path: bool = False):
        super().__init__(f"{problem} {fix}".strip())
        self.problem, self.fix, self.repo, self.is_path = problem, fix, repo, is_path

    def with_fix(self, how: str) -> "CheckpointNotFoundError":
        """The same problem with `fix_hint`'s fix saying `how` to give a local directory (itself without a repo)."""
        if self.repo is None:
            return self
        return CheckpointNotFoundError(
            self.problem, fix_hint(self.repo, self.is_path, how=how), repo=self.repo, is_path=self.is_path
        )


def is_gguf(path: "str | os.PathLike") -> bool:
    """Whether `path` is a GGUF file (a `.gguf` name, or the GGUF magic in its first bytes)."""
    p = Path(path).expanduser()
    if not p.is_file():
        return False
    if p.suffix.lower() == ".gguf":
        return True
    try:
        with open(p, "rb") as fh:
            return fh.read(4) == GGUF_MAGIC
    except OSError:
        return False


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


# Where a caller of `evalrx.load` gives a local directory; the runner names a run's own place instead.
LOAD_HOW = "evalrx.load(key, checkpoint='/path/to/model')"


def fix_hint(repo: str, is_path: bool = False, *, how: str = LOAD_HOW) -> str:
    """How to mend a checkpoint that is not found, `how` saying where a local directory is given."""
    if is_path:
        return (
            f"Fix: give an existing local directory holding config.json, the tokenizer and the weights ({how}), "
            "a GGUF file, or a hub id already in the local cache."
        )
    return (
        f"Fix: give a local directory holding the weights ({how}), or pre-download it where a hub is reachable "
        f"(`hf download {repo}`) into the cache this machine uses (HF_HOME)."
    )


def checkpoint_error(repo: Optional[str]) -> Optional[CheckpointNotFoundError]:
    """The error `locate_checkpoint(repo)` would raise on this machine, or None. Asked before a run is queued:
    nothing is converted or downloaded (a hub costs one TCP probe)."""
    try:
        _locate(repo, convert=False)
    except CheckpointNotFoundError as exc:
        return exc
    return None


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
    return _locate(repo, convert=True)


def _locate(repo: Optional[str], *, convert: bool) -> tuple[str, dict]:
    if not repo:
        raise CheckpointNotFoundError("This spec has no hf_repo to load.", "Pass checkpoint= a local model directory.")
    path = Path(repo).expanduser()
    if is_gguf(path):
        return (str(gguf.converted_dir(path)) if convert else str(path)), {}
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise CheckpointNotFoundError(
                f"Checkpoint directory {repo!r} has no config.json, so it is not a saved transformers model.",
                fix_hint(repo, is_path=True),
                repo=repo,
                is_path=True,
            )
        return str(path), {}
    if path.exists() or not _HUB_ID.match(repo) or repo.startswith((".", "~")):
        raise CheckpointNotFoundError(
            f"Checkpoint path {repo!r} does not exist or is not a directory.",
            fix_hint(repo, is_path=True),
            repo=repo,
            is_path=True,
        )
    cache_dir = _hub_cache_dir()
    if _is_cached(repo, cache_dir):
        return repo, {"cache_dir": cache_dir, "local_files_only": True}
    if _truthy_env("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        raise CheckpointNotFoundError(
            f"Model {repo!r} is neither a local directory nor in the Hugging Face cache ({cache_dir}), "
            "and HF_HUB_OFFLINE is set, so no hub is reachable.",
            fix_hint(repo),
            repo=repo,
        )
    if not _hub_reachable():
        raise CheckpointNotFoundError(
            f"Model {repo!r} is neither a local directory nor in the Hugging Face cache ({cache_dir}), "
            "and no hub is reachable from this machine.",
            fix_hint(repo),
            repo=repo,
        )
    return repo, {"cache_dir": cache_dir}


__all__ = ["LOAD_HOW", "CheckpointNotFoundError", "checkpoint_error", "fix_hint", "is_gguf", "locate_checkpoint"]

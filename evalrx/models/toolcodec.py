"""PLACEHOLDER - being written (tool codecs). Interface only."""
from __future__ import annotations
class ToolCallCodec:  # noqa
    name = "base"
class OpenAIToolCodec(ToolCallCodec):
    name = "openai"
class QwenToolCodec(ToolCallCodec):
    name = "qwen"
def codec_for(handle):  # noqa
    raise NotImplementedError

"""DeepSeek's official DeepSeek-V4 encoder (``encoding_dsv4.py``) as a verification oracle.

OpenAI-format conversations reach the encoder the way the shared goldens fed it
(``../shared/corpus/golden/README.md``):

* messages as given (``content: None`` kept), except that tool-call arguments given as a
  dict (the form a renderer's ``normalize_messages`` may hand over) become the JSON string
  an OpenAI message carries; the encoder parses them back itself;
* ``tools`` become a ``tools`` key on the first system message, or on a new leading
  ``{"role": "system", "content": ""}`` when there is none (the encoder reads tools only
  from system/developer messages);
* knobs ``thinking_mode`` (``"thinking"`` or ``"chat"``, default ``"thinking"``) and
  ``drop_thinking`` (default True) are the encoder's own arguments; BOS on, no context,
  ``reasoning_effort=None``. The variant table maps ``thinking`` / ``chat`` /
  ``thinking_keep`` to ``{thinking_mode: thinking}``, ``{thinking_mode: chat}`` and
  ``{thinking_mode: thinking, drop_thinking: False}``, and selects ``chat`` for
  ``enable_thinking=false`` and ``thinking`` when it is absent or true: without
  ``thinking_mode``, an ``enable_thinking`` knob picks the mode that way;
* ``add_generation_prompt`` has no counterpart: the encoder appends the assistant prefix
  after a trailing user, tool or developer message by itself.

Token ids are ``tokenizer.encode(text, add_special_tokens=False)`` with the real
DeepSeek-V4 tokenizer, as the goldens were made.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ..oracle import OracleRejected
from . import import_in_place, oracle_folder

KNOB_DEFAULTS = {"thinking_mode": "thinking", "drop_thinking": True}


def load_encoder() -> Any:
    """The ``encoding_dsv4`` module, imported in place from the oracles folder."""
    return import_in_place(oracle_folder("deepseek-v4"), "encoding_dsv4")


class DeepSeekV4EncoderOracle:
    """``encode_messages`` behind the TemplateOracle interface."""

    #: A Python reference: its refusals are not worded as the template's, only both must refuse.
    is_template = False

    name = "deepseek-encoder:v4"

    def __init__(self, tokenizer: Any = None) -> None:
        self.encoder = load_encoder()
        self.tokenizer = tokenizer
        self.special_tokens = {"bos_token": self.encoder.bos_token, "eos_token": self.encoder.eos_token}

    def render_text(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = False,
        knobs: dict | None = None,
    ) -> str:
        arguments = encoder_arguments(knobs)
        conversation = encoder_messages(messages, tools)
        try:
            return self.encoder.encode_messages(conversation, **arguments)
        except Exception as exc:  # the encoder refuses with asserts, NotImplementedError, TypeError...
            raise OracleRejected(str(exc), type(exc).__name__) from exc

    def render_ids(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = False,
        knobs: dict | None = None,
    ) -> list[int]:
        if self.tokenizer is None:
            raise ValueError("render_ids needs the DeepSeek-V4 tokenizer; this oracle was built in text-only mode")
        text = self.render_text(messages, tools=tools, add_generation_prompt=add_generation_prompt, knobs=knobs)
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def encoder_arguments(knobs: dict | None) -> dict:
    """``encode_messages`` keyword arguments for these knobs (defaults filled in)."""
    knobs = dict(knobs or {})
    unknown = sorted(knobs.keys() - KNOB_DEFAULTS.keys() - {"enable_thinking"})
    if unknown:
        known = sorted([*KNOB_DEFAULTS, "enable_thinking"])
        raise ValueError(f"unknown knob {unknown[0]!r} for the DeepSeek-V4 encoder; its knobs are {known}")
    if "enable_thinking" in knobs:
        enable_thinking = knobs.pop("enable_thinking")
        knobs.setdefault("thinking_mode", "thinking" if enable_thinking else "chat")
    return {**KNOB_DEFAULTS, **knobs}


def encoder_messages(messages: list[dict], tools: list[dict] | None) -> list[dict]:
    """The conversation as the goldens handed it to the encoder (a copy; the input is untouched)."""
    conversation = [_with_string_arguments(message) for message in copy.deepcopy(list(messages))]
    if tools:
        system = next((m for m in conversation if isinstance(m, dict) and m.get("role") == "system"), None)
        if system is None:
            conversation.insert(0, {"role": "system", "content": "", "tools": list(tools)})
        else:
            system["tools"] = list(tools)
    return conversation


def _with_string_arguments(message: Any) -> Any:
    if not isinstance(message, dict) or not message.get("tool_calls"):
        return message
    for call in message["tool_calls"]:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("arguments"), (dict, list)):
            function["arguments"] = json.dumps(function["arguments"], ensure_ascii=False)
    return message

"""The Fireworks cookbook's message-level renderers as oracles (``--oracle fireworks:<name>``).

The renderer package (``training/renderer`` of fw-ai/cookbook, on top of tinker-cookbook) is
imported in place from ``fireworks-cookbook/`` of the oracles folder (``$RLLM_ORACLES``, default
``../shared/oracles`` next to the repository); nothing of it is copied here. It needs tinker,
tinker-cookbook and a CPU torch (the ``tinker`` extra, see scripts/setup.sh).

OpenAI-format conversations reach a renderer exactly as ``../shared/corpus/golden/README.md``
("How the conversations were fed to each oracle") describes, which is how the goldens were
made:

* ``content: None`` becomes ``""``;
* a non-empty ``reasoning_content`` becomes a thinking part in front of the text part, and the
  key is kept as well (some renderers read the key, others the part);
* tool calls become tinker ``ToolCall`` objects whose ``arguments`` is the OpenAI JSON string
  verbatim (a dict, the HF convention, is serialised with ``json.dumps(ensure_ascii=False)``);
* tool messages keep ``tool_call_id`` and ``name``;
* with a tools list, a leading system message is taken out and its content becomes the
  ``system_prompt`` of ``create_conversation_prefix_with_tools`` (the cookbook's
  ``build_tool_prefixed_messages`` folding, including its rule that an explicitly empty system
  message is put back after the prefix for renderers that ask for it, and tools are dropped for a
  renderer that has no tool declarations, e.g. ``minimax_m2``);
* ``add_generation_prompt=True`` renders with ``build_generation_prompt`` (role assistant, no
  prefill), otherwise with ``build_supervised_example`` (the model-input tokens).

The text is ``tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)``.
Template knobs choose the renderer variant as the golden README's variant table says
(:data:`VARIANTS`); a knob the table does not know for that renderer is a ValueError. A
renderer that refuses a conversation (any exception while rendering) gives
:class:`~compiler.oracle.OracleRejected`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..oracle import EMPTY_CONVERSATION_MESSAGE, OracleRejected
from . import OracleUnavailable, TokenOracle, import_in_place, oracle_folder


def import_fireworks_renderers() -> None:
    """Import ``training.renderer`` from the oracles folder, registering its renderers with tinker.

    Raises OracleUnavailable naming what is missing (the folder, or tinker / tinker-cookbook / torch).
    """
    folder = oracle_folder("fireworks-cookbook")
    try:
        import_in_place(folder, "training.renderer")  # registers every renderer with tinker-cookbook
    except OracleUnavailable as exc:
        raise OracleUnavailable(
            f"{exc} (the Fireworks renderers need tinker, tinker-cookbook and torch: pip install -e '.[tinker]' "
            "and pip install --no-deps tinker-cookbook==0.6.1)"
        ) from None
    loaded = getattr(sys.modules["training"], "__file__", None) or ""
    if not str(Path(loaded).resolve()).startswith(str(folder.resolve())):
        raise OracleUnavailable(
            f"a different `training` package is already imported ({loaded}), not the one in {folder}"
        )


# ---------------------------------------------------------------- variants


def _registered(name: str) -> Callable[[Any], Any]:
    def build(tokenizer: Any) -> Any:
        from tinker_cookbook.renderers import get_renderer

        return get_renderer(name, tokenizer)

    return build


def _constructed(module: str, class_name: str, **arguments: Any) -> Callable[[Any], Any]:
    """A renderer class of the cookbook built with arguments no registered name carries."""

    def build(tokenizer: Any) -> Any:
        import importlib

        return getattr(importlib.import_module(f"training.renderer.{module}"), class_name)(tokenizer, **arguments)

    return build


def _key(knobs: Mapping[str, Any]) -> tuple:
    return tuple(sorted(knobs.items()))


#: Per oracle name: template knobs (as a sorted tuple of items) -> how to build that variant.
#: These are the rows of the golden README's variant table ("template_kwargs" column), plus the
#: knob spellings that select the same variant (e.g. enable_thinking=true for gemma4_thinking).
VARIANTS: dict[str, dict[tuple, Callable[[Any], Any]]] = {
    "minimax_m3": {
        (): _registered("minimax_m3"),
        (("thinking_mode", "adaptive"),): _registered("minimax_m3"),
        (("thinking_mode", "enabled"),): _constructed("minimax_m3", "MiniMaxM3Renderer", thinking_mode="enabled"),
        (("thinking_mode", "disabled"),): _constructed("minimax_m3", "MiniMaxM3Renderer", thinking_mode="disabled"),
    },
    "deepseek_v4": {
        (): _registered("deepseek_v4"),
        (("thinking_mode", "thinking"),): _registered("deepseek_v4"),
        (("drop_thinking", True), ("thinking_mode", "thinking")): _registered("deepseek_v4"),
        (("thinking_mode", "chat"),): _registered("deepseek_v4_disable_thinking"),
        (("drop_thinking", False), ("thinking_mode", "thinking")): _constructed(
            "deepseek_v4", "DeepseekV4Renderer", thinking_mode="thinking", strip_thinking_from_history=False
        ),
    },
    "glm5": {
        (): _registered("glm5"),
        (("clear_thinking", True),): _registered("glm5"),
        (("enable_thinking", True),): _registered("glm5"),
        (("clear_thinking", False),): _registered("glm5_preserve_thinking"),
    },
    "glm5_interleaved": {(): _registered("glm5_interleaved")},
    "glm5_preserve_thinking": {(): _registered("glm5_preserve_thinking")},
    "gemma4": {
        (): _registered("gemma4"),
        (("enable_thinking", False),): _registered("gemma4"),
        (("enable_thinking", True),): _registered("gemma4_thinking"),
    },
    "gemma4_thinking": {(): _registered("gemma4_thinking")},
}


def variant_builder(name: str, knobs: Mapping[str, Any]) -> Callable[[Any], Any]:
    """How to build renderer ``name`` for these knobs; a knob combination with no variant is a ValueError."""
    table = VARIANTS.get(name, {(): _registered(name)})
    key = _key(knobs)
    if key not in table:
        accepted = sorted({f"{k}={v!r}" for combination in table for k, v in combination}) or ["none"]
        raise ValueError(
            f"fireworks:{name} has no variant for knobs {dict(knobs)!r} (knob values it maps: {', '.join(accepted)})"
        )
    return table[key]


# ---------------------------------------------------------------- message conversion


def _arguments_string(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def to_fireworks_message(message: Mapping[str, Any], index: int) -> dict[str, Any]:
    """One OpenAI message as the golden README feeds it to a Fireworks renderer."""
    from tinker_cookbook.renderers import ToolCall

    if not isinstance(message, Mapping) or "role" not in message:
        raise ValueError(f"message {index}: expected a dict with a 'role', got {message!r}")
    converted: dict[str, Any] = {"role": message["role"]}
    content = message.get("content")
    content = "" if content is None else content
    reasoning = message.get("reasoning_content")
    if reasoning is not None:
        converted["reasoning_content"] = reasoning
        if reasoning and isinstance(content, str):
            content = [{"type": "thinking", "thinking": reasoning}, {"type": "text", "text": content}]
    converted["content"] = content
    if message.get("tool_calls"):
        calls = []
        for position, call in enumerate(message["tool_calls"]):
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
                raise ValueError(f"message {index}, tool_calls[{position}]: expected a function with a name")
            calls.append(
                ToolCall(
                    id=call.get("id"),
                    function=ToolCall.FunctionBody(
                        name=function["name"], arguments=_arguments_string(function.get("arguments", {}))
                    ),
                )
            )
        converted["tool_calls"] = calls
    for key in ("tool_call_id", "name"):
        if message.get(key) is not None:
            converted[key] = message[key]
    return converted


def declares_tools(renderer: Any) -> bool:
    """Whether the renderer implements tool declarations; the cookbook drops ``tools`` for one that
    does not (tinker's base ``create_conversation_prefix_with_tools`` raises NotImplementedError)."""
    from tinker_cookbook.renderers.base import Renderer

    return type(renderer).create_conversation_prefix_with_tools is not Renderer.create_conversation_prefix_with_tools


def fold_tools(renderer: Any, messages: list[dict[str, Any]], tools: list[dict] | None) -> list[dict[str, Any]]:
    """Prepend the renderer's tool-declaration prefix, folding a leading system message into it."""
    functions = [
        tool["function"]
        for tool in tools or ()
        if isinstance(tool, Mapping) and isinstance(tool.get("function"), Mapping)
    ]
    if not functions or not declares_tools(renderer):
        return messages
    messages = list(messages)
    system_prompt = ""
    explicitly_empty = False
    if messages and messages[0]["role"] == "system":
        content = messages.pop(0)["content"]
        if isinstance(content, str):
            system_prompt, explicitly_empty = content, content == ""
        else:
            system_prompt = "\n".join(part.get("text", "") for part in content if part.get("type") == "text")
    prefix = list(renderer.create_conversation_prefix_with_tools(functions, system_prompt=system_prompt))
    if explicitly_empty and getattr(renderer, "_preserves_explicit_empty_system_with_tools", False):
        prefix.append({"role": "system", "content": ""})
    return prefix + messages


# ---------------------------------------------------------------- the oracle


class FireworksOracle(TokenOracle):
    """A Fireworks cookbook renderer with the interface of :class:`compiler.oracle.TemplateOracle`."""

    def __init__(self, name: str, tokenizer: Any):
        if tokenizer is None:
            raise OracleUnavailable(
                f"fireworks:{name} renders token ids, so it needs a tokenizer (a synthetic one is fine: "
                "--corpus for an override's corpus tokenizer, or --tokenizer)"
            )
        import_fireworks_renderers()
        from tinker_cookbook.renderers import get_renderer

        try:
            get_renderer(name, tokenizer)
        except Exception as exc:  # unknown names raise tinker's RendererError (a ValueError)
            raise ValueError(f"fireworks:{name}: {exc}") from None
        self.name = name
        self.tokenizer = tokenizer
        self.special_tokens: dict[str, str] = dict(tokenizer.special_tokens_map)
        self._renderers: dict[tuple, Any] = {}

    def __repr__(self) -> str:
        return f"FireworksOracle({self.name!r})"

    def renderer(self, knobs: Mapping[str, Any] | None) -> Any:
        """The renderer variant these knobs select (built once)."""
        knobs = dict(knobs or {})
        key = _key(knobs)
        if key not in self._renderers:
            self._renderers[key] = variant_builder(self.name, knobs)(self.tokenizer)
        return self._renderers[key]

    def conversation(self, messages: list[dict], tools: list[dict] | None, knobs: Mapping | None = None) -> list[dict]:
        """The tinker messages the renderer is given (after tool folding)."""
        converted = [to_fireworks_message(message, index) for index, message in enumerate(messages)]
        return fold_tools(self.renderer(knobs), converted, tools)

    def render_ids(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = False,
        knobs: dict | None = None,
    ) -> list[int]:
        renderer = self.renderer(knobs)
        try:
            if len(messages) == 0:
                raise ValueError(EMPTY_CONVERSATION_MESSAGE)
            conversation = self.conversation(messages, tools, knobs)
            if add_generation_prompt:
                model_input = renderer.build_generation_prompt(conversation)
            else:
                model_input, _weights = renderer.build_supervised_example(conversation)
            return list(model_input.to_ints())
        except Exception as exc:
            raise OracleRejected(str(exc), type(exc).__name__) from exc

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

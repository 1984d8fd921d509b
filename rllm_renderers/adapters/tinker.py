"""tinker-cookbook renderers (and Fireworks' cookbook) behind our renderer protocol.

The ``tinker`` extra installs tinker-cookbook 0.6.1 (``--no-deps``) plus what its renderers
import. A tinker renderer speaks its own message format (content parts for thinking, pydantic
``ToolCall`` objects, tools as a system-prompt prefix); :class:`TinkerAdapter` converts
OpenAI-format messages in and parsed messages out, and gets the guarded bridge of
:mod:`.bridge`. Fireworks' cookbook registers extra renderer names with tinker when its
``training.renderer`` package is importable; :func:`import_fireworks` imports it guarded.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..types import Message, ParsedResponse, ParsedToolCall, ToolCallParseStatus, ToolSpec
from .bridge import BridgedAdapter

logger = logging.getLogger(__name__)

__all__ = ["TinkerAdapter", "create", "import_fireworks", "recommended_name"]

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def import_fireworks() -> Any | None:
    """Fireworks' ``training.renderer`` (importing it registers its renderers with tinker), or None."""
    try:
        import training.renderer as fireworks  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - absent, or some unrelated `training` package: not Fireworks
        return None
    return fireworks


def recommended_name(model: str) -> str | None:
    """The renderer name the cookbooks recommend for ``model`` (Fireworks first), or None.

    Raises ImportError when tinker-cookbook is not installed.
    """
    from tinker_cookbook import model_info

    fireworks = import_fireworks()
    lookups = [getattr(getattr(fireworks, "model_info", None), "get_recommended_renderer_name", None)]
    lookups.append(model_info.get_recommended_renderer_name)
    for lookup in lookups:
        if lookup is None:
            continue
        try:
            return lookup(model)
        except Exception:  # noqa: BLE001 - ConfigurationError / KeyError for an unknown model
            continue
    return None


def create(name: str, tokenizer: Any, model: str | None = None) -> TinkerAdapter:
    """Build tinker's renderer ``name`` for ``tokenizer`` and wrap it.

    Raises ImportError without tinker-cookbook, LookupError for an unknown name.
    """
    from tinker_cookbook import renderers as tinker_renderers

    import_fireworks()
    try:
        inner = tinker_renderers.get_renderer(
            name, tokenizer, model_name=model or getattr(tokenizer, "name_or_path", None)
        )
    except tinker_renderers.RendererError as exc:
        if "Unknown renderer" in str(exc):
            raise LookupError(str(exc)) from None
        raise
    return TinkerAdapter(inner, name=name, model=model)


# --- message conversion -----------------------------------------------------------------


def _tool_call_to_tinker(call: Any) -> Any:
    from tinker_cookbook.renderers import ToolCall

    if isinstance(call, ToolCall):
        return call
    if not isinstance(call, dict):
        raise ValueError(f"malformed tool call: {call!r}")
    function = call.get("function", call)
    arguments = function.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(function=ToolCall.FunctionBody(name=function["name"], arguments=arguments), id=call.get("id"))


def to_tinker_message(message: Message) -> dict[str, Any]:
    """An OpenAI-format message as tinker's ``Message`` (messages already in tinker form pass)."""
    converted: dict[str, Any] = {"role": message["role"]}
    content = message.get("content")
    content = "" if content is None else content
    reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is not None and isinstance(content, str):
        content = [{"type": "thinking", "thinking": reasoning}, {"type": "text", "text": content}]
    converted["content"] = content
    if message.get("tool_calls"):
        converted["tool_calls"] = [_tool_call_to_tinker(call) for call in message["tool_calls"]]
    for key in ("unparsed_tool_calls", "tool_call_id", "name"):
        if message.get(key) is not None:
            converted[key] = message[key]
    return converted


def to_tinker_tool(tool: ToolSpec) -> dict[str, Any]:
    """An OpenAI tool (``{"type": "function", "function": {...}}``) as tinker's flat ToolSpec."""
    function = tool.get("function", tool)
    return {
        "name": function["name"],
        "description": function.get("description", ""),
        "parameters": function.get("parameters", {"type": "object", "properties": {}}),
    }


def _text_and_reasoning(content: Any) -> tuple[str, str | None]:
    if isinstance(content, str):
        return content, None
    text, thinking = [], []
    for part in content or []:
        if part.get("type") == "text":
            text.append(part.get("text", ""))
        elif part.get("type") == "thinking":
            thinking.append(part.get("thinking", ""))
    return "".join(text), ("".join(thinking) if thinking else None)


def to_parsed_response(message: dict[str, Any], termination: Any) -> ParsedResponse:
    """tinker's parsed ``Message`` as our ParsedResponse (raw tool-call text is reconstructed)."""
    content, reasoning = _text_and_reasoning(message.get("content"))
    calls = []
    for call in message.get("tool_calls") or []:
        name, arguments = call.function.name, call.function.arguments
        try:
            parsed, status = json.loads(arguments), ToolCallParseStatus.OK
        except (TypeError, ValueError):
            parsed, status = arguments, ToolCallParseStatus.INVALID_JSON
        raw = json.dumps({"name": name, "arguments": parsed}, ensure_ascii=False)
        calls.append(ParsedToolCall(raw=raw, name=name, arguments=parsed, status=status, id=call.id))
    for unparsed in message.get("unparsed_tool_calls") or []:
        calls.append(ParsedToolCall(raw=unparsed.raw_text, status=ToolCallParseStatus.MALFORMED_STRUCTURE))
    clean = getattr(termination, "is_clean", True)
    complete = None if reasoning is None else (clean or bool(content))
    return ParsedResponse(content=content, reasoning_content=reasoning, tool_calls=calls, reasoning_complete=complete)


# --- the adapter ------------------------------------------------------------------------


class TinkerAdapter(BridgedAdapter):
    """A tinker-cookbook ``Renderer`` (``inner``) speaking our protocol."""

    def __init__(self, inner: Any, *, name: str, model: str | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.name = name
        self.model = model
        self.tokenizer = inner.tokenizer
        self.vocab_size = len(self.tokenizer)
        self._stop_ids = self._stop_token_ids()

    def __repr__(self) -> str:
        return f"TinkerAdapter({self.name!r}, {type(self.inner).__name__})"

    def _stop_token_ids(self) -> list[int]:
        ids = []
        for stop in self.inner.get_stop_sequences():
            if isinstance(stop, int):
                ids.append(stop)
                continue
            encoded = self.tokenizer.encode(stop, add_special_tokens=False)
            if len(encoded) == 1:  # a string stop that is one token; multi-token stops have no id
                ids.append(encoded[0])
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if not ids and isinstance(eos, int):
            ids.append(eos)
        return list(dict.fromkeys(int(t) for t in ids))

    @property
    def is_prefix_stable(self) -> bool:
        return bool(getattr(self.inner, "has_extension_property", False))

    def get_stop_token_ids(self) -> list[int]:
        return list(self._stop_ids)

    def _tinker_conversation(self, messages: list[Message], tools: list[ToolSpec] | None) -> list[dict[str, Any]]:
        converted = [to_tinker_message(m) for m in messages]
        if tools:
            system = ""
            if converted and converted[0]["role"] == "system":
                system, _ = _text_and_reasoning(converted.pop(0)["content"])
            prefix = self.inner.create_conversation_prefix_with_tools([to_tinker_tool(t) for t in tools], system)
            converted = list(prefix) + converted
        return converted

    def _render_ids(
        self, messages: list[Message], tools: list[ToolSpec] | None, add_generation_prompt: bool
    ) -> list[int]:
        if not messages:
            raise ValueError("Cannot render an empty conversation. Provide at least one message.")
        try:
            conversation = self._tinker_conversation(messages, tools)
            if add_generation_prompt:
                return self.inner.build_generation_prompt(conversation).to_ints()
            model_input, _ = self.inner.build_supervised_example(conversation)
            return model_input.to_ints()
        except ValueError:  # tinker's RendererError is a ValueError
            raise
        except (NotImplementedError, AssertionError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"tinker renderer {self.name!r} cannot render this input: {exc!r}") from exc

    def _parse(self, token_ids: list[int], tools: list[ToolSpec] | None) -> ParsedResponse:
        message, termination = self.inner.parse_response(token_ids)
        return to_parsed_response(message, termination)

    def _decode_lenient(self, ids: list[int]) -> str:
        try:
            return self.tokenizer.decode(ids, skip_special_tokens=True)
        except Exception:  # noqa: BLE001
            return ""

    def _completion_messages(self, completion_ids: list[int]) -> list[Message]:
        """tinker's own parse of the completion, kept in tinker's message form."""
        message, termination = self.inner.parse_response(completion_ids)
        if not getattr(termination, "is_clean", True):
            return []
        return [dict(message)]

    # --- pickling: rebuild from the name, never through tinker's own (Hub-loading) unpickler ---

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "tokenizer": self.tokenizer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        rebuilt = create(state["name"], state["tokenizer"], state["model"])
        self.__dict__.update(rebuilt.__dict__)

"""A parsed sampled turn as the assistant message the template renders again."""

from __future__ import annotations

from ..types import Message

__all__ = ["RENDERABLE_CALLS", "message_from_parse"]

#: Parsed tool-call statuses the template can render again: a call of an undeclared tool, or one
#: with an empty name, is still a well-formed call.
RENDERABLE_CALLS = ("ok", "unknown_tool", "missing_name")


def message_from_parse(parsed) -> Message:
    """The assistant message a parsed turn (:class:`rllm_renderers.turns.parsing.TextParse`) holds."""
    message: Message = {"role": "assistant", "content": parsed.content or ""}
    if parsed.reasoning is not None:
        message["reasoning_content"] = parsed.reasoning
    if parsed.calls:
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{index}",
                "type": "function",
                "function": {"name": call.name or "", "arguments": call.arguments},
            }
            for index, call in enumerate(parsed.calls)
        ]
    return message

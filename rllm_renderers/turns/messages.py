"""A parsed sampled turn as the assistant message the template renders again."""

from __future__ import annotations

from ..types import Message

__all__ = ["BRIDGEABLE_CALLS", "RENDERABLE_CALLS", "message_from_parse"]

#: Parsed tool-call statuses the template can render again: a call of an undeclared tool, or one
#: with an empty name, is still a well-formed call.
RENDERABLE_CALLS = ("ok", "unknown_tool", "missing_name")

#: Those the bridge renders the next messages after. Not a call whose name does not parse: the
#: tokens may not say which name the model wrote (Gemma-4's ``call:{x{a:1}}`` is the tool ``{x``, or
#: no name and other arguments), and a template may write the name again in a later message (a tool
#: result's, found through the call's id): rendering the turn again cannot tell the two apart.
BRIDGEABLE_CALLS = ("ok", "unknown_tool")


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

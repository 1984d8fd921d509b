"""A parsed sampled turn as the assistant message the template renders again."""

from __future__ import annotations

from ..types import Message

__all__ = ["RENDERABLE_CALLS", "content_text", "message_from_parse"]

#: Parsed tool-call statuses the template can render again: a call of an undeclared tool, or one
#: with an empty name, is still a well-formed call.
RENDERABLE_CALLS = ("ok", "unknown_tool", "missing_name")


def message_from_parse(parsed, content_parts: bool = False) -> Message:
    """The assistant message a parsed turn (:class:`rllm_renderers.turns.parsing.TextParse`) holds;
    ``content_parts``: its text as one OpenAI text part, for a template that writes no string content
    (``TurnFormat.content_parts``)."""
    content = parsed.content or ""
    message: Message = {"role": "assistant", "content": [{"type": "text", "text": content}] if content_parts else content}
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


def content_text(content) -> str | None:
    """A message's content as text: a string as it is, the text parts of a list joined; else None."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        texts = [part.get("text") for part in content if isinstance(part, dict) and part.get("type", "text") == "text"]
        return "".join(text for text in texts if isinstance(text, str))
    return None

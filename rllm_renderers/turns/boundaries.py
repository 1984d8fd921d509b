"""Small helpers about turns shared by generated renderers and the adapters."""

from __future__ import annotations

from collections.abc import Sequence

from .formats import TurnFormat
from ..types import Message


def close_lead_of(turn: TurnFormat, text: str, stop: str | None) -> str:
    """The close's text before its stop that ends ``text`` (``\n`` of ``\n</assistant>``), or, when the
    next header ended the turn, what the template writes before that header; "" for none. Not content."""
    if not stop:
        return ""
    lead = turn.close[: len(turn.close) - len(stop)] if turn.close.endswith(stop) else ""
    lead = lead if turn.close else turn.after_close
    return lead if lead and text.endswith(lead) else ""


def content_lead_of(turn: TurnFormat, text: str, tools) -> str:
    """The lead the template writes before a plain answer's content that starts ``text`` ("" for none):
    sampled, but not content (``TurnFormat.content_lead``, or its tool-declaring variant)."""
    lead = turn.content_lead
    if tools and turn.content_lead_with_tools is not None:
        lead = turn.content_lead_with_tools
    return lead if lead and text.startswith(lead) else ""


def cut_at_stop(completion: list[int], stop_ids: Sequence[int], close_id: int | None) -> list[int] | None:
    """The completion as the next prompt must contain it.

    Cut just after the first stop token; a completion truncated before any stop gets ``close_id``
    appended (``None`` when the backend cannot say which token closes a turn).
    """
    stops = set(stop_ids)
    for index, token in enumerate(completion):
        if token in stops:
            return completion[: index + 1]
    if close_id is None:
        return None
    return completion + [close_id]


def tool_names(messages: list[Message]) -> list[str | None]:
    """Per message, the function name of a tool result (from ``name`` or its call id), else None."""
    names_by_id: dict[str, str] = {}
    result: list[str | None] = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            if isinstance(call, dict) and call.get("id") and isinstance(function, dict) and function.get("name"):
                names_by_id[call["id"]] = function["name"]
        if message.get("role") == "tool":
            result.append(message.get("name") or names_by_id.get(message.get("tool_call_id") or ""))
        else:
            result.append(None)
    return result

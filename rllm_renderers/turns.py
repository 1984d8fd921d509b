"""Small helpers about turns shared by generated renderers and the adapters."""

from __future__ import annotations

from collections.abc import Sequence

from .types import Message


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

"""Where a conversation holds text no tokenizer can encode: a lone surrogate (``"\\ud800"``).

Python strings may hold surrogate code points that are not UTF-8, and a JSON decoder produces
them from ``"\\ud800"``; tokenizers refuse them (``UnicodeEncodeError``, or a ``TypeError`` from
the HF backend). Rendering does not look for them on every call: only when encoding failed does
the renderer search the inputs, to name the message and field in a ``ValueError``.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_path(value: Any, path: str) -> str | None:
    """``path`` extended to the first string inside ``value`` holding a lone surrogate, else None
    (walked with a stack: no recursion on deep values)."""
    stack = [(value, path)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return path
        elif isinstance(value, dict):
            items = list(value.items())
            stack.extend((item, f"{path}.{key}") for key, item in reversed(items))
            stack.extend((key, f"{path} key {key!r}") for key, _ in reversed(items) if isinstance(key, str))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, f"{path}[{index}]") for index, item in reversed(list(enumerate(value))))
    return None


def unencodable_input(messages: Any, tools: Any = None, what: str = "message") -> str | None:
    """``"message 2 field 'content'"`` (or ``tools[0]...``) for the first lone surrogate in the
    inputs, else None. ``what``: how a message is named (``"new_messages"`` numbers them ``[k]``)."""
    for index, message in enumerate(messages if isinstance(messages, (list, tuple)) else ()):
        if isinstance(message, dict):
            for key, value in message.items():
                found = surrogate_path(value, str(key))
                if found is not None:
                    name = f"message {index}" if what == "message" else f"{what}[{index}]"
                    return f"{name} field {found!r}"
    return surrogate_path(tools, "tools") if tools is not None else None


def refuse_unencodable(error: Exception, messages: Any, tools: Any = None, what: str = "message") -> None:
    """Raise a ValueError naming the field behind an encoding ``error`` when a lone surrogate in the
    inputs explains it; return (the caller re-raises ``error``) when none does."""
    where = unencodable_input(messages, tools, what)
    if where is not None:
        raise ValueError(f"{where} holds a lone surrogate (not UTF-8 text): no tokenizer can encode it") from error

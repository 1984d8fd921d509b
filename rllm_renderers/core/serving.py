"""What an inference server does to chat messages before its chat template renders them.

A renderer built with ``served_by="vllm"`` renders what that server renders: its prompts (and the
bridge's readings of a prompt the server rendered) are then the server's, not those of
``apply_chat_template`` on the raw messages. Only the server's own, documented normalizations are
applied; they are cited from the server's source, not guessed.

**vLLM** (``vllm/entrypoints/chat_utils.py``, ``_parse_chat_message_content`` and
``_postprocess_messages``, for a template that takes its content as a string):

* ``content: None`` becomes an empty list of parts, joined as ``""`` (transformers, on the raw
  message, drops the key: a template then sees no content);
* ``content`` as a list of text parts is joined with ``"\\n"`` (parts whose ``text`` is None are
  skipped);
* an assistant message's ``tool_calls``: an empty list is dropped; each call's ``arguments``
  string is parsed with ``json.loads`` (``"null"`` gives ``{}``), and missing or empty arguments
  are ``{}`` (the template then re-writes the dict in its own way: with ``tojson``, spaces after
  ``:`` and ``,`` where the client sent compact JSON);
* an assistant message's ``reasoning`` is passed on as ``reasoning_content`` too.

SGLang is not profiled here (its message handling was not checked against its source).
"""

from __future__ import annotations

import json
from typing import Any

SERVERS = ("vllm",)


def check_server(served_by: Any) -> str | None:
    """``served_by`` if it names a profiled server (or is None); else a ValueError naming the choices."""
    if served_by is None or served_by in SERVERS:
        return served_by
    raise ValueError(f"served_by must be None or one of {SERVERS}, got {served_by!r}")


def as_served(message: Any, served_by: str | None, index: int, content_parts: bool = False) -> Any:
    """``message`` as the server hands it to its template (``index``: its position, for errors;
    ``content_parts``: the template reads content as a list of parts, which vLLM then keeps)."""
    if served_by is None or not isinstance(message, dict):
        return message
    served = dict(message)
    content = served.get("content")
    if content is None:
        served["content"] = [] if content_parts else ""
    elif isinstance(content, (list, tuple)) and not content_parts:
        served["content"] = "\n".join(
            part if isinstance(part, str) else part["text"]
            for part in content
            if isinstance(part, str) or (isinstance(part, dict) and part.get("text") is not None)
        )
    if served.get("role") == "assistant":
        if served.get("reasoning") is not None:
            served["reasoning_content"] = served["reasoning"]
        calls = served.get("tool_calls")
        if isinstance(calls, (list, tuple)):
            if not calls:
                del served["tool_calls"]
            else:
                served["tool_calls"] = [parsed_arguments(call, index) for call in calls]
    return served


def parsed_arguments(call: Any, index: int) -> Any:
    """A tool call whose ``arguments`` are what vLLM's ``_postprocess_messages`` makes of them."""
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call  # (the renderer's own check names what is wrong with it)
    arguments = call["function"].get("arguments")
    if isinstance(arguments, (dict, list)):
        return call
    if not arguments:
        parsed = {}
    else:
        try:
            parsed = json.loads(arguments)
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(
                f"malformed tool call in message {index}: vLLM parses arguments as JSON and would refuse "
                f"{arguments!r} ({exc})"
            ) from None
        if parsed is None:
            parsed = {}
    return {**call, "function": {**call["function"], "arguments": parsed}}

"""Extend a sampled turn with the next messages without re-rendering history.

``bridge_to_next_turn(p, c, new)`` returns tokens that start with ``p + c`` byte
for byte, followed by exactly what the template renders for ``new`` plus the
generation prompt, or None ("re-render"). The tokens for ``new`` come from the
renderer itself (so from the template): it renders a small stand-in history
ending with the sampled assistant turn (parsed back from ``c``), once without
and once with ``new``, and takes what the second adds.

It returns None when:

* there is no previous prompt, no new message, or an assistant message among them;
* the template renders ``new`` differently depending on earlier history (two
  stand-in histories disagree), so the right tokens cannot be known from ids;
* the template rejects ``new`` after such a turn;
* the template would rewrite the sampled turn (drop its reasoning, re-serialise
  its tool arguments, render its close differently) and the retention policy is
  ``"template"``. With ``"verbatim"`` the sampled tokens are kept as they are.

A completion truncated before its close gets the template's close token; one
that ran past a stop token is cut right after it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .turns import cut_at_stop, tool_names
from .types import Message, RenderedTokens, ToolSpec

if TYPE_CHECKING:  # pragma: no cover
    from .base import GeneratedRenderer

STAND_IN_USER = {"role": "user", "content": "Hello."}
RETENTION_POLICIES = ("template", "verbatim")
logger = logging.getLogger(__name__)
_explained: set[type] = set()  # classes whose "cannot bridge" reason was logged


def unlearned_reason(renderer: "GeneratedRenderer") -> str | None:
    """Why this renderer can never bridge (turn facts it did not learn), logged once per class."""
    if not renderer.UNLEARNED and renderer.TURN is not None:
        return None
    reason = "; ".join(f"{fact}: {why}" for fact, why in renderer.UNLEARNED.items()) or "no turn format"
    if type(renderer) not in _explained:
        _explained.add(type(renderer))
        logger.warning("%s.bridge_to_next_turn always returns None: %s", type(renderer).__name__, reason)
    return reason


def closed_completion(renderer: "GeneratedRenderer", completion_ids: list[int]) -> list[int] | None:
    """The completion cut right after its first stop, or with the template's close appended.

    None when that cannot be done exactly: a stop string that ends inside a token, or a
    truncated completion whose close is text of several tokens (its tokens would depend on
    what precedes it). A turn that nothing closes (the next header ends it) needs no close.
    """
    completion = list(completion_ids)
    close = renderer.TURN.close
    try:
        close_id = renderer.encoder.token_id(close) if close else None
    except ValueError:
        close_id = None
    stop_ids = renderer.get_stop_token_ids()
    text_stops = [stop for stop in renderer.get_stop_strings() if stop not in renderer.encoder.added_token_strings]
    if text_stops and not any(token in set(stop_ids) for token in completion):
        text = renderer.decode(completion)
        found = [(text.find(stop) + len(stop), stop) for stop in text_stops if stop in text]
        if found:
            stop_end, stop = min(found)
            end = renderer._token_at(completion, stop_end)
            return completion[:end] if renderer.decode(completion[:end]).endswith(stop) else None
    cut = cut_at_stop(completion, stop_ids, close_id)
    if cut is None and not close:
        return completion  # nothing closes the turn: a truncated completion is complete as it is
    return cut


def header_stop(renderer: "GeneratedRenderer", completion_text: str) -> str:
    """The next message's header a completion ended on, when the next header ends turns (GLM)."""
    if renderer.TURN.close:
        return ""
    return next((stop for stop in renderer.get_stop_strings() if completion_text.endswith(stop)), "")


def sampled_turn_as_message(renderer: "GeneratedRenderer", completion_ids: list[int], tools) -> Message | None:
    """The assistant message the completion encodes, or None when it does not parse cleanly."""
    parsed = renderer.parse_response(completion_ids, tools=tools)
    if parsed.reasoning_complete is False or any(call.status != "ok" for call in parsed.tool_calls):
        return None
    message: Message = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning_content is not None:
        message["reasoning_content"] = parsed.reasoning_content
    if parsed.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{index}", "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for index, call in enumerate(parsed.tool_calls)
        ]
        if not parsed.content:
            message["content"] = None
    return message


def stand_in_histories(assistant: Message) -> list[list[list[Message]]]:
    """Kinds of history ending with the sampled turn, each as alternatives to try in order.

    A bare one, and one with an earlier tool round (templates such as DeepSeek-V3
    render a tool result differently when an earlier one exists). Templates disagree
    on what an earlier tool-calling turn may look like, hence the alternatives.
    """
    earlier_call = {"id": "call00001", "type": "function", "function": {"name": "lookup", "arguments": {"q": "x"}}}
    result = {"role": "tool", "tool_call_id": "call00001", "content": "result"}
    earlier_turns = [
        {"role": "assistant", "content": None, "tool_calls": [earlier_call]},
        {"role": "assistant", "content": "", "tool_calls": [earlier_call]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [earlier_call]},
    ]
    return [
        [[STAND_IN_USER, assistant]],
        [[STAND_IN_USER, earlier, result, assistant] for earlier in earlier_turns],
    ]


def bridge_turn(
    renderer: "GeneratedRenderer",
    previous_prompt_ids: list[int],
    previous_completion_ids: list[int],
    new_messages: list[Message],
    *,
    tools: list[ToolSpec] | None = None,
) -> RenderedTokens | None:
    if not previous_prompt_ids or not new_messages:
        return None
    if any(message.get("role") == "assistant" for message in new_messages):
        return None
    if unlearned_reason(renderer) is not None:
        return None
    completion = closed_completion(renderer, previous_completion_ids)
    if completion is None:
        return None
    assistant = sampled_turn_as_message(renderer, completion, tools)
    if assistant is None:
        return None
    completion_text = renderer.decode(completion)
    # a turn ended by the next message's header: that header is already in the completion
    header = header_stop(renderer, completion_text)
    completion_text = completion_text[: len(completion_text) - len(header)]
    # what the template writes after the turn, unless the model already wrote it before the header
    after_close = renderer.TURN.after_close
    owed = "" if header and after_close and completion_text.endswith(after_close) else after_close
    generation_prompt = renderer.generation_prompt()
    suffixes: set[str] = set()
    faithful = True
    for alternatives in stand_in_histories(assistant):
        rendered = first_rendering(renderer, alternatives, new_messages, tools)
        if rendered is None:
            continue  # the template rejects this kind of history (e.g. it has no tool role)
        history, before, after_output = rendered
        after = after_output.text()
        new_start = message_start(after_output, len(history))
        turn_start = message_start(after_output, len(history) - 1)
        if new_start is None or turn_start is None:
            return None
        turn_text = after[turn_start:new_start]
        expected_turn = generation_prompt + completion_text + owed
        if not after.startswith(before) or turn_text != expected_turn:
            faithful = False
        suffixes.add(owed + after[new_start:])
    if len(suffixes) != 1:
        return None  # rejected everywhere, or rendering the new messages depends on earlier history
    if not faithful and renderer.thinking_retention == "template":
        return None
    suffix = suffixes.pop()
    if header:
        if not suffix.startswith(header):
            return None  # the model opened a different message than the one that follows
        suffix = suffix[len(header) :]
    prefix_ids = list(previous_prompt_ids) + completion
    suffix_ids, suffix_offsets = renderer.encoder.encode_with_offsets(suffix)
    indices = suffix_message_indices(renderer, new_messages, tools, suffix, suffix_offsets)
    return RenderedTokens(
        token_ids=prefix_ids + suffix_ids,
        message_indices=[-1] * len(prefix_ids) + indices,
        sampled_mask=[False] * (len(prefix_ids) + len(suffix_ids)),
        is_content=[],
        message_roles=[message.get("role", "") for message in new_messages],
        message_tool_names=tool_names(new_messages),
    )


def first_rendering(renderer, alternatives, new_messages, tools):
    """(history, text without the new messages, output with them) for the first history that renders."""
    for history in alternatives:
        try:
            before = renderer.render_text(history, tools=tools)
            after_output = renderer._render_output(history + list(new_messages), tools, True)
        except ValueError:
            continue
        return history, before, after_output
    return None


def message_start(output: Any, message_index: int) -> int | None:
    """Character offset where the template starts rendering ``message_index``."""
    for offset, index in output.message_spans():
        if index == message_index:
            return offset
    return None


def suffix_message_indices(renderer, new_messages, tools, suffix: str, offsets: list[int]) -> list[int]:
    """Attribute bridge tokens to new messages by locating each message's content in the suffix."""
    indices = [-1] * len(offsets)
    cursor = 0
    boundaries = []
    for index, message in enumerate(new_messages):
        content = message.get("content")
        if isinstance(content, str) and content:
            at = suffix.find(content, cursor)
            if at >= 0:
                boundaries.append((at, at + len(content), index))
                cursor = at + len(content)
    for token, offset in enumerate(offsets):
        for start, end, index in boundaries:
            if start <= offset < end:
                indices[token] = index
    return indices

"""Extend a sampled turn with the next messages without re-encoding history.

Contract of ``bridge_turn(renderer, p, c, new, tools=..., messages=...)``:

* ``c'`` is the completion ``c`` cut right after its first stop token, or, when it was
  truncated before any, ``c`` with the template's close token appended.
* The result is ``None`` or tokens ``p + c' + S``, where ``S`` is exactly what the template
  writes after the sampled turn for ``new`` and the generation prompt, given the real
  history: ``S`` is cut from ``render(history + [sampled turn] + new,
  add_generation_prompt=True)`` right after the sampled turn's close and encoded alone
  (after the close token, as the tokenizer sees it in the full text).
* ``thinking_retention="template"``: the result is non-None exactly when that full render
  starts with the text of ``p + c'`` (the template does not rewrite history), and then its
  text is the full render's text. ``"verbatim"``: the sampled tokens are kept as sampled,
  also where the template would rewrite them (drop reasoning), as long as the template writes
  the turn's parsed content back when it is the last message (else the parse missed structure
  and the history would be a guess: ``None``). When the template writes the new messages
  inside the sampled turn (Gemma-4's tool responses), the turn ends at its first stop.

History-dependent template state (a flag set by the first tool result of the conversation,
the parity of a message's index, a system prompt) comes from the real history, never from
stand-ins: ``messages=`` (the conversation ``p`` was rendered from, without the sampled turn),
or else the renderer's memory of prompts it produced itself (``render_ids`` with the
generation prompt, and earlier bridge results), keyed by the prompt's exact ids (and the same
tools). A prompt the renderer cannot trace back to its messages gets ``None``.

``None`` also when: no previous prompt or no new message; an assistant message among the new
ones; the completion does not parse into a turn the template can render (a malformed tool
call); the template rejects the new messages; the previous prompt was not rendered with the
generation prompt. A completion that leaves its reasoning open is read as that reasoning, a
guess: it bridges only where the template renders that turn exactly as sampled, also under
"verbatim".

Cost: the new messages (and ``messages=``, when given) are converted once for the template;
the translated template runs once over the whole conversation (twice when the prompt is not
remembered: its text is needed too); no tokenizer work on the history: only the completion is
decoded and only ``S`` is encoded.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from . import template_runtime as jinja
from .parsing import as_token_ids, decoded_prefix_lengths, token_index_at, token_sequence
from .turns import cut_at_stop, tool_names
from .types import Message, RenderedTokens, ToolSpec

if TYPE_CHECKING:  # pragma: no cover
    from .base import GeneratedRenderer
    from .output import RenderOutput

RETENTION_POLICIES = ("template", "verbatim")
#: Parsed tool-call statuses the template can render again: a call of an undeclared tool, or one
#: with an empty name, is still a well-formed call.
RENDERABLE_CALLS = ("ok", "unknown_tool", "missing_name")
#: Tokens at the end of the previous prompt compared with the end of the history's rendering.
PROMPT_TAIL_TOKENS = 16


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



# --- inputs -------------------------------------------------------------------------------


def checked_new_messages(new_messages: Any) -> list[Message]:
    """The new messages as a list of dicts with a string role; anything else is a ValueError naming it."""
    if not isinstance(new_messages, (list, tuple)):
        raise ValueError(f"new_messages must be a list of message dicts, got {type(new_messages).__name__}")
    for index, message in enumerate(new_messages):
        if not isinstance(message, dict):
            raise ValueError(f"new_messages[{index}] must be a message dict, got {type(message).__name__}")
        if not isinstance(message.get("role"), str):
            raise ValueError(f"new_messages[{index}] has no string 'role'")
    return list(new_messages)


def sums_to_an_int(ids: list) -> bool:
    """Whether ``ids`` holds integers only, checked in one C pass that is several times cheaper than
    checking each element's type: a float, complex or Decimal makes the sum another type, anything
    that is not a number raises. (An int subclass such as bool passes: it equals its int.) Asked of
    a prompt found in memory, where floats equal to its ids would compare equal."""
    try:
        return type(sum(ids)) is int
    except TypeError:
        return False


# --- the sampled turn ---------------------------------------------------------------------


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
            end = token_index_at(decoded_prefix_lengths(renderer.decode, completion), stop_end)
            return completion[:end] if renderer.decode(completion[:end]).endswith(stop) else None
    cut = cut_at_stop(completion, stop_ids, close_id)
    if cut is None and not close:
        return completion  # nothing closes the turn: a truncated completion is complete as it is
    return cut


def sampled_turn_as_message(renderer: "GeneratedRenderer", completion_ids: list[int], tools) -> tuple[Message, bool] | None:
    """The assistant message the completion encodes, and whether it is only a guess; None when it
    does not parse cleanly.

    A turn that leaves its reasoning open is a guess (its reasoning is the open block's text): it
    may only bridge where the template renders it exactly as sampled. A tool-call turn without
    text gets ``content=""``: transformers drops ``content=None`` before rendering, and several
    templates refuse an assistant message without content.
    """
    parsed = renderer.parse_response(completion_ids, tools=tools)
    if any(call.status not in RENDERABLE_CALLS for call in parsed.tool_calls):
        return None
    message: Message = {"role": "assistant", "content": parsed.content or ""}
    if parsed.reasoning_content is not None:
        message["reasoning_content"] = parsed.reasoning_content
    if parsed.tool_calls:
        message["tool_calls"] = [
            {"id": call.id or f"call_{index}", "type": "function", "function": {"name": call.name or "", "arguments": call.arguments}}
            for index, call in enumerate(parsed.tool_calls)
        ]
    return message, parsed.reasoning_complete is False


def renders_by_call_ids(renderer: "GeneratedRenderer", history: "History", sampled: Message, new, tools, text: str) -> bool:
    """Whether the template renders the new tool results differently depending on which sampled call
    each answers, when the completion does not carry call ids (DeepSeek-V4 sorts results into call
    order by ``tool_call_id``): then the right order cannot be known from the ids, so no bridge.

    Rendered once more with the ids of the new tool messages given to the calls in reverse order.
    """
    calls = sampled.get("tool_calls") or []
    answered = [message.get("tool_call_id") for message in new if message.get("role") == "tool"]
    if len(calls) < 2 or len(answered) < 2:
        return False
    if any(call["id"] != f"call_{index}" for index, call in enumerate(calls)):
        return False  # the completion carries its own call ids (Kimi): the template sees them
    ids = (answered[::-1] + [f"call_{index}" for index in range(len(calls))])[: len(calls)]
    swapped = {**sampled, "tool_calls": [{**call, "id": ids[index]} for index, call in enumerate(calls)]}
    try:
        messages = history.messages + list(renderer.template_inputs([swapped] + new, tools)[0])
        other = renderer._run_template(jinja.TemplateList(messages), history.tools, True).text()
    except ValueError:
        return True
    return other != text


# --- the history behind a prompt ----------------------------------------------------------


class History(NamedTuple):
    """A conversation as the template sees it (converted messages and tools), and, when known, the
    template's text for it with the generation prompt.  (A named tuple: one is made per
    ``render_ids`` with the generation prompt, and a frozen dataclass costs four times as much.)"""

    messages: list
    tools: Any
    prompt_text: str | None = None


class PromptHistories:
    """The conversations behind the prompts a renderer produced, so that the bridge can go on
    from a prompt without being handed its messages.

    Found by the prompt's length and last ids, then confirmed by comparing the whole prompt with
    the renderer's own copy of it (one C pass; the caller's list usually shares its int objects
    with the renderer's result, so each comparison is an identity check): no hash of the whole
    prompt is computed on either side. Bounded (least recently used prompts go first) and
    thread-safe; a copied or unpickled renderer starts empty.
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._entries: OrderedDict = OrderedDict()  # (length, last ids) -> [(ids, history), ...]
        self._count = 0
        self._lock = threading.Lock()

    def __reduce__(self):
        return (PromptHistories, (self.size,))

    @staticmethod
    def _key(ids: list[int]) -> tuple[int, tuple]:
        return (len(ids), tuple(ids[-PROMPT_TAIL_TOKENS:]))

    def remember(self, ids: list[int], history: History) -> None:
        """Remember ``history`` for a copy of ``ids`` (the caller may go on to change its list)."""
        key, own = self._key(ids), ids.copy() if type(ids) is list else list(ids)
        with self._lock:
            bucket = self._entries.get(key)
            if bucket is None:  # the common case: a prompt not seen before
                self._entries[key] = [(own, history)]
                self._count += 1
            else:
                self._entries.move_to_end(key)
                self._count -= len(bucket)
                bucket[:] = [(own, history)] + [entry for entry in bucket if entry[0] != own]
                self._count += len(bucket)
            while self._count > self.size:
                _, dropped = self._entries.popitem(last=False)
                self._count -= len(dropped)

    def recall(self, ids: list[int]) -> tuple[list[int], History] | None:
        """(the renderer's own copy of ``ids``, their history), or None for ids it does not know."""
        try:
            key = self._key(ids)
            hash(key)
        except TypeError:  # unhashable elements: not a prompt this renderer produced
            return None
        with self._lock:
            for own, history in self._entries.get(key, ()):
                if own == ids:
                    self._entries.move_to_end(key)
                    return own, history
        return None


def history_of(renderer: "GeneratedRenderer", remembered: History | None, messages, tools) -> History | None:
    """The conversation the prompt was rendered from: ``messages`` when given, else ``remembered``
    (the renderer's memory of that prompt).

    With ``messages``, a remembered prompt still lends its text (the template run it saves is
    only needed to know that text).
    """
    if remembered is not None and remembered.tools != jinja.template_tools(tools):
        remembered = None  # rendered with other tools: not this conversation
    if messages is None:
        return remembered
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages must be the non-empty list of messages the previous prompt was rendered from")
    template_messages, template_tools = renderer.template_inputs(list(messages), tools)
    template_messages = list(template_messages)
    # only the same conversation lends its text: two texts can encode to the same ids (NFC)
    known_text = remembered.prompt_text if remembered and remembered.messages == template_messages else None
    return History(template_messages, template_tools, known_text)


# --- the bridge ---------------------------------------------------------------------------


def bridge_turn(
    renderer: "GeneratedRenderer",
    previous_prompt_ids: Any,
    previous_completion_ids: Any,
    new_messages: Any,
    *,
    tools: list[ToolSpec] | None = None,
    messages: list[Message] | None = None,
) -> RenderedTokens | None:
    prompt = token_sequence(previous_prompt_ids, "previous_prompt_ids")
    found = renderer.prompt_histories.recall(prompt)
    if found is None or not sums_to_an_int(prompt):  # (floats equal to a remembered prompt are refused too)
        prompt, remembered = as_token_ids(prompt, "previous_prompt_ids"), None
    else:  # equal to a prompt the renderer produced: go on from its own ints
        prompt, remembered = found
    completion = as_token_ids(previous_completion_ids, "previous_completion_ids")
    new = checked_new_messages(new_messages)
    if not prompt or not new or any(message["role"] == "assistant" for message in new):
        return None
    try:
        renderer.normalize_messages(new)
    except ValueError as exc:  # a role the template does not render, a malformed tool call
        raise ValueError(f"new_messages: {exc}") from None
    if unlearned_reason(renderer) is not None:
        return None
    history = history_of(renderer, remembered, messages, tools)
    if history is None:
        return None
    kept = closed_completion(renderer, completion)
    parsed = sampled_turn_as_message(renderer, kept, tools) if kept else None
    if parsed is None:
        return None
    sampled, guessed = parsed
    try:
        extended = History(history.messages + list(renderer.template_inputs([sampled] + new, tools)[0]), history.tools)
    except ValueError:
        return None  # the sampled turn as parsed is not a message the template takes
    renders = render_both(renderer, history, extended)
    if renders is None:
        return None
    prompt_text, full = renders
    full_text = full.text()
    if renders_by_call_ids(renderer, history, sampled, new, tools, full_text):
        return None
    if not ends_like(renderer, prompt, prompt_text):
        return no_generation_prompt_or_mismatch(renderer, prompt, history, messages)
    suffix_start = sampled_turn_end(
        renderer,
        prompt_text,
        renderer.decode(kept),
        full,
        full_text,
        len(history.messages),
        rewrite_allowed=lambda: not guessed and renders_its_content(renderer, history, extended, prompt_text),
    )
    if suffix_start is None:
        return None
    result = bridged_tokens(renderer, prompt + kept, full, full_text, suffix_start, len(history.messages) + 1, new, extended)
    if result is not None:
        renderer.prompt_histories.remember(result.token_ids, History(extended.messages, extended.tools, full_text))
    return result


def render_both(renderer: "GeneratedRenderer", history: History, extended: History):
    """(the history's text with the generation prompt, output of the extended conversation), or None
    when the template refuses."""
    try:
        prompt_text = history.prompt_text
        if prompt_text is None:
            prompt_text = renderer._run_template(jinja.TemplateList(history.messages), history.tools, True).text()
        full = renderer._run_template(jinja.TemplateList(extended.messages), extended.tools, True)
    except ValueError:  # the template's own refusal (TemplateError and its TypeError flavour)
        return None
    return prompt_text, full


def ends_like(renderer: "GeneratedRenderer", prompt: list[int], prompt_text: str) -> bool:
    """Whether the previous prompt ends as the history's rendering with the generation prompt does.

    Compared on its last few tokens. Under "verbatim" only on those after its last stop token,
    which must follow a token that ends a turn: what precedes it may be a sampled turn kept as
    sampled, which the template renders differently.
    """
    tail = prompt[-PROMPT_TAIL_TOKENS:]
    after_stop = False
    if renderer.thinking_retention == "verbatim":
        stops = set(renderer.get_stop_token_ids())
        last_stop = max((index for index, token in enumerate(tail) if token in stops), default=-1)
        if 0 <= last_stop < len(tail) - 1:
            tail, after_stop = tail[last_stop + 1 :], True
    text = renderer.decode(tail).lstrip("\ufffd")  # a multi-byte character cut at the start
    if not text or not prompt_text.endswith(text):
        # decoding is not always faithful (a SentencePiece decoder turns a literal "▁" into a
        # space): compare the ids themselves, at the price of encoding the history's text once
        if after_stop or renderer.encoder.encode(prompt_text)[-len(tail) :] != tail:
            return False
        return True
    return not after_stop or ends_with_turn_end(renderer, prompt_text[: len(prompt_text) - len(text)])


def ends_with_turn_end(renderer: "GeneratedRenderer", text: str) -> bool:
    """Whether ``text`` ends with a stop token, the close, or (gpt-oss' ``<|end|>``) another added token."""
    closes = (renderer.TURN.close, *renderer.TURN.stop_tokens)
    return any(token and text.endswith(token) for token in closes) or any(
        token and text.endswith(token) for token in renderer.encoder.added_token_strings
    )


def no_generation_prompt_or_mismatch(renderer, prompt, history: History, messages) -> None:
    """The prompt does not end like its history rendered with the generation prompt.

    Rendered without it (Gemma would then get no model header): None. Anything else means
    ``messages`` is not the conversation of this prompt, which is the caller's error.
    """
    if messages is None:
        return None  # the memory holds prompts with the generation prompt only
    try:
        without = renderer._run_template(jinja.TemplateList(history.messages), history.tools, False).text()
    except ValueError:
        without = None
    if without is not None and ends_like(renderer, prompt, without):
        return None
    raise ValueError(
        "previous_prompt_ids do not end as the template renders `messages` with the generation prompt; "
        "pass the conversation the previous prompt was rendered from (without the sampled turn)"
    )


def sampled_turn_end(
    renderer: "GeneratedRenderer",
    prompt_text: str,
    completion_text: str,
    full: "RenderOutput",
    text: str,
    turn_index: int,
    *,
    rewrite_allowed: Callable[[], bool] = lambda: True,
) -> int | None:
    """Where in the full rendering the sampled turn (with its close) ends, or None.

    When the full rendering starts with prompt + completion, right after them. Otherwise the
    template rewrote history: None under the "template" policy (or when the sampled turn's message
    may not be what was sampled, ``rewrite_allowed()`` false); under "verbatim", the end of the
    turn's close as the template writes it (see :func:`close_end`).
    """
    if text.startswith(prompt_text) and text.startswith(completion_text, len(prompt_text)):
        return len(prompt_text) + len(completion_text)
    if renderer.thinking_retention == "template" or not renderer.TURN.close or not rewrite_allowed():
        return None  # (a turn the next header ends has no close of its own to keep it by)
    starts = {index: offset for offset, index in reversed(full.message_spans())}  # index -> first character
    turn_start, new_start = starts.get(turn_index), starts.get(turn_index + 1)
    if turn_start is None:
        return None
    if new_start is None:  # the new messages are written inside the turn (Gemma-4's tool responses)
        return first_stop_end(renderer, text, turn_start)
    return close_end(renderer, text, turn_start, new_start)


def renders_its_content(renderer: "GeneratedRenderer", history: History, extended: History, prompt_text: str) -> bool:
    """Whether the template writes the sampled turn's content as parsed when that turn is the last message.

    A template may rewrite a turn in history (drop its reasoning), which "verbatim" keeps as sampled;
    but content the template itself does not write back (Gemma-4 strips a thought channel the
    parser read as content) means the parse missed structure, and the history would be a guess.
    """
    turn = extended.messages[len(history.messages)]
    content = turn.get("content") if isinstance(turn, dict) or hasattr(turn, "get") else None
    if not isinstance(content, str) or not content:
        return True
    try:
        out = renderer._run_template(jinja.TemplateList(extended.messages[: len(history.messages) + 1]), history.tools, False)
    except ValueError:
        return False
    start = {index: offset for offset, index in reversed(out.message_spans())}.get(len(history.messages))
    if start is None:  # written after the message loop (Nemotron-Nano): after the history's own text
        start = max(len(prompt_text) - len(renderer.generation_prompt()), 0)
    return content in out.text()[start:]


def first_stop_end(renderer: "GeneratedRenderer", text: str, start: int) -> int | None:
    """The end of the first stop token (or close) the template writes in ``text`` from ``start`` on."""
    closes = (renderer.TURN.close, *renderer.TURN.stop_tokens)
    found = min(((text.find(token, start), token) for token in closes if token and token in text[start:]), default=None)
    return found[0] + len(found[1]) if found else None


def close_end(renderer: "GeneratedRenderer", text: str, start: int, end: int) -> int | None:
    """The end of the last turn-ending token the template writes in ``text[start:end]`` (a turn's span).

    A stop token or the close when there is one; else the last added token (gpt-oss closes a
    turn in history with ``<|end|>``, which the model never samples).
    """
    closes = (renderer.TURN.close, *renderer.TURN.stop_tokens)
    found = max(((text.rfind(token, start, end), token) for token in closes if token), default=(-1, ""))
    if found[0] < 0:
        added = renderer.encoder.added_token_strings
        found = max(((text.rfind(token, start, end), token) for token in added if token), default=(-1, ""))
    return found[0] + len(found[1]) if found[0] >= 0 else None


def bridged_tokens(
    renderer: "GeneratedRenderer",
    prefix: list[int],
    full: "RenderOutput",
    text: str,
    suffix_start: int,
    first_new: int,
    new,
    extended: History,
) -> RenderedTokens | None:
    """``prefix`` + the full rendering's text from ``suffix_start`` on, encoded after the close token.

    ``prefix`` is a fresh list (prompt + kept completion) that the result takes over.

    The new tokens are attributed as ``render`` attributes them (message marks, content marks);
    the prefix, which the caller already holds with its own attribution, gets -1 / False. With
    ``control_token_safe``, new content of those roles is encoded as plain text, as ``render_ids``
    would.
    """
    from .base import inside_ranges  # base imports this module

    anchor = renderer.decode(prefix[-1:])
    part_starts = full.part_starts()
    shift = suffix_start - len(anchor)  # full-text offset of the encoded string's first character

    def in_suffix(ranges):
        return [(max(low, suffix_start) - shift, high - shift) for low, high in ranges if high > suffix_start]

    plain = None
    if renderer.plain_content_roles:
        plain = in_suffix(renderer._plain_ranges(full, text, extended.messages, full.message_spans(part_starts)))
    ids, offsets = renderer.encoder.encode_with_offsets(anchor + text[suffix_start:], plain_ranges=plain)
    if ids[:1] != prefix[-1:]:
        return None  # the close does not stand alone as a token here (never seen; refuse rather than guess)
    suffix_ids, suffix_offsets = ids[1:], offsets[1:]
    # Per-token lists as long as the whole prompt: each built by one fill and one in-place extend.
    token_ids = prefix  # the caller's fresh prompt + completion list
    token_ids += suffix_ids
    message_indices = [-1] * (len(token_ids) - len(suffix_ids))
    message_indices += new_message_indices(
        full.message_spans(part_starts), [shift + offset for offset in suffix_offsets], first_new
    )
    is_content = [False] * (len(token_ids) - len(suffix_ids))
    is_content += inside_ranges(suffix_offsets, in_suffix(full.content_ranges(part_starts)))
    return RenderedTokens(
        token_ids=token_ids,
        message_indices=message_indices,
        sampled_mask=[False] * len(token_ids),
        is_content=is_content,
        message_roles=[message.get("role", "") for message in new],
        message_tool_names=tool_names(new),
    )


def new_message_indices(spans: list[tuple[int, int]], offsets: list[int], first_new: int) -> list[int]:
    """Per token (character offset in the full text, ascending), the index in ``new_messages`` of the
    message whose rendering it belongs to (the template's own message marks, ``spans``), or -1 for
    scaffolding."""
    from .base import span_values  # base imports this module

    return [index - first_new if index >= first_new else -1 for index in span_values(offsets, spans)]

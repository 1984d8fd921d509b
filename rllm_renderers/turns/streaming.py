"""Parse an assistant turn while it is sampled: OpenAI-shaped deltas that never take anything back.

One implementation for every generated renderer, driven by the same learned facts as
``parse_response`` (``TurnFormat`` / ``ReasoningFormat`` / ``ToolCallFormat``) and running the very
same parse (``_parse_turn_text``) on the text sampled so far. What may still change is held back:

* the text so far is parsed as it is (the turn ending here) and followed by every *continuation
  probe*: each marker of the learned syntax (stops, the turn's close, the reasoning open and close,
  the call start, block start, name end, call end, ...), and the rest of each marker whose start
  ends the text (``<tool_ca`` is followed by ``ll>``), and a few plain characters;
* a field is emitted up to what every probe's parse agrees on: the reasoning and the content up to
  their longest common prefix; a tool call whole (id, name, arguments as ``json.dumps`` of the
  parsed value) once every parse reads the same complete call. A call is not sent before it is
  complete: a name sent earlier could belong to a call that turns out malformed, which is no call
  of the message, and a delta is never taken back.

At the end (a stop token, or :meth:`StreamingParser.finish`) the result is ``parse_response`` of the
whole completion, and the last deltas are what is left of it; a delta that would have to be taken
back is counted in ``retractions`` (the property test asserts there are none) instead of emitted.
A step parses the text so far a few dozen times, except where the new text holds no character any
marker starts with and nothing is held back outside a call: it then extends the reasoning or the
content as it is. Plain prose is linear; the steps inside calls and at marker characters cost the
length of the text each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .messages import RENDERABLE_CALLS
from .parsing import as_token_ids
from ..types import ParsedResponse, ParsedToolCall

__all__ = ["CallDelta", "Delta", "StreamingParser", "arguments_text"]

#: Plain text a probe appends besides the markers: it may extend a name written without an end
#: marker, or a number, or close a string.
_PLAIN_PROBES = ("", "a", "0", " ", "\n", '"', "}", "]")


@dataclass
class CallDelta:
    """Part of one tool call: its first delta has ``id`` and ``name``, later ones ``arguments`` text."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def to_openai(self) -> dict:
        function: dict[str, Any] = {"arguments": self.arguments}
        if self.name is not None:
            function["name"] = self.name
        delta: dict[str, Any] = {"index": self.index, "function": function}
        if self.id is not None:
            delta["id"], delta["type"] = self.id, "function"
        return delta


@dataclass
class Delta:
    """What one step adds to the message: reasoning text, content text, tool-call parts."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[CallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)

    def to_openai(self) -> dict:
        """The ``delta`` of a chat completion chunk (``reasoning_content`` as vLLM names it)."""
        delta: dict[str, Any] = {}
        if self.reasoning:
            delta["reasoning_content"] = self.reasoning
        if self.content:
            delta["content"] = self.content
        if self.tool_calls:
            delta["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return delta


def arguments_text(arguments: Any) -> str:
    """A parsed call's arguments as the JSON text an OpenAI message carries (a string as it is)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, default=str)


@dataclass
class _Outcome:
    """What one parse of the text so far (maybe with a probe appended) reads."""

    reasoning: str | None
    content: str
    calls: list  # parsing.TextCall
    reasoning_complete: bool | None = True
    body_at: int = 0  # where the text after the reasoning block starts, in the text parsed


class StreamingParser:
    """Feed a sampled turn's token ids (:meth:`feed_ids`) or text (:meth:`feed_text`) as they come;
    each call returns the :class:`Delta` it settles (maybe empty). :meth:`finish` returns the last
    delta and ``parse_response`` of the whole turn (the same ``tools`` and ``prompt_ids``).

    ``call_ids``: how a call without an id of its own is named (its index -> id); by default
    ``call_<index>``, as ``message_from_parse``. ``with_reasoning=False``: the text fed is what follows
    the reasoning block (no reasoning is looked for).
    """

    def __init__(
        self, renderer, *, tools: list[dict] | None = None, prompt_ids=None, call_ids=None, with_reasoning: bool = True
    ) -> None:
        self.renderer = renderer
        self.with_reasoning = with_reasoning
        self.tools = tools
        self.prompt_ids = None if prompt_ids is None else as_token_ids(prompt_ids, "prompt_ids", renderer.vocab_size)
        self.call_ids = call_ids or (lambda index: f"call_{index}")
        facts = renderer._parse_facts()
        self._stop_ids = dict(facts.stop_texts)
        reasoning = renderer.REASONING
        prefilled = False
        if reasoning is not None and reasoning.open:
            tail = renderer._decode(self.prompt_ids[-64:]) if self.prompt_ids else renderer.generation_prompt()
            prefilled = renderer._reasoning_prefilled(tail)
        self._prefilled = prefilled
        self._markers = _markers(renderer)
        self._marker_starts = frozenset(marker[0] for marker in self._markers)
        self._growing: str | None = None  # the field new plain text extends, when nothing is held back
        self._settled_length = 0  # characters of the text settled so far
        self._ids: list[int] = []
        self._text = ""
        self._decoded_from = 0  # ids before this index are in self._text
        self._stop: str | None = None
        self._finished = False
        self._body_at: int | None = None  # where the text after the reasoning block starts, once settled
        self._reasoning = ""  # emitted so far
        self._reasoning_started = False
        self._content = ""
        self._settled_calls = 0  # calls of the parse settled: sent, or found to be no call of the message
        self._next_index = 0  # the message index of the next call sent
        #: deltas that would have taken back text already emitted (none, by the property test)
        self.retractions = 0

    # -- input ---------------------------------------------------------------------------------

    def feed_ids(self, token_ids) -> Delta:
        """The delta the new sampled ids settle; after a stop id, the final one (see :meth:`finish`)."""
        if self._finished:
            raise ValueError("feed_ids after the turn was finished")
        ids = as_token_ids(token_ids, "token_ids", self.renderer.vocab_size)
        for index, token in enumerate(ids):
            if token in self._stop_ids:
                self._ids.extend(ids[:index])
                self._stop = self._stop_ids[token]
                self._decode_new(final=True)
                return self._settle(final=True)
        self._ids.extend(ids)
        self._decode_new(final=False)
        return self._settle(final=False)

    def feed_text(self, text: str) -> Delta:
        """The delta new sampled text settles (for engines that stream text; a stop token's text in it
        ends the turn as its id would)."""
        if self._finished:
            raise ValueError("feed_text after the turn was finished")
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if self._ids:
            raise ValueError("feed_text on a parser fed token ids: feed one kind of input")
        self._text += text
        return self._settle(final=False)

    def finish(self) -> tuple[Delta, ParsedResponse]:
        """The last delta and the whole turn parsed (``parse_response`` of the ids fed, or of the text)."""
        delta = Delta() if self._finished else self._settle(final=True)
        return delta, self.result()

    def result(self) -> ParsedResponse:
        """The whole turn as ``parse_response`` reads it (the ids fed, cut at their stop; or the text)."""
        if self._ids and self.with_reasoning:
            ids = self._ids + ([self._stop_id()] if self._stop is not None else [])
            return self.renderer.parse_response(ids, tools=self.tools, prompt_ids=self.prompt_ids)
        return self._response(self._parse(self._text, self._stop))

    @staticmethod
    def _response(outcome: _Outcome) -> ParsedResponse:
        return ParsedResponse(
            content=outcome.content,
            reasoning_content=outcome.reasoning,
            tool_calls=[
                ParsedToolCall(call.raw, call.name or None, call.arguments, None, call.status, call.id, call.reason)
                for call in outcome.calls
            ],
            reasoning_complete=outcome.reasoning_complete,
        )

    def read(self, text: str) -> ParsedResponse:
        """A whole turn's text (up to its stop) parsed at once, as ``parse_response`` reads it (text has no
        token spans: each call's ``token_span`` is None)."""
        return self._response(self._parse(text, None))

    def split_reasoning(self, text: str) -> tuple[str | None, int]:
        """A whole turn's reasoning (None for none) and where the text after its block starts."""
        outcome = self._parse(text, None)
        return outcome.reasoning, outcome.body_at

    @property
    def reasoning_ended(self) -> bool:
        """Whatever comes next, the reasoning block is over (or the turn has none): the text after it
        (:meth:`text_after_reasoning`) is content and calls."""
        return self._body_at is not None

    def text_after_reasoning(self) -> str:
        """The text sampled after the reasoning block so far (raw: markers included), once it ended."""
        return self._text[self._body_at :] if self._body_at is not None else ""

    # -- decoding --------------------------------------------------------------------------------

    def _decode_new(self, final: bool) -> None:
        """Append the text of the ids not decoded yet; ids that end inside a character wait (the whole
        text is decoded again when the windowed decode would disagree with it)."""
        decode = self.renderer._decode
        start = max(self._decoded_from - 4, 0)  # a few ids of context: SentencePiece's leading spaces
        before = decode(self._ids[start : self._decoded_from])
        after = decode(self._ids[start:])
        if after.endswith("\ufffd") and not final:
            return
        if after.startswith(before):
            self._text += after[len(before) :]
        else:
            self._text = decode(self._ids)
        self._decoded_from = len(self._ids)

    def _stop_id(self) -> int:
        return next(token for token, text in self._stop_ids.items() if text == self._stop)

    # -- settling --------------------------------------------------------------------------------

    def _parse(self, text: str, stop: str | None) -> _Outcome:
        parsed, body, skipped = self.renderer._parse_turn_text(
            text, stop, self.tools, self._prefilled, with_reasoning=self.with_reasoning
        )
        if parsed is None:  # UNLEARNED: the raw text is the content
            return _Outcome(None, body, [])
        return _Outcome(parsed.reasoning, parsed.content, parsed.calls, parsed.reasoning_complete, skipped + parsed.body_at)

    def _probes(self) -> list[str]:
        text = self._text
        probes = dict.fromkeys(_PLAIN_PROBES)
        for marker in self._markers:
            probes.setdefault(marker)
            for cut in range(1, len(marker)):
                if text.endswith(marker[:cut]):
                    probes.setdefault(marker[cut:])
        return list(probes)

    def _settle(self, final: bool) -> Delta:
        if final:
            self._finished = True
            result = self.result()
            outcome = _Outcome(result.reasoning_content, result.content, [_Final(call) for call in result.tool_calls])
            return self._emit([outcome], final=True)
        chunk = self._text[self._settled_length :]
        self._settled_length = len(self._text)
        if self._growing is not None and not any(character in self._marker_starts for character in chunk):
            return self._grow(chunk)
        outcomes = [self._parse(self._text + probe, self._stop) for probe in self._probes()]
        first = outcomes[0]  # (the text as it is: the first probe is "")
        if self._body_at is None and all(
            outcome.reasoning_complete and outcome.body_at == first.body_at for outcome in outcomes
        ):
            self._body_at = first.body_at
        delta = self._emit(outcomes, final=False)
        self._growing = None
        if not first.calls:
            # (the text as it is leaves the block open, and all its reasoning was sent: no close began)
            if first.reasoning_complete is False and self._reasoning == first.reasoning:
                self._growing = "_reasoning"
            elif self._body_at is not None and self._content == first.content:
                self._growing = "_content"
        return delta

    def _grow(self, chunk: str) -> Delta:
        """Text with no character a marker starts with, after text all sent and no call: it can end no
        field and start no marker, so it extends the field being written (reasoning or content) as it is
        (without parsing the text again: a long answer costs linear time)."""
        setattr(self, self._growing, getattr(self, self._growing) + chunk)
        return Delta(reasoning=chunk) if self._growing == "_reasoning" else Delta(content=chunk)

    def _emit(self, outcomes: list[_Outcome], final: bool) -> Delta:
        delta = Delta()
        reasonings = [outcome.reasoning for outcome in outcomes]
        if all(reasoning is not None for reasoning in reasonings):
            delta.reasoning = self._extend("_reasoning", _common_prefix(reasonings))
        delta.content = self._extend("_content", _common_prefix([outcome.content for outcome in outcomes]))
        for position in range(min(len(outcome.calls) for outcome in outcomes)):
            if position < self._settled_calls:
                continue
            part = self._call_delta([outcome.calls[position] for outcome in outcomes], final)
            if part is not None:
                delta.tool_calls.append(part)
            if position >= self._settled_calls:
                break  # later calls wait for this one
        return delta

    def _extend(self, attribute: str, settled: str) -> str:
        emitted = getattr(self, attribute)
        if not settled.startswith(emitted):
            self.retractions += 1
            return ""
        setattr(self, attribute, settled)
        return settled[len(emitted) :]

    def _call_delta(self, calls: list, final: bool) -> CallDelta | None:
        """The next call of the parse (as each outcome reads it) once every outcome reads it the same:
        whole (id, name, arguments), or None when it is not settled or is no call of the message (its
        message index counts only the calls that are)."""
        first = calls[0]
        # a call read as malformed is settled only at the end: text no probe writes may still make it
        # one (the rest of a JSON object whose call end is also its last brace)
        settled = all(_key(call) == _key(first) for call in calls) and (final or _status(first) in RENDERABLE_CALLS)
        if not settled:
            return None
        self._settled_calls += 1
        if _status(first) not in RENDERABLE_CALLS:  # malformed or cut: not a call of the message
            return None
        # (a call is sent whole once it is settled: a name sent earlier could belong to a call that
        # turns out malformed, which is no call of the message)
        index = self._next_index
        self._next_index += 1
        return CallDelta(index, first.id or self.call_ids(index), first.name or "", arguments_text(first.arguments))


class _Final:
    """A ``ParsedToolCall`` of the final result seen as a ``TextCall``."""

    def __init__(self, call) -> None:
        self.name, self.arguments, self.status, self.id = call.name, call.arguments, call.status, call.id


def _common_prefix(texts: list[str]) -> str:
    """The longest common prefix of ``texts`` (the lowest and highest share it), found by comparing
    slices in C: a binary search, not a loop over characters."""
    low, high = min(texts), max(texts)
    if high.startswith(low):
        return low
    shared, differs = 0, len(low)  # low[:shared] is shared; low[:differs] is not
    while differs - shared > 1:
        middle = (shared + differs) // 2
        if high.startswith(low[:middle]):
            shared = middle
        else:
            differs = middle
    return low[:shared]


def _status(call) -> str:
    return getattr(call.status, "value", call.status)


def _key(call) -> tuple:
    return (call.name, _status(call), call.id, repr(call.arguments))


def _markers(renderer) -> list[str]:
    """Every literal of the learned turn syntax whose appearance can change how earlier text reads."""
    facts = []
    turn, reasoning, calls = renderer.TURN, renderer.REASONING, renderer.TOOL_CALLS
    if turn is not None:
        facts += [turn.close, turn.after_close, turn.content_lead, turn.content_lead_with_tools or "", *turn.stop_tokens]
    if reasoning is not None:
        facts += [
            reasoning.open + reasoning.after_open,
            reasoning.before_close + reasoning.close + reasoning.after_close,
            reasoning.close,
            reasoning.content_start,
        ]
    if calls is not None:
        facts += [
            calls.content_separator + calls.block_start + calls.call_start,
            calls.block_start + calls.call_start,
            calls.call_start,
            calls.content_start,
            calls.name_end,
            calls.call_end,
            calls.block_end,
            calls.call_separator,
            calls.arguments_end,
            calls.call_index,
            calls.call_id_end,
            calls.parameter_start,
            calls.parameter_value,
            calls.parameter_value_json,
            calls.parameter_end,
        ]
    return [fact for fact in dict.fromkeys(facts) if fact]

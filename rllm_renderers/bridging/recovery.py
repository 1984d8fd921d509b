"""The conversation behind a prompt the renderer did not produce (an inference server's render).

Engines such as rLLM's gateway let the inference server render the first prompt of a session
and then ask the renderer to bridge from it with ids alone. The bridge needs the history the
prompt was rendered from (template state such as a tool-output block already opened, or the
last user query, comes from it), so it recovers that history from the prompt itself:

1. **Split.** The prompt's text is read as a sequence of messages, one at a time. A system,
   user or tool message is a *needle*: the template renders the candidate conversation with a
   unique placeholder as that message's content, and the render, with each placeholder turned
   into a capture group and the rest escaped, must match the prompt's text from its start up to
   that message's content (a capture never holds a stop, the turn opening or one of the markers the
   template writes around messages, and each message must move the match on). An assistant turn is read the way a sampled turn is: from the
   template's turn opening to the turn's first stop or to the close the template writes in
   history, parsed with the learned reasoning and tool-call syntax (and as one content
   placeholder, parsed afterwards).
2. **Match.** A candidate conversation is complete when its render with the generation prompt
   matches the whole text; the captures give the needles' contents. The search runs to its end,
   so every reading of the text is found (more than :data:`MAX_READINGS` is ambiguous).
3. **Prove.** The bridge then treats the recovered conversation as a caller's ``messages=``
   that it cannot vouch for: the template's render of it must encode to exactly the prompt's
   ids (:func:`rllm_renderers.bridging.bridge.renders_previous_prompt`), in both retention policies.
4. **Hidden fields.** A prompt does not show everything a message holds (which tool call a
   result answers, reasoning the template dropped, content it never writes). Each such field
   is given other values (:func:`hidden_variants`); a variant whose render is still the prompt's
   text is a conversation the prompt cannot tell apart from the recovered one, and the bridge
   goes on only when every such variant, and every other reading, gives the same tokens.

A prompt that cannot be split, matched or proven gets no bridge (None), with the reason logged
once per renderer class. Cost: a few template runs per message of the prompt, once per prompt
the renderer has not seen (its later prompts are the bridge's own, which it remembers).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..jinja import runtime as jinja
from ..turns.parsing import parse_text, starts_in_call
from ..turns.messages import RENDERABLE_CALLS, message_from_parse
from .contract import BridgeableRenderer
from .placeholders import NEEDLE, NEEDLE_CLOSE, Matched, SearchedText, needle
from ..turns.boundaries import close_lead_of, content_lead_of
from ..types import Message

logger = logging.getLogger(__name__)

#: Template runs one recovery may spend before it gives up (a prompt of n messages needs about 4n).
RUN_BUDGET = 4000
ROLES_READ_AS_NEEDLES = ("system", "user", "tool")
HISTORY_CLOSES_TRIED = 4  # where a history turn may end: its first few closes
FILLER = 999_999  # the placeholder of a message added only so that the template renders the others
MAX_READINGS = 8  # conversations one text may read as before it counts as ambiguous
FRAME = 40  # characters either side of a message's text looked at for the tags that frame it
#: Values given to fields a prompt may not show (private-use characters, as the placeholders).
HIDDEN_REASONING, HIDDEN_CONTENT = "\ue002", "\ue003"
TAG = re.compile(r"</?[A-Za-z_][\w.:-]{0,30}>|\[/?[A-Z_]{2,20}\]")  # <tool_result>, [INST]
_explained: set[tuple[type, str]] = set()


class Recovery(NamedTuple):
    """A conversation recovered from a prompt's text, and others the text cannot tell apart from it."""

    messages: list[Message]
    variants: list[list[Message]]


class Unrecoverable(Exception):
    """The prompt's text cannot be read back into a conversation (the message says why)."""


def explain_once(renderer: BridgeableRenderer, reason: str, *, always_debug: bool = False) -> None:
    """Log why a prompt the renderer did not render gets no bridge: as a warning once per renderer
    class and kind of reason, at debug level every time."""
    key = (type(renderer), reason.split(":")[0])
    level = logging.DEBUG if key in _explained or always_debug else logging.WARNING
    _explained.add(key)
    logger.log(level, "%s: no bridge from a prompt it did not render: %s", type(renderer).__name__, reason)


# --- renders with placeholders ---------------------------------------------------------------


@dataclass
class Candidate:
    """Messages read so far: dicts whose placeholders (``needle(n)``) stand for text not yet known."""

    messages: list[Message]
    needles: int = 0
    position: int = -1  # where in the text the last message's header ends (each message moves it on)
    fallback: bool = False  # an assistant turn read as one placeholder: tried only where no sampled reading of it completes
    matched: Matched | None = None  # the render of the messages before the last one, as far as it was matched
    base: "Rendered | None" = None  # a render of exactly these messages, which renders of longer ones resume
    parent_base: "Rendered | None" = None  # else the one of the messages before the last (to make it from)

    def with_message(
        self, message: Message, matched: Matched, needles: int = 0, fallback: bool = False, base: "Rendered | None" = None
    ) -> "Candidate":
        parent = None if base is not None else self.base
        return Candidate([*self.messages, message], self.needles + needles, matched.end, fallback, matched, base, parent)


class Rendered(NamedTuple):
    """A candidate's render: its whole text, and the template's output, which starts at character
    ``output.origin`` of that text where the render resumed an earlier one's message loop."""

    full: str
    output: Any

    def text(self) -> str:
        return self.full

    def message_spans(self) -> list[tuple[int, int]]:
        origin = self.output.origin
        return [(offset + origin, index) for offset, index in self.output.message_spans()]


class Reader:
    """Splits one prompt's text into messages (see the module docstring)."""

    def __init__(self, renderer: BridgeableRenderer, text: str, template_tools: Any, tools: Any) -> None:
        self.renderer = renderer
        self.text = text
        self.template_tools = template_tools
        self.tools = tools
        self.runs = 0
        self._converted: dict[int, tuple] = {}  # id(message) -> (message, converted)
        self.follower = {"role": "user", "content": needle(FILLER)}
        self.opening = renderer.turn_opening()
        self.stops = tuple(stop for stop in (renderer.TURN.stop_tokens if renderer.TURN else ()) if stop)
        # a placeholder's text never runs across a turn boundary (a stop, the turn opening, or an
        # added token the template writes around messages: :meth:`markers`): a message's text that
        # holds one is read as the turns it spells out, or not at all
        self.searched = SearchedText(text, {*self.stops, self.opening.strip(), *self.markers()} - {""})

    def markers(self) -> set[str]:
        """The tokenizer's added tokens the template itself writes around messages (found in a render
        of one message of each role): a message's text holding one would be ambiguous."""
        rendered = ""
        for roles in (("system", "user", "assistant", "tool", "user"), ("system", "user", "assistant", "user")):
            probe = [{"role": role, "content": needle(number)} for number, role in enumerate(roles)]
            output = self.render([m for m in probe if m["role"] in (self.renderer.ROLES or (m["role"],))], True)
            if output is not None:
                rendered = output.text()
                break
        literal = NEEDLE.sub("", rendered)
        # (not runs of white space or plain words, which tokenizers such as Gemma's also add)
        added = {
            token
            for token in self.renderer.encoder.added_token_strings
            if token.strip() and not token.strip().isalnum() and token in literal
        }
        # and the tags that frame a message's text in plain text (DeepSeek-V4 writes a tool result as
        # a user turn holding `<tool_result>...</tool_result>`): the text right around each placeholder
        frames = "".join(part[:FRAME] + part[-FRAME:] for part in NEEDLE.split(rendered)[::2])
        return added | set(TAG.findall(frames))

    # a render of candidate messages, as text and as the message spans the template marked
    def render(self, messages: list[Message], add_generation_prompt: bool, base: Rendered | None = None):
        """The render of ``messages``, resumed from ``base`` (a render of the first of them) where
        the template's message loop allows it (:mod:`rllm_renderers.bridging.resume` checks that it
        is exact, else it runs in full); None where the template refuses them."""
        self.runs += 1
        if self.runs > RUN_BUDGET:
            raise Unrecoverable(f"budget: more than {RUN_BUDGET} template runs")
        try:
            inputs = jinja.TemplateList(map(self.converted, messages))
            checkpoint = base.output.checkpoint if base is not None else None
            output = self.renderer._run_template(
                inputs, self.template_tools, add_generation_prompt, record=True, resume_from=checkpoint
            )
            return Rendered(base.full[: output.origin] + output.text() if output.origin else output.text(), output)
        except ValueError:  # the template refuses this candidate
            return None
        except (KeyError, AttributeError, IndexError, LookupError) as exc:
            # a conversation made up here that the template's code cannot take (not a caller's input):
            # no reading, never an exception out of the bridge
            logger.debug("%s: recovery candidate not rendered: %r", type(self.renderer).__name__, exc)
            return None

    def converted(self, message: Message):
        """``message`` as the template sees it, converted once per search (candidates share their
        messages; the conversion of one message does not depend on the others)."""
        known = self._converted.get(id(message))
        if known is None or known[0] is not message:
            # (its text is all that is read: no caller-text marks)
            known = self._converted[id(message)] = (message, self.renderer.template_messages([message], marked=False)[0])
        return known[1]

    def starts(self, messages: list[Message], base: Rendered | None):
        """Renders of the first messages of a conversation, to compare with the text's start: as
        they are, then followed by a user message, which the comparison stops before. The template
        may write earlier turns otherwise when a user query follows them (Qwen3.5 drops an empty
        reasoning block before the last one), or refuse a conversation for what it lacks so far
        ("No user query found"). Yields the text, and the render when it is of ``messages`` alone."""
        for conversation in (messages, [*messages, self.follower]):
            output = self.render(conversation, False, base)
            if output is not None:
                yield output.text(), output if conversation is messages else None

    def matches_prefix(self, rendered: str, candidate: Candidate) -> Matched | None:
        """The match of ``rendered`` (placeholders: any text) with the text's start, going on from
        the candidate's own match where ``rendered`` starts with the render it matched."""
        return self.searched.match(rendered, after=candidate.matched)

    # the steps of the search
    def read(self) -> list[list[Message]]:
        """Every conversation whose render with the generation prompt is the text (Unrecoverable if
        none, or more than :data:`MAX_READINGS`): the whole search runs, so that a text that reads
        in two ways is known to."""
        readings = []
        for reading in self.search(Candidate([])):
            reading = self.without_invisible_messages(reading)
            if reading not in readings:
                readings.append(reading)
            if len(readings) > MAX_READINGS:
                raise Unrecoverable(f"ambiguous: more than {MAX_READINGS} conversations render to this text")
        if not readings:
            raise Unrecoverable("split: no conversation the template renders to this prompt's text")
        return readings

    def without_invisible_messages(self, messages: list[Message]) -> list[Message]:
        """``messages`` without the empty ones whose absence the template's text does not show
        (DeepSeek-V4 writes an empty system message as nothing): one reading, not one per place."""
        text = self.render(messages, True)
        for index in reversed(range(len(messages))):
            message = messages[index]
            if message.get("content") != "" or message.get("role") not in ROLES_READ_AS_NEEDLES:
                continue
            shorter = messages[:index] + messages[index + 1 :]
            output = self.render(shorter, True) if shorter else None
            if output is not None and text is not None and output.text() == text.text():
                messages = shorter
        return messages

    def search(self, candidate: Candidate):
        if candidate.base is None and candidate.parent_base is not None:  # (a turn read as sampled)
            candidate.base = self.render(candidate.messages, False, candidate.parent_base)
        if candidate.messages:
            complete = self.complete(candidate)
            if complete is not None:
                yield complete
        sampled_read = False  # the assistant turn here read as sampled, in a complete reading
        for extended in self.next_messages(candidate):
            if extended.fallback and sampled_read:
                continue  # (the placeholder reading of that turn is parsed into the same turn afterwards)
            for reading in self.search(extended):
                sampled_read = sampled_read or extended.messages[-1].get("role") == "assistant"
                yield reading

    def complete(self, candidate: Candidate) -> list[Message] | None:
        """The candidate with its placeholders filled, when its whole render is the text."""
        output = self.render(candidate.messages, True, candidate.base)
        if output is None:
            return None
        match = self.searched.match(output.text(), whole=True, after=candidate.matched)
        if match is None:
            return None
        return [fill(message, match.values) for message in candidate.messages]

    def next_messages(self, candidate: Candidate):
        """Candidates one message longer whose render, up to the new message's content, starts the text."""
        number = candidate.needles
        for role in self.renderer.ROLES or ("system", "user", "assistant", "tool"):
            if role not in ROLES_READ_AS_NEEDLES:
                continue
            message = needle_message(role, needle(number), candidate.messages)
            for rendered, base in self.starts([*candidate.messages, message], candidate.base):
                at = rendered.find(needle(number))
                if at < 0 or not rendered[:at].rsplit(NEEDLE_CLOSE, 1)[-1].strip():
                    break  # nothing but white space sets it apart from the message before: not readable
                match = self.matches_prefix(rendered[:at], candidate)
                if match is not None and match.end > candidate.position:
                    yield candidate.with_message(message, match, 1, base=base)
                    break
        if "assistant" in (self.renderer.ROLES or ("assistant",)):
            yield from self.assistant_turns(candidate)

    def assistant_turns(self, candidate: Candidate):
        """The candidate followed by the assistant turn the text holds next, read as a sampled turn
        (from the turn opening to its first stop, parsed), and as one content placeholder.

        The turn's header is looked at in two renders, as the last message and followed by a user
        message (a template may write a history turn's header otherwise: Qwen3.5 drops the empty
        reasoning block); the opening read is what both and the generation prompt share."""
        number = candidate.needles
        placeholder = {"role": "assistant", "content": needle(number)}
        forms = []  # (text before the turn, header up to the placeholder, close after it)
        alone = None  # the render of the placeholder turn as the last message
        for messages in ([*candidate.messages, placeholder], [*candidate.messages, placeholder, self.follower]):
            output = self.render(messages, False, candidate.base)
            if output is None:
                continue
            if len(messages) == len(candidate.messages) + 1:
                alone = output
            rendered = output.text()
            starts = [offset for offset, index in output.message_spans() if index == len(candidate.messages)]
            at = rendered.find(needle(number))
            if starts and at >= starts[0]:
                after = [offset for offset, index in output.message_spans() if offset > at]
                close = rendered[at + len(needle(number)) : after[0] if after else len(rendered)]
                forms.append((rendered[: starts[0]], rendered[starts[0] : at], close.strip()))
        if not forms:
            return
        opening = self.opening
        for _, header, _ in forms:
            opening = common_prefix(header, opening)
        closes = sorted({close for _, _, close in forms})
        starts = set()
        for before, _, _ in forms:
            match = self.matches_prefix(before + opening, candidate) if opening else None
            if match is not None and match.end > candidate.position and match.end not in starts:
                starts.add(match.end)
                for turn in self.sampled_turns(match.end, opening, closes):
                    yield candidate.with_message(turn, match)
        for before, header, _ in forms:
            match = self.matches_prefix(before + header, candidate)
            if match is not None and match.end > candidate.position:
                yield candidate.with_message(placeholder, match, 1, fallback=True, base=alone)
                return

    def sampled_turns(self, start: int, opening: str, closes: list[str]):
        """The assistant messages the turn at ``start`` of the text may hold: read up to its first
        stop, or up to one of the next few places where the template's close of a history turn
        (one of ``closes``) stands (gpt-oss ends a history turn with ``<|end|>``, which the model does not
        sample, and writes its reasoning as a message of its own before it)."""
        ends = {}
        stops = [(at, stop) for at, stop in ((self.text.find(stop, start), stop) for stop in self.stops) if at >= 0]
        first_stop = len(self.text)
        if stops:
            first_stop, stop = min(stops)
            ends[first_stop] = stop
        for close in filter(None, closes):
            position = start
            for _ in range(HISTORY_CLOSES_TRIED):
                at = self.text.find(close, position)
                if at < 0 or at > first_stop:
                    # the turn never holds a stop (a model stops at its first): text past one is read
                    # as the turns it spells out, as a message's text holding a marker is
                    break
                ends.setdefault(at, "")
                position = at + len(close)
        for end in sorted(ends):
            message = turn_message(self.renderer, self.text[start:end], ends[end], opening, self.tools)
            if message is not None:
                yield message


def common_prefix(first: str, second: str) -> str:
    length = 0
    for a, b in zip(first, second):
        if a != b:
            break
        length += 1
    return first[:length]


def needle_message(role: str, content: str, earlier: list[Message]) -> Message:
    """A message of ``role`` with ``content``; a tool result answers the next unanswered call of
    the last assistant turn (by its id and name), as a caller's would."""
    message: Message = {"role": role, "content": content}
    if role == "tool":
        call = unanswered_call(earlier)
        if call is not None:
            message["tool_call_id"] = call.get("id")
            message["name"] = call.get("function", {}).get("name")
    return message


def unanswered_call(messages: list[Message]) -> dict | None:
    answered = 0
    for message in reversed(messages):
        if message.get("role") == "tool":
            answered += 1
        elif message.get("role") == "assistant":
            calls = message.get("tool_calls") or []
            return calls[answered] if answered < len(calls) else None
        else:
            return None
    return None


def turn_message(renderer: BridgeableRenderer, text: str, stop: str, opening: str, tools: Any) -> Message | None:
    """The assistant message a turn's text (after the opening, before its stop) encodes, parsed as
    ``parse_response`` parses a sampled turn; None when it does not parse cleanly."""
    close_lead = close_lead_of(renderer.TURN, text, stop)
    text = text[: len(text) - len(close_lead)]
    lead = content_lead_of(renderer.TURN, text, tools)
    text = text[len(lead) :]
    reasoning = renderer.REASONING
    if reasoning is not None and reasoning.in_content:
        reasoning = None  # the template reads the block out of the content itself
    parsed = parse_text(
        text,
        reasoning=reasoning,
        tool_calls=renderer.TOOL_CALLS,
        reasoning_prefilled=renderer._reasoning_prefilled(opening),
        tools=tools,
        close_lead=close_lead,
        in_call=starts_in_call(renderer.TOOL_CALLS, lead),
    )
    if any(call.status not in RENDERABLE_CALLS for call in parsed.calls) or parsed.reasoning_complete is False:
        return None
    return message_from_parse(parsed, renderer.TURN.content_parts)


def fill(message: Message, values: dict[int, str]) -> Message:
    """``message`` with each placeholder replaced by its captured text ("" for one the template
    never wrote, which :func:`hidden_variants` then varies; an assistant placeholder's text is
    parsed into the turn it holds by :func:`structured_turns`)."""

    def filled(text: str) -> str:
        return NEEDLE.sub(lambda match: values.get(int(match.group(1)), ""), text)

    return {key: filled(value) if isinstance(value, str) else value for key, value in message.items()}


def structured_turns(renderer: BridgeableRenderer, messages: list[Message], tools: Any) -> list[Message]:
    """``messages`` with each assistant turn read as one content text parsed into the turn it holds
    (reasoning, tool calls), where it parses cleanly and differs."""
    structured = []
    for message in messages:
        if (
            message.get("role") == "assistant"
            and not message.get("tool_calls")
            and isinstance(message.get("content"), str)
        ):
            parsed = turn_message(renderer, message["content"], "", "", tools)
            if parsed is not None and parsed != {"role": "assistant", "content": message["content"]}:
                message = parsed
        structured.append(message)
    return structured


# --- what the prompt hides ---------------------------------------------------------------------


def hidden_variants(messages: list[Message], hidden_contents: set[int]) -> list[list[Message]]:
    """Conversations that differ from ``messages`` only in fields a prompt may not show: the calls'
    ids in reverse order (which result answers which call), a reasoning text on every assistant turn
    without one, other text for contents the template never wrote (``hidden_contents``: indices)."""
    variants = []
    reversed_ids = [reverse_call_ids(message) for message in messages]
    if reversed_ids != messages:
        variants.append(reversed_ids)
    reasoned = [
        (
            {**message, "reasoning_content": HIDDEN_REASONING}
            if message.get("role") == "assistant" and not message.get("reasoning_content")
            else message
        )
        for message in messages
    ]
    if reasoned != messages:
        variants.append(reasoned)
    if hidden_contents:
        variants.append(
            [
                {**message, "content": HIDDEN_CONTENT} if index in hidden_contents else message
                for index, message in enumerate(messages)
            ]
        )
    return variants


def reverse_call_ids(message: Message) -> Message:
    calls = message.get("tool_calls") or []
    if message.get("role") != "assistant" or len(calls) < 2:
        return message
    ids = [call.get("id") for call in calls][::-1]
    return {**message, "tool_calls": [{**call, "id": ids[index]} for index, call in enumerate(calls)]}


# --- the entry point -----------------------------------------------------------------------------


def recover_conversation(renderer: BridgeableRenderer, prompt_text: str, tools: Any) -> Recovery:
    """The conversation the prompt's text was rendered from, and the variants it cannot tell apart
    from it; Unrecoverable (with the reason) when the text cannot be read back."""
    if renderer.TURN is None:
        raise Unrecoverable("no turn format")
    template_tools = renderer.template_tools(tools)
    reader = Reader(renderer, prompt_text, template_tools, tools)
    readings = []
    for reading in reader.read():
        # an assistant turn read as one text: the turn it holds is another reading
        for candidate in (structured_turns(renderer, reading, tools), reading):
            if candidate not in readings:
                readings.append(candidate)
    messages = readings[0]
    hidden = {
        index
        for index, message in enumerate(messages)
        if message.get("content") == "" and message.get("role") in ROLES_READ_AS_NEEDLES
    }
    variants = [*readings[1:], *hidden_variants(messages, hidden)]
    if messages[0].get("role") != "system" and "system" in (renderer.ROLES or ("system",)):
        # an empty system message the template writes as nothing still counts in its indices
        # (Bielik looks up messages[loop.index0 - 1] in a loop over messages[1:])
        variants.append([{"role": "system", "content": ""}, *messages])
    return Recovery(messages, variants)

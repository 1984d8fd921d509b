"""Learn an assistant turn's syntax by rendering needle conversations and diffing them.

The compiled renderer is an exact translation of the template, so probing it is
probing the template. Each probe renders a tiny conversation whose assistant
message carries unmistakable needles (``cnq7``, ``fnq7``...) and reads the
literal text around them: the turn close and what follows it, the reasoning
markers, the tool-call syntax. The results become class constants of the
generated renderer (see :mod:`rllm_renderers.turns.formats`).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from rllm_renderers.jinja import runtime as jinja
from rllm_renderers.turns.formats import ReasoningFormat, ToolCallFormat, TurnFormat
from rllm_renderers.core.output import RenderOutput
from rllm_renderers.turns.parsing import parse_text, starts_in_call

from .literals import docstring_repr as shown  # a template string in the class docstring
from .literals import docstring_text

CONTENT = "cnq7"
REASONING = "rnq7"
FIRST_TOOL = "fnq7"
SECOND_TOOL = "gnq7"
KEY_A, VALUE_A = "akq7", "avq7"
KEY_B, VALUE_B = "bkq7", "bvq7"
# Call ids: nine letters and digits, the shape Mistral's templates insist on; a template that writes
# them gets them read as the call's id (ID_SLOT stands for either while delimiters are compared).
FIRST_ID, SECOND_ID = "inq7xaaaa", "inq7xbbbb"
# A string value holding both quotes and a backslash: a template that writes strings as literals
# escapes them; one that writes them between quotes as they are cannot be read back.
QUOTES_AND_BACKSLASH = "q\"t'b\\s"
ID_SLOT = "\x00"
#: An XML-like tag, ``<think>``: a reasoning block's open marker is one, and its close the same with a slash.
TAG = re.compile(r"<[A-Za-z_][\w.:-]*>")
USER = {"role": "user", "content": "uq7"}
# calls a learned tool-call syntax must read back from the template's renders of them
READ_BACK_CALLS = (
    [(FIRST_TOOL, {KEY_A: VALUE_A, KEY_B: VALUE_B})],
    [(FIRST_TOOL, {KEY_A: VALUE_A}), (SECOND_TOOL, {})],
    [(FIRST_TOOL, {KEY_A: QUOTES_AND_BACKSLASH, KEY_B: 3})],
)


@dataclass(frozen=True)
class ProbeFacts:
    turn: TurnFormat | None
    reasoning: ReasoningFormat | None
    tool_calls: ToolCallFormat | None
    notes: tuple[str, ...]
    generation_prompt: str = ""
    prefix_stable: bool = False
    prefix_counterexample: str = ""
    # facts the probes could not learn ("turn", "reasoning", "tool_calls") -> why
    unlearned: dict[str, str] = field(default_factory=dict)
    # facts learned whose proof checked nothing (no sample turn read back) -> why
    unproven: dict[str, str] = field(default_factory=dict)

    def describe(self) -> list[str]:
        """Docstring lines telling a reviewer what the parser and the bridge rely on."""
        lines = []
        if self.turn is not None:
            stops = ", ".join(shown(stop) for stop in self.turn.stop_tokens)
            if self.turn.close:
                lines.append(f"Assistant turns end with {shown(self.turn.close)} (stops: {stops});")
            else:
                lines.append(f"Nothing closes an assistant turn: the next message's header does (stops: {stops});")
            lines.append(f"the template then writes {shown(self.turn.after_close)} before the next message.")
            if self.turn.content_lead_with_tools is not None:
                lead = self.turn.content_lead_with_tools
                lines.append(f"With tools declared, a plain answer starts with {shown(lead)} (parse_response(tools=...) drops it).")
        lines.append(f"Generation prompt (default knobs): {shown(self.generation_prompt)}.")
        if self.reasoning is not None:
            lines.append(f"Reasoning: {shown(self.reasoning.open)} ... {shown(self.reasoning.close)}.")
        if self.tool_calls is not None:
            lines.append(describe_tool_calls(self.tool_calls))
        lines += [f"Note: {note}." for note in self.notes]
        for fact, reason in self.unlearned.items():
            lines.append(f"Not learned ({fact}): {docstring_text(reason)}.")  # (a proof quotes renders)
        if self.unlearned:
            lines.append("parse_response returns the raw content with status 'unlearned'; the bridge returns None.")
        for fact, reason in self.unproven.items():
            lines.append(f"Unproven ({fact}): {docstring_text(reason)}.")
        if self.prefix_stable:
            lines.append("Prefix-stable: appending messages never changes the text of earlier turns.")
        else:
            lines.append("Not prefix-stable: the template rewrites earlier turns when messages are appended")
            lines.append(f"({self.prefix_counterexample}); the bridge returns None where that would matter")
            lines.append('unless thinking_retention="verbatim".')
        return lines

    def warning(self) -> str | None:
        """One line for ``generate`` when some turn fact is missing."""
        if not self.unlearned:
            return None
        facts = "; ".join(f"{fact}: {reason}" for fact, reason in self.unlearned.items())
        return f"could not learn {facts} (the render is exact; parse_response degrades, the bridge returns None)"


def describe_tool_calls(syntax: ToolCallFormat) -> str:
    """The docstring line spelling out one call: ``Tool calls (STYLE): START NAME ... END.``"""
    index = f" {shown(syntax.call_index)} POSITION" if syntax.call_index else ""
    name_end, call_end = shown(syntax.name_end), shown(syntax.call_end)
    if syntax.call_id_after == "name_end":
        name_end += f" ID {shown(syntax.call_id_end)}"
    elif syntax.call_id_after == "call_end":
        call_end += f" ID {shown(syntax.call_id_end)}"
    body = f"ARGUMENTS {shown(syntax.arguments_end)} NAME" if syntax.arguments_end else f"NAME{index} {name_end} ARGUMENTS"
    separator = f", after {shown(syntax.call_separator)} from the second on" if syntax.call_separator else ""
    return f"Tool calls ({syntax.style}): {shown(syntax.call_start)} {body} {call_end}{separator}."


def tool_call(name: str, arguments: dict, call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


NO_TOOL_CALLS = "the template does not render tool calls of OpenAI-format messages"


def declared_probe_tools() -> list[dict]:
    """The tools the probe's calls call, as a request declares them (OpenAI format)."""
    parameters = {"type": "object", "properties": {KEY_A: {"type": "string"}, KEY_B: {"type": "string"}}}
    return [
        {"type": "function", "function": {"name": tool_name, "description": "A probe tool.", "parameters": parameters}}
        for tool_name in (FIRST_TOOL, SECOND_TOOL)
    ]


class Prober:
    """Needle renders through one renderer instance (text only)."""

    def __init__(self, renderer: Any, added_tokens: frozenset[str]) -> None:
        self.renderer = renderer
        self.added_tokens = added_tokens
        self.notes: list[str] = []
        self.raw = False  # render through the raw template (see render_raw)
        self.tools: list[dict] | None = None  # the tool list every render declares (see tool_call_format)
        self.stop_tokens: tuple[str, ...] = ()

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str | None:
        if self.raw:
            return self.render_raw(messages, add_generation_prompt)
        text = self.render_form(messages, add_generation_prompt)
        contents = [message["content"] for message in messages if isinstance(message.get("content"), str)]
        contents = [content for content in contents if content]
        if self.renderer.CONTENT_FORMAT == "parts" and contents and not any(content in (text or "") for content in contents):
            # a template that reads content only as OpenAI content parts (Idefics: `for line in
            # message['content']`) writes none of a string's: probe it with parts
            text = self.render_form([as_text_parts(message) for message in messages], add_generation_prompt) or text
        return text

    def render_form(self, messages: list[dict], add_generation_prompt: bool) -> str | None:
        # a template that cannot render without a tool list is probed with an empty one
        for tools in (None, []) if self.tools is None else (self.tools,):
            try:
                return self.renderer.render_text(messages, tools=tools, add_generation_prompt=add_generation_prompt)
            except ValueError:
                continue
        return None

    def render_raw(self, messages: list[dict], add_generation_prompt: bool) -> str | None:
        """The template on messages as given, None values kept (transformers would drop them).

        Only for learning syntax: DeepSeek-V3's template writes tool calls only for
        ``content: None``, which transformers 5 never hands it, yet that is what the model emits.
        """
        data = jinja.template_data(messages)
        out = RenderOutput(data)
        try:
            tools = self.renderer.template_tools(self.tools) if self.tools is not None else None
            self.renderer.render_template(out, data, tools, None, add_generation_prompt)
        except Exception:
            return None
        return out.text()

    def generation_prompt_context(self) -> str | None:
        return self.render([USER], add_generation_prompt=True)

    def completion(self, assistant: dict) -> str | None:
        """What the template writes for ``assistant`` after the generation prompt (as last message)."""
        prompt = self.generation_prompt_context()
        full = self.render([USER, assistant])
        if prompt is None or full is None or not full.startswith(prompt):
            if prompt is None or full is None:
                return None
            sampled = after_prompt(prompt, full)  # a header spaced otherwise in the prompt
            if sampled is not None:
                return sampled
            # Some templates emit part of the prompt differently (e.g. a prefilled <think>); compare on
            # the longest common prefix instead.
            common = back_to_boundary(common_prefix(prompt, full))
            return full[len(common) :]
        return full[len(prompt) :]

    # --- turn close -----------------------------------------------------------------

    def turn_format(self, eos_token: str | None) -> TurnFormat:
        """The close, what follows it, and the stop strings, read from the text around a plain answer.

        The close is what the template writes between an assistant message's content and the
        next message, up to and including its first marker (``<|im_end|>``, ``\n</assistant>``);
        what follows is ``after_close``. The template may close the last turn differently from
        earlier ones (gpt-oss: ``<|return|>`` vs ``<|end|>``): the model samples the last one.
        When the template writes nothing, the next message's header ends the turn, and the
        headers of the messages that can follow an assistant turn are the stops.
        """
        completion = self.completion({"role": "assistant", "content": CONTENT})
        if completion is None or CONTENT not in completion:
            raise ProbeError("the template does not render a plain assistant message")
        answered = [USER, {"role": "assistant", "content": CONTENT}]
        if not self.renders_messages_one_by_one(answered) and not self.continues_generation_prompt(answered):
            # Granite Guardian quotes the last two messages inside one user turn, for a classifier
            raise ProbeError("the template writes an assistant message inside another message's text, not as its own turn")
        own = self.own_text([USER, {"role": "assistant", "content": CONTENT}], 1)
        opener = self.renderer.generation_prompt()
        if own is not None and opener.strip() and not common_prefix(own.lstrip(), opener.lstrip()).strip():
            # Llama Guard transcribes the conversation ("Agent: ...") inside the user turn it ends
            # with the request for a verdict, which is what the generation prompt opens. (Leading
            # whitespace aside: Falcon writes the '\n' before 'Assistant:' in the previous message.)
            raise ProbeError(
                f"the template writes an assistant message ({own[:40]!r}...) unlike the turn its generation "
                f"prompt opens ({opener[:40]!r}...), not as its own turn"
            )
        content_lead = completion[: completion.index(CONTENT)]
        # a marker the turn writes before its content cannot be what ends it (Kimi-K3 closes every
        # tag, its think block's too, with `<|close|>`; its turn ends at `<|end_of_msg|>`)
        openers = frozenset(token for token in self.added_tokens if token in content_lead)
        markers = self.added_tokens - openers or self.added_tokens
        last_close, _ = self.split_close(completion[completion.index(CONTENT) + len(CONTENT) :], markers)
        between = self.text_before_last_message(
            [USER, {"role": "assistant", "content": CONTENT}, {"role": "user", "content": "uq8"}], CONTENT
        )
        middle_close, after_close = self.split_close(between, markers) if between is not None else (last_close, "")
        close = last_close or middle_close
        if not last_close.strip() and self.writes_next_header():
            close, after_close = "", ""  # the next message's header, written inside the turn: it ends it
        # generation stops at the close's first marker (or at its text); with no close, at the next headers
        stops = [first_added_token(close, markers) or close.strip()] if close.strip() else self.next_headers()
        if not stops:
            raise ProbeError("nothing closes an assistant turn and no message header follows one")
        for extra in self.tool_call_closes(close, after_close):
            if extra not in stops:
                stops.append(extra)
        if eos_token and eos_token not in stops:
            stops.append(eos_token)
        self.stop_tokens = tuple(stops)
        return TurnFormat(
            close=close,
            after_close=after_close,
            stop_tokens=tuple(stops),
            content_lead=content_lead,
            content_parts=not self.writes_string_content(),
        )

    def writes_string_content(self) -> bool:
        """Whether the template writes a plain answer given as a string (not only as content parts)."""
        if self.renderer.CONTENT_FORMAT != "parts":
            return True
        return CONTENT in (self.render_form([USER, {"role": "assistant", "content": CONTENT}], False) or "")

    @contextlib.contextmanager
    def declaring_tools(self) -> Iterator[None]:
        """Renders inside declare the probe's tools, as a request whose answer may call them does."""
        self.tools = declared_probe_tools()
        try:
            yield
        finally:
            self.tools = None

    def content_lead_with_tools(self) -> str | None:
        """What a plain answer starts with when the request declares tools (None: the template
        writes no plain answer then)."""
        with self.declaring_tools():
            completion = self.completion({"role": "assistant", "content": CONTENT})
        return completion[: completion.index(CONTENT)] if completion and CONTENT in completion else None

    @staticmethod
    def split_close(text: str, markers: frozenset[str]) -> tuple[str, str]:
        """``text`` (what follows a turn's content) as (close, after_close): the close runs through
        the first of ``markers``; without one it is the text before its trailing whitespace."""
        marker = first_added_token(text, markers)
        if marker is not None:
            end = text.index(marker) + len(marker)
            return text[:end], text[end:]
        stripped = text.rstrip()
        return stripped, text[len(stripped) :]

    def renders_messages_one_by_one(self, messages: list[dict]) -> bool:
        """Whether the render of ``messages`` has any message's own part (a template that loops over
        them), rather than only text about them."""
        try:
            output = self.renderer._render_output(messages, None, False)
        except ValueError:
            return True  # the probes that follow say why they cannot learn from it
        return any(index >= 0 for _, index in output.message_spans())

    def continues_generation_prompt(self, messages: list[dict]) -> bool:
        """Whether the render of ``messages`` (ending with an assistant message) is the render of the
        ones before with the generation prompt, then that message's content: a turn of its own, also
        where the template marks no message's part (Reka-Edge builds its whole text in a variable and
        writes it once)."""
        prompt = self.render(messages[:-1], add_generation_prompt=True)
        full = self.render(messages)
        return bool(prompt and full and full.startswith(prompt) and messages[-1]["content"] in full[len(prompt) :])

    def own_text(self, messages: list[dict], index: int) -> str | None:
        """The text of message ``index``'s own part (None when the template marks none)."""
        try:
            output = self.renderer._render_output(messages, None, False)
        except ValueError:
            return None
        spans, text = output.message_spans(), output.text()
        for position, (start, owner) in enumerate(spans):
            if owner == index:
                end = spans[position + 1][0] if position + 1 < len(spans) else len(text)
                return text[start:end]
        return None

    def last_message_start(self, messages: list[dict]) -> tuple[str, int] | None:
        """The text of ``messages`` and where the template starts rendering the last one."""
        try:
            output = self.renderer._render_output(messages, None, False)
        except ValueError:
            return None
        spans = output.message_spans()
        start = next((offset for offset, index in spans if index == len(messages) - 1), None)
        return None if start is None else (output.text(), start)

    def text_before_last_message(self, messages: list[dict], needle: str) -> str | None:
        """What the template writes after the last ``needle`` and before the last message starts
        (None when the template rejects the messages or does not mark where messages start)."""
        found = self.last_message_start(messages)
        if found is None:
            return None
        text, start = found
        end = text.rfind(needle, 0, start)
        return text[end + len(needle) : start] if end >= 0 else None

    @staticmethod
    def followed_turns() -> list[list[dict]]:
        """An assistant turn and a message after it: a user message after a plain answer, a tool
        result after a call (its content "" and None)."""
        call = tool_call(FIRST_TOOL, {KEY_A: VALUE_A}, FIRST_ID)
        result = {"role": "tool", "content": "tq8", "tool_call_id": FIRST_ID}
        return [
            [{"role": "assistant", "content": CONTENT}, {"role": "user", "content": "uq8"}],
            [{"role": "assistant", "content": "", "tool_calls": [call]}, result],
            [{"role": "assistant", "content": None, "tool_calls": [call]}, result],
        ]

    def written_for_next(self, conversation: list[dict], start: int) -> str:
        """What the template writes inside the assistant turn before the last message of
        ``conversation`` because that message follows it, beyond what it writes when the turn is the
        last message; ``start``: where the last message's own part starts in the render of
        ``conversation``. "" when nothing is."""
        try:
            alone = self.renderer._render_output(conversation[:-1], None, False).text()
            text = self.renderer._render_output(conversation, None, False).text()
        except ValueError:
            return ""
        return text[len(alone) : start] if text.startswith(alone) and start > len(alone) else ""

    def writes_next_header(self) -> bool:
        """Whether an assistant turn followed by another message ends with text that depends on that
        message's role (``<|user|>`` before a user message, ``<|observation|>`` before a tool result),
        and which it does not write as the last message: the next message's header, written inside
        the turn (a GLM-4-MoE training variant, for its loss mask). It is no close of the turn."""
        written = set()
        for messages in self.followed_turns():
            found = self.last_message_start([USER, *messages])
            if found is not None:
                written.add(self.written_for_next([USER, *messages], found[1]).strip())
        return len(written - {""}) > 1

    def next_headers(self) -> list[str]:
        """The markers that open a user message or a tool result after an assistant turn (with what
        the turn writes for it: the next header when the turn writes it, see ``writes_next_header``)."""
        headers: list[str] = []
        for messages in self.followed_turns():
            found = self.last_message_start([USER, *messages])
            needle = messages[-1]["content"]
            if found is None or needle not in found[0][found[1] :]:
                continue
            text, start = found
            header = self.written_for_next([USER, *messages], start) + text[start : text.index(needle, start)]
            header = self.steady_part(messages, header, needle)
            marker = first_added_token(header, self.added_tokens)
            if marker is None:
                # A header without a marker (Apertus opens tool results with a bare `[`) is a stop
                # only when it reads as one (`User:`); else the assistant's own turn ends at its
                # last marker (`<|tools_suffix|>`), which the model samples before the header.
                own = messages[0]["tool_calls"][0]["function"]["name"] if messages[0].get("tool_calls") else CONTENT
                marker = own_end_marker(text[:start], own, self.added_tokens) or word_like(header.strip())
            if marker and marker not in headers:
                headers.append(marker)
        return headers

    def steady_part(self, messages: list[dict], header: str, needle: str) -> str:
        """``header`` (of the last of ``messages``, after USER) up to where it differs from the same
        message's header a round later: a header that carries a counter (``[Round 2]``) is a stop
        only in its part that does not change (``[Round ``)."""
        found = self.last_message_start([USER, *messages, *messages])
        if found is None or needle not in found[0][found[1] :]:
            return header
        text, start = found
        later = self.written_for_next([USER, *messages, *messages], start) + text[start : text.index(needle, start)]
        return header if later == header else common_prefix(header, later)

    def tool_call_closes(self, close: str, after_close: str = "") -> list[str]:
        """Closes of tool-calling turns, when they differ (gpt-oss ends a call with <|call|>)."""
        if not close.strip():
            return []  # the next message's header ends every turn
        call = tool_call(FIRST_TOOL, {KEY_A: VALUE_A}, FIRST_ID)
        # (without what the template writes after every turn's close: command-r7b's next header)
        single = self.completion({"role": "assistant", "content": None, "tool_calls": [call]})
        completion = self.without_after_every_close(close + after_close, single)
        if not completion or completion.rstrip().endswith(close.strip()):
            return []
        token = last_added_token(completion, self.added_tokens)
        calls = [call, tool_call(SECOND_TOOL, {KEY_A: VALUE_B}, SECOND_ID)]
        double = self.completion({"role": "assistant", "content": None, "tool_calls": calls})
        double = self.without_after_every_close(close + after_close, double)
        header = self.renderer.generation_prompt().strip()
        per_call_turns = bool(header) and double is not None and header in double  # (harmony: a turn per call)
        if token and double and token in double.rstrip()[: -len(token)] and not per_call_turns:
            # the token ends each call, not the turn: what ends it is the tool reply's opener, which the
            # model samples as its stop (a community Gemma-4 template's `<|tool_response>`)
            token = self.tool_reply_opener(call)
        return [token] if token else []

    def without_after_every_close(self, close: str, completion: str | None) -> str | None:
        """``completion`` (right-stripped) without what the template writes after every turn's close
        (:meth:`after_every_close`)."""
        if not completion:
            return completion
        return completion.rstrip()[: len(completion.rstrip()) - len(self.after_every_close(close, completion))]

    def after_every_close(self, close: str, completion: str) -> str:
        """The text that ends both ``completion`` (a tool-calling turn) and a plain answer after its
        ``close`` (with what follows it in the turn): what the template writes after every turn, not
        a close of its own (a template that writes the next turn's header unasked, command-r7b)."""
        plain = (self.completion({"role": "assistant", "content": CONTENT}) or "").rstrip()
        marker = close.strip()
        after = plain[plain.rfind(marker) + len(marker) :] if marker and marker in plain else ""
        # (its longest end the completion shares, starting at a marker: never part of a token)
        starts = [at for at in range(len(after)) if any(after.startswith(token, at) for token in self.added_tokens)]
        return next((after[at:] for at in starts if completion.rstrip().endswith(after[at:])), "")

    def tool_reply_opener(self, call: dict) -> str | None:
        """The first marker of the header the template writes before a tool result, after a call."""
        result = {"role": "tool", "content": "tq8", "tool_call_id": FIRST_ID}
        found = self.last_message_start([USER, {"role": "assistant", "content": None, "tool_calls": [call]}, result])
        if found is None or "tq8" not in found[0][found[1] :]:
            return None
        text, start = found
        return first_added_token(text[start : text.index("tq8", start)], self.added_tokens)

    # --- reasoning ------------------------------------------------------------------

    def reasoning_format(self) -> ReasoningFormat | None:
        with_reasoning = self.completion({"role": "assistant", "content": CONTENT, "reasoning_content": REASONING})
        if with_reasoning is None or REASONING not in with_reasoning:
            learned = self.reasoning_from_tool_turn()
            if learned is not None:
                self.notes.append(
                    "reasoning markers learned from a tool-calling turn (the template drops a final answer's reasoning)"
                )
                return learned
            learned = self.reasoning_cut_from_content()
            if learned is None:
                self.notes.append("the template does not render reasoning_content of the last assistant turn")
            else:
                self.notes.append(
                    "reasoning markers learned from the template, which cuts an assistant turn's content in "
                    "history up to the close tag"
                )
            return learned
        prompt = self.generation_prompt_context() or ""
        before = with_reasoning[: with_reasoning.index(REASONING)]
        between = with_reasoning[with_reasoning.index(REASONING) + len(REASONING) : with_reasoning.index(CONTENT)]
        open_marker, after_open = split_trailing_space(before)
        if not open_marker.strip():
            # the generation prompt already opened the reasoning block (a prefilled <think>); a template
            # without a generation flag (DeepSeek-V4) writes it after every trailing user turn
            prefill = (
                prompt[len(common_prefix(prompt, self.render([USER]) or "")) :] or self.renderer.generation_prompt()
            )
            open_marker, after_open = split_trailing_space(prefill)
            open_marker = last_marker(open_marker, self.added_tokens)
            # ... unless the prompt closes an empty block (Hunyuan's `<think></think>` with thinking
            # off): the marker the reasoning itself follows in the turn's render opens it
            whole = self.render([USER, {"role": "assistant", "content": CONTENT, "reasoning_content": REASONING}]) or ""
            lead, space = split_trailing_space(whole[: whole.find(REASONING)] if REASONING in whole else "")
            opener = last_marker_word(lead, self.added_tokens)
            plain = self.render([USER, {"role": "assistant", "content": CONTENT}]) or ""
            header = last_added_token(plain[: plain.find(CONTENT)], self.added_tokens) if CONTENT in plain else None
            if opener is not None and opener not in (open_marker, header) and opener not in self.stop_tokens:
                open_marker, after_open = opener, space
        before_close, close_and_after = split_leading_space(between)
        # The content may be introduced by its own marker (gpt-oss: <|channel|>final<|message|>): it is the
        # text a plain answer carries before its content.
        plain = self.completion({"role": "assistant", "content": CONTENT}) or ""
        content_start = plain[: plain.index(CONTENT)] if CONTENT in plain else ""
        if (
            content_start
            and len(close_and_after) > len(content_start)  # else the content start is the close itself
            and close_and_after.endswith(content_start)
            and content_start.strip()
            and open_marker not in content_start
            and close_and_after[: -len(content_start)].strip()
        ):
            # (when nothing would be left for the close, the plain answer's lead is the reasoning close
            # itself, written for empty reasoning: MiniMax's bare </mm:think>)
            close_marker_and_space = close_and_after[: -len(content_start)]
        else:
            content_start = ""
            close_marker_and_space = close_and_after
        close_marker, after_close = split_trailing_space(close_marker_and_space)
        if not close_marker:
            raise ProbeError(f"no marker ends the reasoning (between: {between!r})")
        return ReasoningFormat(
            open=open_marker.strip(),
            close=close_marker,
            after_open=after_open,
            before_close=before_close,
            after_close=after_close,
            content_start=content_start,
        )

    def reasoning_from_tool_turn(self) -> ReasoningFormat | None:
        """Reasoning markers from a tool-calling turn, for templates that keep reasoning only in an
        unfinished tool cycle (harmony drops a final answer's analysis): the turn with reasoning is
        the turn without it plus OPEN reasoning CLOSE in front."""
        calls = [tool_call(FIRST_TOOL, {KEY_A: VALUE_A}, FIRST_ID)]
        with_reasoning = {"role": "assistant", "content": None, "reasoning_content": REASONING, "tool_calls": calls}
        without = {"role": "assistant", "content": None, "tool_calls": calls}
        middle = reasoning_block(self.completion(with_reasoning), self.completion(without))
        if middle is not None and not middle[: middle.index(REASONING)].strip():
            # the generation prompt holds the open marker (Gemma-4 prefills an empty thought channel
            # with thinking off, and a thought channel opens the turn): compare whole renders instead
            middle = reasoning_block(self.render([USER, with_reasoning]), self.render([USER, without]))
        if middle is None:
            return None
        open_marker, after_open = split_trailing_space(middle[: middle.index(REASONING)])
        before_close, close_and_after = split_leading_space(middle[middle.index(REASONING) + len(REASONING) :])
        close_marker, after_close = split_trailing_space(close_and_after)
        if not open_marker.strip() or not close_marker:
            return None
        lead = self.plain_lead()
        content_start = lead if lead.strip() and open_marker not in lead else ""
        return ReasoningFormat(
            open=open_marker.strip(),
            close=close_marker,
            after_open=after_open,
            before_close=before_close,
            after_close=after_close,
            content_start=content_start,
        )

    def reasoning_cut_from_content(self) -> ReasoningFormat | None:
        """Reasoning the template never writes but cuts out of an assistant turn's content in history
        (QwQ: ``content.split('</think>')[-1].lstrip('\\n')``; DeepSeek-R1 also in the last turn).

        The close is a tag ``</X>`` the template is seen to cut at: the counterpart of a tag ``<X>``
        the generation prompt ends with (the model goes on inside the block), or an added token.
        The open marker is ``<X>``: where the prompt does not end with it the model writes it
        itself (and the parser, as the template, also reads a turn that skipped it up to the close
        as the block; a turn without a close is all content). ``after_close`` is the whitespace the
        template drops after the close; ``before_close`` stays empty, as nothing the template writes
        shows how the block ends.
        """
        try:
            prefill = self.renderer.generation_prompt()
        except ValueError:
            prefill = ""
        tag, after_prefill = split_trailing_space(prefill)
        prefilled = last_marker(tag, self.added_tokens)
        trailing_tag = re.search(TAG.pattern + "$", tag)
        if not TAG.fullmatch(prefilled) and trailing_tag:  # a plain-text tag (DeepSeek-V3.1's <think>)
            prefilled = trailing_tag.group()
        prefilled_close = "</" + prefilled[1:]
        closes = [prefilled_close] if tag.endswith(prefilled) and TAG.fullmatch(prefilled) else []
        closes += sorted(token for token in self.added_tokens if token.startswith("</") and TAG.fullmatch("<" + token[2:]))
        if prefilled_close in closes:
            prompt, plain_turn = self.generation_prompt_context(), self.render([USER, {"role": "assistant", "content": CONTENT}])
            if prompt and plain_turn and plain_turn.startswith(prompt):
                # the template writes the prefilled tag before a plain answer: it reads what follows as content
                closes = [close for close in closes if close != prefilled_close]
        if not closes:
            return None  # (no candidate: spare the probe renders, which every template without reasoning reaches)

        def history_render(content: str) -> str | None:
            return self.render([USER, {"role": "assistant", "content": content}, USER])

        plain = history_render(CONTENT)
        if plain is None or CONTENT not in plain:
            return None
        for close_marker in dict.fromkeys(closes):
            cut = history_render(REASONING + close_marker + "\n\n" + CONTENT)
            if cut == plain:
                after_close = "\n\n"  # dropped with the block
            elif cut == plain.replace(CONTENT, "\n\n" + CONTENT, 1):
                after_close = ""  # kept as the content's start
            else:
                continue
            open_marker = "<" + close_marker[2:]
            after_open = after_prefill if open_marker == prefilled else ""
            return ReasoningFormat(
                open=open_marker, close=close_marker, after_open=after_open, after_close=after_close, in_content=True
            )
        return None

    # --- tool calls -----------------------------------------------------------------

    def tool_call_format(self) -> ToolCallFormat | None:
        syntax = self.learn_tool_call_format()
        if syntax is None and NO_TOOL_CALLS in self.notes:
            # Some templates write tool calls only when the request declares tools (Hunyuan-A13B
            # turns its whole prompt into a tool-use prompt then): probe again with the probe's
            # tools declared, as a request whose answer calls them does.
            self.notes.remove(NO_TOOL_CALLS)
            with self.declaring_tools():
                syntax = self.learn_tool_call_format()
                if syntax is not None:
                    self.check_reads_back(syntax)
                    self.notes.append("the template writes tool calls only when the request declares tools")
            return syntax
        if syntax is not None:
            self.check_reads_back(syntax)
        return syntax

    def check_reads_back(self, syntax: ToolCallFormat) -> None:
        """Raise unless ``syntax`` reads the probe renders back as the calls they were rendered from: a
        syntax learned from some renders must not misread others (a wrong parse is worse than none)."""
        for calls in READ_BACK_CALLS:
            messages = [tool_call(name, arguments, call_id) for (name, arguments), call_id in zip(calls, (FIRST_ID, SECOND_ID))]
            completion = self.tool_completion(messages)
            if completion is None or any(name not in completion for name, _ in calls):
                continue  # the template does not render these calls (one call per turn)
            lead = self.plain_lead() if syntax.prefilled_start else ""
            lead = lead if lead and completion.startswith(lead) else ""
            text, in_call = completion[len(lead) :], starts_in_call(syntax, lead)
            parsed = parse_text(text, reasoning=None, tool_calls=syntax, reasoning_prefilled=False, in_call=in_call)
            read = [(call.name, call.arguments) for call in parsed.calls]
            if read != calls:
                raise ProbeError(f"the tool-call syntax learned from the probes reads {completion!r} back as {read!r}")

    def learn_tool_call_format(self) -> ToolCallFormat | None:
        arguments = {KEY_A: VALUE_A, KEY_B: VALUE_B}
        single = self.tool_completion([tool_call(FIRST_TOOL, arguments, FIRST_ID)])
        if single is None or FIRST_TOOL not in single:
            self.notes.append(NO_TOOL_CALLS)
            return None
        double = self.tool_completion(
            [tool_call(FIRST_TOOL, {KEY_A: VALUE_A}, FIRST_ID), tool_call(SECOND_TOOL, {}, SECOND_ID)], content=CONTENT
        )
        if double is None or SECOND_TOOL not in double:  # maybe only without content (DeepSeek-V3)
            double = self.tool_completion(
                [tool_call(FIRST_TOOL, {KEY_A: VALUE_A}, FIRST_ID), tool_call(SECOND_TOOL, {}, SECOND_ID)]
            )
        if double is not None and SECOND_TOOL not in double:
            double = None  # the template renders only the first call
        if double is None:
            self.notes.append("the template renders at most one tool call per turn")
        prefilled = self.prefilled_call_start(single, double)
        if prefilled:  # learn from the calls as the template writes them, start included
            single = prefilled + single
            double = prefilled + double if double.startswith(FIRST_TOOL) else double
        single = single.replace(FIRST_ID, ID_SLOT)
        double = None if double is None else double.replace(FIRST_ID, ID_SLOT).replace(SECOND_ID, ID_SLOT)
        syntax = self.call_syntax(single, double, arguments)
        if prefilled and syntax.call_start != prefilled:
            raise ProbeError(f"the prompt ends with {prefilled!r}, which is not the learned call start {syntax.call_start!r}")
        return dataclasses.replace(syntax, prefilled_start=True) if prefilled else syntax

    def prefilled_call_start(self, single: str, double: str | None) -> str:
        """The call start the generation prompt ends with, when a tool-calling turn starts with the
        name (Functionary-v3.2's prompt ends with ``>>>``, which starts every call): the end of the
        prompt that also precedes the second call's name. "" when there is none (MiniCPM3's calls
        start with their names), or when an answer starts with no lead of its own (``all``), which
        alone tells an answer from a call."""
        if not single.startswith(FIRST_TOOL) or double is None:
            return ""
        start = common_suffix(self.renderer.generation_prompt(), double[: double.index(SECOND_TOOL)])
        return start if start.strip() and self.plain_lead().strip() else ""

    def call_syntax(self, single: str, double: str | None, arguments: dict) -> ToolCallFormat:
        """The call syntax of the single- and two-call turns (ids replaced by ID_SLOT)."""
        rendered_arguments = find_json(single, arguments)
        if rendered_arguments is not None:
            return free_of_needles(with_call_id(self.json_style(single, double, rendered_arguments)))
        quote = key_value_quote(single)
        if quote is not None:
            return free_of_needles(with_call_id(self.key_value_style(single, double, quote)))
        quote = keyword_quote(single)
        if quote is not None:
            return free_of_needles(with_call_id(self.python_style(single, double, quote)))
        if f"({KEY_A}={VALUE_A}" in single:
            # Llama-3.2's pythonic template: '%s' | format(value); n=3 and n='3' are written alike too
            raise ProbeError(
                f"the template writes keyword arguments with bare values ({single!r}): where a value ends is not "
                "in the text (a value may hold ', k=' or '), f(')"
            )
        if KEY_A in single and VALUE_A in single:
            return free_of_needles(with_call_id(self.xml_style(single, double)))
        raise ProbeError(f"cannot find the tool-call arguments in {single!r}")

    def tool_completion(self, calls: list[dict], content: str | None = None) -> str | None:
        for body in ([content] if content else [None, ""]):
            completion = self.completion({"role": "assistant", "content": body, "tool_calls": calls})
            if completion is not None and FIRST_TOOL in completion:
                return completion
        # Fallback: the raw template, with JSON-string arguments (for templates that concatenate them).
        as_strings = [
            {**call, "function": {**call["function"], "arguments": json.dumps(call["function"]["arguments"])}}
            for call in calls
        ]
        self.raw = True
        try:
            for body in ([content] if content else [None, ""]):
                for variant in (calls, as_strings):
                    completion = self.completion({"role": "assistant", "content": body, "tool_calls": variant})
                    if completion is not None and FIRST_TOOL in completion:
                        note = (
                            "tool-call syntax learned from the raw template (under transformers it renders no "
                            "OpenAI-format tool calls)"
                        )
                        if note not in self.notes:
                            self.notes.append(note)
                        return completion
        finally:
            self.raw = False
        return None

    def json_style(self, single: str, double: str | None, rendered_arguments: str) -> ToolCallFormat:
        name_at = single.index(FIRST_TOOL)
        if single.find(rendered_arguments, name_at) < 0:
            return self.arguments_first_style(single, double, rendered_arguments)
        arguments_at = single.index(rendered_arguments, name_at)
        name_end = single[name_at + len(FIRST_TOOL) : arguments_at]
        after_single = single[arguments_at + len(rendered_arguments) :]
        after_first_in_double = None
        if double is not None:
            first_arguments = find_json(double, {KEY_A: VALUE_A})
            if first_arguments is not None:
                at = double.index(first_arguments, double.index(FIRST_TOOL))
                after_first_in_double = double[at + len(first_arguments) :]
        name_end, call_index = self.positioned_name_end(name_end, double)
        extra = {"call_index": call_index} if call_index else {}
        if self.writes_name_as_json():
            extra["name_json"] = True
        return ToolCallFormat(
            style="json",
            name_end=name_end,
            **self.call_boundaries(single[:name_at], after_single, double, after_first_in_double),
            **extra,
        )

    def arguments_first_style(self, single: str, double: str | None, rendered_arguments: str) -> ToolCallFormat:
        """JSON arguments written before the name: ``{ "arguments": {...}, "name": "NAME"}`` (Hermes'
        vLLM template); the text between them is ``arguments_end``."""
        arguments_at = single.index(rendered_arguments)
        name_at = single.index(FIRST_TOOL, arguments_at)
        after_first_in_double = anchors = None
        if double is not None:
            # each call of the two-call turn starts to differ at its arguments: the first call's
            # {"akq7": "avq7"} and, after the first name, the second call's {}
            first_arguments = find_json(double, {KEY_A: VALUE_A})
            first_at = double.find(first_arguments) if first_arguments else -1
            first_name = double.find(FIRST_TOOL, first_at) if first_at >= 0 else -1
            first_end = first_name + len(FIRST_TOOL)
            second_arguments = find_json(double[first_end:], {}) if first_name >= 0 else None
            second_at = double.find(second_arguments, first_end) if second_arguments else -1
            if not 0 <= second_at < double.index(SECOND_TOOL):
                raise ProbeError(f"the second tool call's arguments do not follow the first call: {double!r}")
            after_first_in_double, anchors = double[first_end:], (first_at, second_at)
        boundaries = self.call_boundaries(
            single[:arguments_at], single[name_at + len(FIRST_TOOL) :], double, after_first_in_double, anchors
        )
        extra = {"name_json": True} if self.writes_name_as_json() else {}
        arguments_end = single[arguments_at + len(rendered_arguments) : name_at]
        return ToolCallFormat(style="json", name_end="", arguments_end=arguments_end, **boundaries, **extra)

    def writes_name_as_json(self) -> bool:
        """Whether the template escapes the name as a JSON string (Mistral-Nemo: ``function|tojson``)."""
        quoted = self.tool_completion([tool_call(FIRST_TOOL + '"', {KEY_A: VALUE_A}, FIRST_ID)]) or ""
        return FIRST_TOOL + '\\"' in quoted

    def positioned_name_end(self, name_end: str, double: str | None) -> tuple[str, str]:
        """``(name_end, call_index)``: when the second call's text after its name is ``name_end`` with
        one number one higher, counted from 0 or from 1 (Kimi-K2 writes ``functions.NAME:0``, then
        ``:1``; Kimi-K3 ``tool="NAME" index="1"``, then ``index="2"``), the text before the number is
        ``call_index`` and what follows it ``name_end``."""
        if double is None or SECOND_TOOL not in double:
            return name_end, ""
        after_second = double[double.index(SECOND_TOOL) + len(SECOND_TOOL) :]
        for at, digit in enumerate(name_end):
            if digit not in "01" or at == 0 or name_end[at - 1].isdigit() or name_end[at + 1 : at + 2].isdigit():
                continue
            if after_second.startswith(name_end[:at] + str(int(digit) + 1) + name_end[at + 1 :]):
                return name_end[at + 1 :], name_end[:at]
        return name_end, ""

    def key_value_style(self, single: str, double: str | None, quote: str) -> ToolCallFormat:
        """``NAME{key:VALUE,key:VALUE}``: bare keys, strings between ``quote`` (Gemma-4's ``<|"|>``)."""
        members = f"{KEY_A}:{quote}{VALUE_A}{quote},{KEY_B}:{quote}{VALUE_B}{quote}"
        if members not in single:
            raise ProbeError(f"key:value tool-call arguments not separated by ',': {single!r}")
        name_at = single.index(FIRST_TOOL)
        members_at = single.index(members, name_at)
        after_single = single[members_at + len(members) :]
        after_first_in_double = None
        first = f"{KEY_A}:{quote}{VALUE_A}{quote}"
        if double is not None and first in double:
            after_first_in_double = double[double.index(first) + len(first) :]
        return ToolCallFormat(
            style="key_value",
            name_end=single[name_at + len(FIRST_TOOL) : members_at],
            string_quote=quote,
            **self.call_boundaries(single[:name_at], after_single, double, after_first_in_double),
        )

    def python_style(self, single: str, double: str | None, quote: str) -> ToolCallFormat:
        """``NAME(key=VALUE, key=VALUE)``: keyword arguments, strings between ``quote`` (LFM2.5)."""
        first, second = f"{KEY_A}={quote}{VALUE_A}{quote}", f"{KEY_B}={quote}{VALUE_B}{quote}"
        name_at = single.index(FIRST_TOOL)
        first_at = single.index(first, name_at)
        second_at = single.find(second, first_at)
        if second_at == first_at + len(first):
            # Gemma-3's pythonic template: {% if not first %}, {% endif %}, with `first` set anew in each
            # loop iteration (Jinja scoping), never writes the comma
            raise ProbeError(
                f"keyword tool-call arguments written with nothing between them ({single!r}): where a value ends "
                "is not in the text (n=1e5x=2 reads as n=1e5, x=2 and as n=1, e5x=2)"
            )
        if second_at < 0 or single[first_at + len(first) : second_at].strip() != ",":
            raise ProbeError(f"keyword tool-call arguments not separated by ',': {single!r}")
        self.check_strings_escaped(single, first_at + len(KEY_A) + 1, quote)
        after_single = single[second_at + len(second) :]
        after_first_in_double = None
        if double is not None and FIRST_TOOL in double and first in double:
            after_first_in_double = double[double.index(first, double.index(FIRST_TOOL)) + len(first) :]
        boundaries = self.call_boundaries(single[:name_at], after_single, double, after_first_in_double)
        if not boundaries["call_start"] and after_first_in_double is not None:
            # nothing of their own before the names: the calls are a list, and what the first one's end
            # leaves before the second name separates them (LFM2.5's ", ", nothing after MiniCPM3's ")\n")
            after_end = after_first_in_double[len(boundaries["call_end"]) :]
            if not after_first_in_double.startswith(boundaries["call_end"]) or SECOND_TOOL not in after_end:
                raise ProbeError(f"the second tool call does not follow the first one's end: {double!r}")
            boundaries["call_separator"] = after_end[: after_end.index(SECOND_TOOL)]
        return ToolCallFormat(
            style="python", name_end=single[name_at + len(FIRST_TOOL) : first_at], string_quote=quote, **boundaries
        )

    def check_strings_escaped(self, single: str, literal_at: int, quote: str) -> None:
        """Raise unless the template writes a string argument as a literal that reads back (escaped,
        as LFM2.5's template or ``tojson`` do). OLMo-3 writes ``"'" + value + "'"``: ``C:\\new``
        would read as a newline, and a value holding the quote (``print('hi')``) cannot be told
        from its end, so no parse is exact."""
        tricky = self.tool_completion([tool_call(FIRST_TOOL, {KEY_A: QUOTES_AND_BACKSLASH, KEY_B: VALUE_B}, FIRST_ID)])
        if tricky is None:
            raise ProbeError(f"the template does not render a string argument holding {QUOTES_AND_BACKSLASH!r}")
        before, after = single[:literal_at], single[literal_at + len(quote + VALUE_A + quote) :]
        tricky = tricky.replace(FIRST_ID, ID_SLOT)
        written = tricky[len(before) : len(tricky) - len(after)]
        if tricky.startswith(before) and tricky.endswith(after) and python_literal(written) == QUOTES_AND_BACKSLASH:
            return
        raise ProbeError(
            f"the template writes string arguments between {quote} quotes without escaping them "
            f"({written!r} for {QUOTES_AND_BACKSLASH!r}): a value holding the quote cannot be told from its end"
        )

    def xml_style(self, single: str, double: str | None) -> ToolCallFormat:
        name_at = single.index(FIRST_TOOL)
        key_a = single.index(KEY_A, name_at)
        value_a = single.index(VALUE_A, key_a)
        key_b = single.index(KEY_B, value_a)
        value_b = single.index(VALUE_B, key_b)
        name_to_key = single[name_at + len(FIRST_TOOL) : key_a]
        parameter_value = single[key_a + len(KEY_A) : value_a]
        value_to_key = single[value_a + len(VALUE_A) : key_b]
        if KEY_A in value_to_key:
            return self.xml_tags_style(single, double)
        # name_end + parameter_start == name_to_key; parameter_end + parameter_start == value_to_key.
        # Several splits can fit; the natural one starts the parameter tag after the whitespace.
        # The natural one starts the parameter tag after whitespace, the last such split that also
        # ends the last parameter consistently (`<p name="k">` must not split at `name=`).
        shared = common_suffix(name_to_key, value_to_key)
        splits = range(len(name_to_key) - len(shared), len(name_to_key))
        natural = [i for i in splits if i > 0 and name_to_key[i - 1].isspace() and not name_to_key[i].isspace()]
        after_last_value = single[value_b + len(VALUE_B) :]

        def consistent(split: int) -> bool:
            parameter_start = name_to_key[split:]
            parameter_end = value_to_key[: len(value_to_key) - len(parameter_start)]
            return bool(parameter_start) and after_last_value.startswith(parameter_end)

        candidates = [*reversed(natural), *splits[:1]]
        split = next((i for i in candidates if consistent(i)), None)
        if split is None:
            raise ProbeError(f"inconsistent XML tool-call parameters: {single!r}")
        name_end, parameter_start = name_to_key[:split], name_to_key[split:]
        name_end, call_index = self.positioned_name_end(name_end, double)
        parameter_end = value_to_key[: len(value_to_key) - len(parameter_start)]
        after_single = after_last_value[len(parameter_end) :]
        after_first_in_double = None
        if double is not None and VALUE_A in double:
            at = double.index(VALUE_A, double.index(FIRST_TOOL)) + len(VALUE_A)
            if double[at:].startswith(parameter_end):
                after_first_in_double = double[at + len(parameter_end) :]
        return ToolCallFormat(
            style="xml",
            name_end=name_end,
            parameter_start=parameter_start,
            parameter_value=parameter_value,
            parameter_value_json=self.json_parameter_value(parameter_value),
            parameter_end=parameter_end,
            call_index=call_index,
            **self.call_boundaries(single[:name_at], after_single, double, after_first_in_double),
        )

    def xml_tags_style(self, single: str, double: str | None) -> ToolCallFormat:
        """Arguments as elements named by their key: START KEY VALUE-SEP VALUE END KEY VALUE-SEP.

        MiniMax-M3: ``]<]minimax[>[<city>Paris]<]minimax[>[</city>``; nested objects are nested
        elements and arrays repeat one item element (learned from a list-valued probe).
        """
        name_at = single.index(FIRST_TOOL)
        key_a = single.index(KEY_A, name_at)
        value_a = single.index(VALUE_A, key_a)
        close_a = single.index(KEY_A, value_a)
        key_b = single.index(KEY_B, close_a)
        parameter_value = single[key_a + len(KEY_A) : value_a]
        parameter_end = single[value_a + len(VALUE_A) : close_a]
        after_close_a = single[close_a + len(KEY_A) : key_b]
        if not after_close_a.startswith(parameter_value):
            raise ProbeError(f"inconsistent XML element tool-call parameters: {single!r}")
        parameter_start = after_close_a[len(parameter_value) :]
        name_to_key = single[name_at + len(FIRST_TOOL) : key_a]
        closing_b = parameter_end + KEY_B + parameter_value
        value_b = single.index(VALUE_B, key_b)
        if not parameter_start or not name_to_key.endswith(parameter_start) or not single.startswith(closing_b, value_b + len(VALUE_B)):
            raise ProbeError(f"inconsistent XML element tool-call parameters: {single!r}")
        after_single = single[value_b + len(VALUE_B) + len(closing_b) :]
        after_first_in_double = None
        if double is not None:
            closing_a = parameter_end + KEY_A + parameter_value
            at = double.index(VALUE_A, double.index(FIRST_TOOL)) + len(VALUE_A)
            if double.startswith(closing_a, at):
                after_first_in_double = double[at + len(closing_a) :]
        listed = self.tool_completion([tool_call(FIRST_TOOL, {KEY_A: [VALUE_A]}, FIRST_ID)]) or ""
        opened = parameter_start + KEY_A + parameter_value
        item = ""
        if opened in listed and listed.index(opened) + len(opened) < len(listed):
            after_open = listed[listed.index(opened) + len(opened) :]
            if after_open.startswith(parameter_start) and VALUE_A in after_open:
                candidate = after_open[len(parameter_start) : after_open.index(VALUE_A)]
                if candidate.endswith(parameter_value):
                    item = candidate[: len(candidate) - len(parameter_value)]
        return ToolCallFormat(
            style="xml_tags",
            name_end=name_to_key[: len(name_to_key) - len(parameter_start)],
            parameter_start=parameter_start,
            parameter_value=parameter_value,
            parameter_end=parameter_end,
            array_item=item,
            **self.call_boundaries(single[:name_at], after_single, double, after_first_in_double),
        )

    def json_parameter_value(self, parameter_value: str) -> str:
        """The key-to-value text before a non-string value, when the template marks JSON values
        differently (``string="false"``); "" when it writes the same as for a string."""
        number = 424242
        typed = self.tool_completion([tool_call(FIRST_TOOL, {KEY_A: number}, FIRST_ID)])
        if typed is None or KEY_A not in typed or str(number) not in typed:
            return ""
        key_a = typed.index(KEY_A, typed.index(FIRST_TOOL))
        separator = typed[key_a + len(KEY_A) : typed.index(str(number), key_a)]
        return separator if separator != parameter_value else ""

    def call_boundaries(
        self,
        before_name: str,
        after_single: str,
        double: str | None,
        after_first_in_double: str | None,
        anchors: tuple[int, int] | None = None,
    ) -> dict[str, str]:
        """Split the text around a call into call_start, call_end, block_start and content_separator.

        ``before_name`` is everything the single-call turn has before the name; the
        part a plain answer also has (an empty think block...) is scaffolding, the rest
        is block_start + call_start. The two-call turn tells them apart: call_start is
        what also precedes the second name. ``anchors``: where the first and the second call
        start to differ in ``double`` when that is not at their names (the arguments, written first).
        """
        lead = self.plain_lead()
        shared = common_prefix(lead, before_name)
        if shared != lead:
            shared = back_to_boundary(shared)
        block_and_start = before_name[len(shared) :]
        call_end = strip_closing(after_single, self.close_candidates())
        if after_first_in_double is not None:
            shared_end = common_prefix(call_end, after_first_in_double)
            # calls sharing one block (DeepSeek-V4: `</invoke>\n<invoke` vs `</invoke>\n</tool_calls>`)
            # agree on part of the next tag; the call ends before the whitespace in front of it
            # (a shared part that ends with a closing bracket ends whole: Mistral's `..."id": "ID"}`)
            closed = shared_end[-1:] in ">}])"
            call_end = shared_end if shared_end == call_end or closed else before_partial_tag(shared_end)
            # ... or before the marker it cut into (Kimi: `<|tool_call_end|><|tool_call` of
            # `<|tool_call_begin|>` and `<|tool_calls_section_end|>`)
            call_end = call_end[: marker_boundary_before(after_single, len(call_end), self.added_tokens)]
        if double is None:
            return {"call_start": block_and_start, "call_end": call_end}
        first_at, second_at = anchors or (double.index(FIRST_TOOL), double.index(SECOND_TOOL))
        between = double[first_at:second_at]
        call_start = common_suffix(block_and_start, between)
        opens = call_start[:1] in "<{[("  # a shared part that opens a bracket starts whole (`{"name": "`)
        if len(call_start) < len(block_and_start) and not block_and_start[-len(call_start) - 1].isspace() and not opens:
            call_start = after_partial_tag(call_start)  # `>\n<invoke name="` -> `<invoke name="`
        # a start inside a marker moves past it (`|><|tool_call_begin|>` -> `<|tool_call_begin|>`)
        start = marker_boundary_after(block_and_start, len(block_and_start) - len(call_start), self.added_tokens)
        call_start = block_and_start[start:]
        # the second call starts right after the first one's end: whitespace the end already holds
        # is not the start's (Nemotron-3: `</tool_call>\n<tool_call>` against a first `\n<tool_call>`)
        # (a start of whitespace only, which the end already wrote, is none: MiniCPM3's calls follow one
        # another, each ended by `)\n`)
        # (nor is the end of a tag the end already wrote: Kimi-K3 ends every tag with `<|sep|>`, so
        # `...<|close|>call<|sep|><|open|>call tool="` against a first `...tools<|sep|><|open|>call tool="`)
        if call_end and call_end in between and not between.endswith(call_end + call_start):
            after_end = between[between.rindex(call_end) + len(call_end) :]
            shorter = len(after_end) < len(call_start)
            written_by_end = call_start.endswith(after_end) and call_end.endswith(call_start[: len(call_start) - len(after_end)])
            if shorter and block_and_start.endswith(after_end) and (after_end.strip() == call_start.strip() or written_by_end):
                call_start = after_end
        block_start = block_and_start[: len(block_and_start) - len(call_start)]
        separator = content_start = ""
        if CONTENT in double and double.index(CONTENT) > second_at:
            # the content comes after the calls (Gemma-4), right after the last one's end
            # (or the end of their block: LFM2's `]<|tool_call_end|>`)
            after_calls = double[second_at:]
            end_at = after_calls.find(call_end) if call_end else -1
            another_call = call_start and call_start in after_calls[end_at + len(call_end) :]
            if end_at < 0 or FIRST_TOOL in after_calls[end_at:] or another_call:
                raise ProbeError(f"the content after the tool calls does not follow the last call's end: {double!r}")
            block_end = after_calls[end_at + len(call_end) : after_calls.index(CONTENT)]
            found = {"call_start": call_start, "call_end": call_end, "block_start": block_start, "content_last": True}
            return {**found, "block_end": block_end} if block_end else found
        if CONTENT in double:
            lead_text = double[double.index(CONTENT) + len(CONTENT) : first_at]
            if lead_text.endswith(block_and_start):
                separator = lead_text[: len(lead_text) - len(block_and_start)]
            # a header only a tool-calling turn's content gets (gpt-oss harmony's commentary preamble)
            before_content = double[: double.index(CONTENT)]
            if before_content.strip() and before_content != lead and not lead.endswith(before_content):
                content_start = before_content
        found = {"call_start": call_start, "call_end": call_end, "block_start": block_start, "content_separator": separator}
        return {**found, "content_start": content_start} if content_start else found

    def plain_lead(self) -> str:
        """What a plain answer has before its content (an empty think block, a channel header)."""
        plain = self.completion({"role": "assistant", "content": CONTENT}) or ""
        return plain[: plain.index(CONTENT)] if CONTENT in plain else ""

    def close_candidates(self) -> list[str]:
        """Tokens that may end a turn (learned by turn_format), longest first."""
        return sorted(self.stop_tokens, key=len, reverse=True)


def as_text_parts(message: dict) -> dict:
    """``message`` with string content as one text part (``[{"type": "text", "text": ...}]``)."""
    content = message.get("content")
    return {**message, "content": [{"type": "text", "text": content}]} if isinstance(content, str) else message


class ProbeError(Exception):
    pass


def probe(renderer: Any, added_tokens: frozenset[str], eos_token: str | None) -> ProbeFacts:
    """Every turn fact the probes can learn; one that cannot be learned is recorded, not fatal."""
    prober = Prober(renderer, added_tokens)
    unlearned: dict[str, str] = {}

    def attempt(fact: str, learn):
        try:
            return learn()
        except ProbeError as exc:
            unlearned[fact] = str(exc)
        except ValueError as exc:  # a probe render that does not have the expected shape
            unlearned[fact] = f"the probe renders do not have the expected shape ({exc})"
        return None

    turn = attempt("turn", lambda: prober.turn_format(eos_token))
    reasoning = attempt("reasoning", prober.reasoning_format)
    tools = attempt("tool_calls", prober.tool_call_format)
    if turn is not None and reasoning is not None and reasoning_in(turn.content_lead, reasoning):
        # the lead is an (empty) reasoning block the parser reads itself; only its whitespace stays
        # (a lead without its markers is a header the template writes in the turn: it stays)
        turn = dataclasses.replace(turn, content_lead="")
    if turn is not None and reasoning is None:
        lead = prober.content_lead_with_tools()  # (None where the template refuses the probe's tools)
        if lead is not None and lead != turn.content_lead:
            turn = dataclasses.replace(turn, content_lead_with_tools=lead)
    if turn is not None and tools is not None:
        cut = next((stop for stop in turn.stop_tokens if stop in tools.block_start + tools.call_start), None)
        if cut is not None:  # GigaChat3 writes a call as a message of its own after the answer's
            prober.notes.append(
                f"the template writes tool calls after the turn's stop {cut!r}: parse_response ends the turn "
                "there and reads no call"
            )
    prompt = prober.generation_prompt_context() or ""
    base = prober.render([USER]) or ""
    generation_prompt = prompt[len(base) :] if prompt.startswith(base) else ""
    if not generation_prompt:
        try:  # a template without a generation flag (DeepSeek-V4) opens the turn after the last message
            generation_prompt = renderer.generation_prompt()
        except ValueError:  # the template refuses even a one-message conversation
            generation_prompt = ""
    return ProbeFacts(
        turn=turn,
        reasoning=reasoning,
        tool_calls=tools,
        notes=tuple(prober.notes),
        generation_prompt=generation_prompt,
        unlearned=unlearned,
    )


# --- string helpers ------------------------------------------------------------------


def reasoning_in(lead: str, reasoning: ReasoningFormat) -> bool:
    """Whether a turn's ``lead`` holds a reasoning block's marker (the lead is that block, or the
    content's own start after it: gpt-oss's ``<|channel|>final<|message|>``)."""
    markers = (reasoning.open.strip(), reasoning.close.strip(), reasoning.content_start.strip())
    return any(marker and marker in lead for marker in markers)


def after_prompt(prompt: str, full: str) -> str | None:
    """What the model samples after ``prompt`` for the turn ``full`` renders: ``full`` past the
    prompt; where the prompt's header is spaced differently from the turn's (a template whose
    generation prompt keeps the indentation a ``{{-`` would strip), past the header without it.
    None when the render does not continue the prompt (a prefilled block the turn writes otherwise)."""
    if full.startswith(prompt):
        return full[len(prompt) :]
    shared = 0
    while shared < min(len(prompt), len(full)) and prompt[shared] == full[shared]:
        shared += 1
    header = prompt[shared:].strip()
    rest = full[shared:].lstrip()
    tail = prompt[len(prompt.rstrip()) :]  # (the whitespace the prompt ends with, which the model saw)
    if not header or not rest.startswith(header + tail) or prompt[shared:].startswith(header):
        return None
    return rest[len(header + tail) :]



def reasoning_block(with_reasoning: str | None, without: str | None) -> str | None:
    """The text a turn with reasoning has that the same turn without it lacks (None when that is not
    one block holding the reasoning), cut back to whole pieces at its start."""
    if not with_reasoning or not without or REASONING not in with_reasoning or FIRST_TOOL not in without:
        return None
    prefix = back_to_boundary(common_prefix(with_reasoning, without))
    suffix = common_suffix(with_reasoning[len(prefix) :], without[len(prefix) :])
    middle = with_reasoning[len(prefix) : len(with_reasoning) - len(suffix)]
    return middle if REASONING in middle else None


def common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def common_suffix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return a[len(a) - n :]


def key_value_quote(text: str) -> str | None:
    """The quote around string values when arguments are written ``key:QUOTE value QUOTE`` (bare keys)."""
    key_at = text.find(KEY_A + ":")
    value_at = text.find(VALUE_A, key_at)
    if key_at < 0 or value_at < 0:
        return None
    quote = text[key_at + len(KEY_A) + 1 : value_at]
    if not quote or "\n" in quote or not text.startswith(quote, value_at + len(VALUE_A)):
        return None
    return quote


def keyword_quote(text: str) -> str | None:
    """The quote around string values when arguments are written ``key=QUOTE value QUOTE``
    (Python keyword arguments)."""
    key_at = text.find(KEY_A + "=")
    if key_at < 0:
        return None
    at = key_at + len(KEY_A) + 1
    quote = text[at : at + 1]
    if quote not in ("'", '"') or not text.startswith(VALUE_A + quote, at + 1):
        return None
    return quote


def python_literal(text: str) -> Any:
    """The value of a Python literal (None when ``text`` is not one)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def with_call_id(syntax: ToolCallFormat) -> ToolCallFormat:
    """``syntax`` with the call id (``ID_SLOT`` in a delimiter) read from where the template writes it:
    between the name and the arguments (Mistral Small: ``NAME[CALL_ID]ID[ARGS]``), before the name
    (``{"id": "ID", "name": "NAME", ...``) or, in the JSON style, after the arguments (Mistral
    Nemo: ``..., "id": "ID"}``)."""
    places = ("name_end", "call_start", "call_end") if syntax.style == "json" else ("name_end", "call_start")
    for place in places:
        before, slot, after = getattr(syntax, place).partition(ID_SLOT)
        if slot and ID_SLOT not in after and after:
            return dataclasses.replace(syntax, **{place: before, "call_id_after": place, "call_id_end": after})
    found = [item.name for item in dataclasses.fields(syntax) if ID_SLOT in str(getattr(syntax, item.name))]
    if found:
        raise ProbeError(f"the template writes a tool call's id where it cannot be read back (in {', '.join(found)})")
    return syntax


NEEDLES = (FIRST_TOOL, SECOND_TOOL, KEY_A, VALUE_A, KEY_B, VALUE_B, CONTENT)


def free_of_needles(syntax: ToolCallFormat) -> ToolCallFormat:
    """``syntax``, unless a delimiter holds a probe's value: a template that writes a call's name
    twice (Muse Glimmer's ``to=NAME<|message|>...<atem:invoke name="NAME">``) has no fixed text
    between the name and the arguments, and no delimiter learned from one render can match another."""
    for item in dataclasses.fields(syntax):
        value = getattr(syntax, item.name)
        needle = next((needle for needle in NEEDLES if isinstance(value, str) and needle in value), None)
        if needle is not None:
            raise ProbeError(
                f"the template writes a call's {'name' if needle in (FIRST_TOOL, SECOND_TOOL) else 'arguments'} "
                f"where a delimiter should be ({item.name} {value!r}): the call syntax has no fixed delimiters"
            )
    return syntax


def _marker_spans(text: str, markers: frozenset[str]) -> list[tuple[int, int]]:
    spans = []
    for marker in markers:
        at = text.find(marker) if marker else -1
        while at >= 0:
            spans.append((at, at + len(marker)))
            at = text.find(marker, at + 1)
    return spans


def marker_boundary_before(text: str, position: int, markers: frozenset[str]) -> int:
    """``position``, or the start of the marker occurrence in ``text`` it falls strictly inside."""
    inside = [start for start, end in _marker_spans(text, markers) if start < position < end]
    return min(inside, default=position)


def marker_boundary_after(text: str, position: int, markers: frozenset[str]) -> int:
    """``position``, or the end of the marker occurrence in ``text`` it falls strictly inside."""
    inside = [end for start, end in _marker_spans(text, markers) if start < position < end]
    return max(inside, default=position)


def before_partial_tag(text: str) -> str:
    """``text`` without a trailing fragment that follows its last whitespace (and that whitespace)."""
    last_space = max((at for at, char in enumerate(text) if char.isspace()), default=-1)
    if last_space < 0 or text[-1].isspace():
        return text
    return text[:last_space].rstrip() or text


def after_partial_tag(text: str) -> str:
    """``text`` without a leading fragment that precedes its first whitespace (and that whitespace)."""
    first_space = next((at for at, char in enumerate(text) if char.isspace()), -1)
    if first_space <= 0:
        return text
    return text[first_space:].lstrip() or text


def split_trailing_space(text: str) -> tuple[str, str]:
    stripped = text.rstrip()
    return stripped, text[len(stripped) :]


def split_leading_space(text: str) -> tuple[str, str]:
    stripped = text.lstrip()
    return text[: len(text) - len(stripped)], stripped


def back_to_boundary(shared: str) -> str:
    """A common prefix of two texts cut back to the end of a whole piece (after a ``>`` or a
    newline): ``<t``, shared by ``<think>`` and ``<tool_call>``, belongs to neither."""
    return shared[: max(shared.rfind(">"), shared.rfind("\n")) + 1]


def first_added_token(text: str, added_tokens: frozenset[str]) -> str | None:
    best: tuple[int, int, str] | None = None
    for token in added_tokens:
        at = text.find(token)
        if at >= 0 and (best is None or (at, -len(token)) < (best[0], best[1])):
            best = (at, -len(token), token)
    return best[2] if best else None


def last_added_token(text: str, added_tokens: frozenset[str]) -> str | None:
    stripped = text.rstrip()
    for token in sorted(added_tokens, key=len, reverse=True):
        if stripped.endswith(token):
            return token
    return None


def own_end_marker(text: str, needle: str, added_tokens: frozenset[str]) -> str | None:
    """The marker ``text`` ends with after its last ``needle`` (what a turn holding the needle ends
    with), or None."""
    at = text.rfind(needle)
    return last_added_token(text[at + len(needle) :], added_tokens) if at >= 0 else None


def word_like(text: str) -> str:
    """``text`` when it holds a letter or digit (``User:``, ``### Human``), else ""; bare punctuation
    (``[``) also starts ordinary text and cannot stop a generation."""
    return text if any(char.isalnum() for char in text) else ""


def last_marker_word(text: str, added_tokens: frozenset[str]) -> str | None:
    """The last added token in ``text`` with the word that follows it up to the text's end
    (Gemma-4's ``<|channel>thought``), or None when whitespace follows it or there is none."""
    stripped = text.rstrip()
    found = max(((stripped.rfind(t), t) for t in added_tokens if t in stripped), key=lambda f: (f[0], len(f[1])), default=None)
    if found is None:
        return None
    tail = stripped[found[0] :]
    return None if any(character.isspace() for character in tail[len(found[1]) :]) else tail


def last_marker(text: str, added_tokens: frozenset[str]) -> str:
    """The last added token in ``text`` (or the last line when none)."""
    token = last_added_token(text, added_tokens)
    return token if token else text.strip().splitlines()[-1] if text.strip() else ""


def strip_closing(text: str, close_tokens: list[str]) -> str:
    """``text`` without a trailing turn close (and whitespace after it)."""
    stripped = text.rstrip()
    for token in close_tokens:
        if stripped.endswith(token):
            return stripped[: -len(token)]
    return text


JSON_DECODER = json.JSONDecoder()


def find_json(text: str, value: Any) -> str | None:
    """How ``value`` was serialised inside ``text``, among the usual json.dumps spellings."""
    spellings = [
        json.dumps(value),
        json.dumps(value, ensure_ascii=False),
        json.dumps(value, separators=(",", ":")),
        json.dumps(value, indent=4),
        json.dumps(value, indent=2),
    ]
    for spelling in spellings:
        if spelling in text:
            return spelling
    # any other spacing of the same JSON (Command-R re-indents `tojson(indent=4)` by 8 spaces)
    opener = "{" if isinstance(value, dict) else "[" if isinstance(value, list) else None
    at = text.find(opener) if opener else -1
    while at >= 0:
        try:
            decoded, end = JSON_DECODER.raw_decode(text, at)
        except json.JSONDecodeError:
            decoded, end = None, at
        if decoded == value and end > at:
            return text[at:end]
        at = text.find(opener, at + 1)
    return None

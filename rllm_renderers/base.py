"""The base class of every generated renderer.

A generated class supplies ``render_template`` (the template, translated) and a few
class attributes describing what the compiler learned; this base turns that into
the renderer contract: input normalisation as transformers does it, knob
handling, token ids with per-token message attribution.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from . import template_runtime as jinja
from .bridge import RETENTION_POLICIES, bridge_turn
from .formats import ReasoningFormat, ToolCallFormat, TurnFormat, with_special_tokens
from .output import RenderOutput
from .parsing import parse_text, to_parsed_response
from .turns import tool_names
from .types import Message, ParsedResponse, RenderedTokens, ToolSpec

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
logger = logging.getLogger(__name__)


class _PrimeConfigClass:
    """``config_class`` for prime-rl's custom-renderer loader, built on first access.

    It needs PrimeIntellect's ``renderers`` (the ``prime`` extra); without it the attribute
    does not exist, so plain use never imports it.
    """

    def __get__(self, instance: Any, owner: type) -> type:
        try:
            from .adapters.prime import config_class_for

            return config_class_for(owner)
        except ImportError as exc:
            raise AttributeError(f"config_class needs the 'prime' extra ({exc})") from None


class GeneratedRenderer(ABC):
    """Shared machinery of compiled renderers; subclasses are generated, not written."""

    #: prime-rl loads a custom renderer as ``cls(tokenizer, cls.config_class(...))``.
    config_class = _PrimeConfigClass()

    #: Model ids whose chat template this class was compiled from.
    MODEL_IDS: ClassVar[tuple[str, ...]] = ()
    #: sha256 of the template source (what ``resolve`` matches a tokenizer's template against).
    TEMPLATE_SHA256: ClassVar[str] = ""
    #: Template variables that are not inputs: constructor keyword arguments.
    KNOBS: ClassVar[tuple[str, ...]] = ()
    #: Special-token variables the template reads, with the values baked in at compile time; None:
    #: the value is read when the class is built, from its tokenizer or its ``special_tokens=``.
    SPECIAL_TOKENS: ClassVar[dict[str, str | None]] = {}
    #: Roles the template distinguishes; other roles are rejected. Empty: any role.
    ROLES: ClassVar[tuple[str, ...]] = ()
    #: How the template consumes tool-call arguments: "dict", "string" or "either".
    TOOL_ARGUMENTS: ClassVar[str] = "either"
    #: How an assistant turn ends, what follows it, and the stop strings; None when not learned.
    TURN: ClassVar[TurnFormat | None] = None
    #: Reasoning markers, or None when the template does not render reasoning.
    REASONING: ClassVar[ReasoningFormat | None] = None
    #: Tool-call syntax, or None when the template renders no tool calls.
    TOOL_CALLS: ClassVar[ToolCallFormat | None] = None
    #: Whether appending messages always leaves an earlier render's text unchanged.
    PREFIX_STABLE: ClassVar[bool] = False
    #: Bridge retention policy when none is given (see ``bridge_to_next_turn``).
    DEFAULT_THINKING_RETENTION: ClassVar[str] = "template"
    #: Turn-level facts the compiler could not learn, with the reason: the render is still exact,
    #: but ``parse_response`` then returns the raw content with a status and the bridge returns None.
    UNLEARNED: ClassVar[dict[str, str]] = {}

    def __init__(
        self,
        tokenizer: Any = None,
        config: Any = None,
        /,
        *,
        thinking_retention: str | None = None,
        special_tokens: dict[str, str] | None = None,
        **knobs: Any,
    ) -> None:
        if config is not None:  # a prime-rl config object: its non-None knob fields
            knobs = {**{k: getattr(config, k) for k in self.KNOBS if getattr(config, k, None) is not None}, **knobs}
        unknown = sorted(set(knobs) - set(self.KNOBS))
        if unknown:
            known = ", ".join(self.KNOBS) or "none"
            raise ValueError(
                f"unknown template knob {unknown[0]!r} for {type(self).__name__}; "
                f"the template reads these knobs: {known}"
            )
        retention = thinking_retention or self.DEFAULT_THINKING_RETENTION
        if retention not in RETENTION_POLICIES:
            raise ValueError(f"thinking_retention must be one of {RETENTION_POLICIES}, got {retention!r}")
        self.thinking_retention = retention
        self.tokenizer = tokenizer
        self.knob_values = dict(knobs)
        self.knobs = {
            name: jinja.template_data(knobs[name]) if name in knobs else jinja.Undefined(name) for name in self.KNOBS
        }
        self.special_tokens = self._special_token_values(tokenizer, dict(special_tokens or {}))
        resolved = {name: str(value) for name, value in self.special_tokens.items()}
        if any(baked is None for baked in self.SPECIAL_TOKENS.values()):
            # facts learned without a tokenizer spell these tokens as placeholders
            self.TURN = with_special_tokens(self.TURN, resolved)
            self.REASONING = with_special_tokens(self.REASONING, resolved)
            self.TOOL_CALLS = with_special_tokens(self.TOOL_CALLS, resolved)
        self._encoder = None
        self._generation_prompt: str | None = None

    def _special_token_values(self, tokenizer: Any, given: dict[str, str]) -> dict[str, Any]:
        """The value of each special-token variable: baked ones checked against the tokenizer and
        ``given``; the others taken from ``given``, else the tokenizer, else undefined (as Jinja
        sees a special token the tokenizer does not have)."""
        unknown = sorted(set(given) - set(self.SPECIAL_TOKENS))
        if unknown:
            known = ", ".join(self.SPECIAL_TOKENS) or "none"
            raise ValueError(
                f"unknown special token {unknown[0]!r} for {type(self).__name__}; the template reads: {known}"
            )
        values: dict[str, Any] = {}
        for name, baked in self.SPECIAL_TOKENS.items():
            from_tokenizer = getattr(tokenizer, name, None) if tokenizer is not None else None
            from_tokenizer = None if from_tokenizer is None else str(from_tokenizer)
            if baked is not None:
                for origin, actual in (("the tokenizer", from_tokenizer), ("special_tokens=", given.get(name))):
                    if (origin == "the tokenizer" and tokenizer is not None or actual is not None) and actual != baked:
                        raise ValueError(
                            f"{type(self).__name__} was compiled with {name}={baked!r} but {origin} has "
                            f"{actual!r}; regenerate the renderer for this tokenizer"
                        )
                values[name] = baked
                continue
            value = given.get(name)
            if value is not None and from_tokenizer is not None and value != from_tokenizer:
                raise ValueError(
                    f"special_tokens= gives {name}={value!r} but the tokenizer has {from_tokenizer!r}"
                )
            value = value if value is not None else from_tokenizer
            values[name] = jinja.Undefined(name) if value is None else value
        return values

    # --- pickling: the encoder cache is rebuilt lazily --------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_encoder"] = None
        state["_generation_prompt"] = None
        return state

    # --- inputs ---------------------------------------------------------------------

    def normalize_messages(self, messages: list[Message]) -> list[Message]:
        """Validate messages and convert tool-call arguments to the form the template consumes.

        The result is plain data; it is what the template (and the differential
        oracle) sees. ``TOOL_ARGUMENTS`` says which form that is: ``"dict"`` parses
        JSON-string arguments, ``"string"`` serialises dict arguments with
        ``json.dumps(..., ensure_ascii=False)``, ``"either"`` keeps them as given.
        """
        if not isinstance(messages, (list, tuple)):
            raise ValueError(f"messages must be a list of dicts, got {type(messages).__name__}")
        normalized = []
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                raise ValueError(f"message {index} must be a dict, got {type(message).__name__}")
            role = message.get("role")
            if not isinstance(role, str):
                raise ValueError(f"message {index} has no string 'role'")
            if self.ROLES and role not in self.ROLES:
                raise ValueError(
                    f"unknown role {role!r} in message {index}; {type(self).__name__} renders the roles "
                    + ", ".join(self.ROLES)
                )
            if message.get("tool_calls"):
                message = {
                    **message,
                    "tool_calls": [self._normalize_tool_call(call, index) for call in message["tool_calls"]],
                }
            normalized.append(message)
        return normalized

    def _normalize_tool_call(self, call: Any, message_index: int) -> Any:
        if not isinstance(call, dict):
            raise ValueError(f"malformed tool call in message {message_index}: expected a dict, got {call!r}")
        function = call.get("function", call)
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"malformed tool call in message {message_index}: no function name in {call!r}")
        arguments = function.get("arguments")
        converted = arguments
        if self.TOOL_ARGUMENTS == "dict" and isinstance(arguments, str):
            try:
                converted = json.loads(arguments)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"malformed tool call in message {message_index}: arguments of {function['name']!r} "
                    f"are not valid JSON ({exc})"
                ) from None
        elif self.TOOL_ARGUMENTS == "string" and isinstance(arguments, (dict, list)):
            converted = json.dumps(arguments, ensure_ascii=False)
        if converted is arguments:
            return call
        function = {**function, "arguments": converted}
        return {**call, "function": function} if "function" in call else function

    def template_inputs(self, messages: list[Message], tools: list[ToolSpec] | None) -> tuple[list, Any]:
        """What transformers hands the template: None-valued keys dropped, reasoning aliased."""
        prepared = []
        for message in self.normalize_messages(messages):
            message = {key: value for key, value in message.items() if value is not None}
            reasoning = next((message[key] for key in REASONING_FIELDS if message.get(key) is not None), None)
            if reasoning is not None:
                message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
            prepared.append(message)
        return jinja.template_data(prepared), jinja.template_data(tools)

    # --- rendering ------------------------------------------------------------------

    @abstractmethod
    def render_template(
        self, out: RenderOutput, messages: Any, tools: Any, documents: Any, add_generation_prompt: bool
    ) -> None:
        """The translated template (each generated subclass defines it)."""

    def _render_output(
        self, messages: list[Message], tools: list[ToolSpec] | None, add_generation_prompt: bool
    ) -> RenderOutput:
        if not messages:
            raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
        template_messages, template_tools = self.template_inputs(messages, tools)
        out = RenderOutput(template_messages)
        try:
            self.render_template(out, template_messages, template_tools, None, bool(add_generation_prompt))
        except jinja.TemplateError:
            raise
        except Exception as exc:  # whatever Python raised where Jinja would have: the template refuses
            raise jinja.TemplateError(f"{type(self).__name__}: the template failed on this input: {exc}") from exc
        return out

    def render_text(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, add_generation_prompt: bool = False
    ) -> str:
        """The chat template's text for these messages."""
        return self._render_output(messages, tools, add_generation_prompt).text()

    @property
    def encoder(self):
        if self._encoder is None:
            if self.tokenizer is None:
                raise ValueError(f"{type(self).__name__} was built without a tokenizer; only render_text is available")
            from .tokenization import text_encoder_for

            self._encoder = text_encoder_for(self.tokenizer)
        return self._encoder

    def render_ids(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, add_generation_prompt: bool = False
    ) -> list[int]:
        """Token ids, identical to ``tokenizer.apply_chat_template(..., tokenize=True)``."""
        return self.encoder.encode(self.render_text(messages, tools=tools, add_generation_prompt=add_generation_prompt))

    def render(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, add_generation_prompt: bool = False
    ) -> RenderedTokens:
        """Token ids with attribution: each token's message (-1: scaffolding) and whether the model samples it."""
        out = self._render_output(messages, tools, add_generation_prompt)
        text = out.text()
        token_ids, offsets = self.encoder.encode_with_offsets(text)
        spans = out.message_spans()
        message_ranges = self._message_ranges(text, spans)
        sampled_ranges = self._sampled_ranges(text, message_ranges, messages)
        message_indices = []
        span = 0
        for offset in offsets:
            while span + 1 < len(spans) and spans[span + 1][0] <= offset:
                span += 1
            message_indices.append(spans[span][1])
        return RenderedTokens(
            token_ids=token_ids,
            message_indices=message_indices,
            sampled_mask=inside_ranges(offsets, sampled_ranges),
            is_content=inside_ranges(offsets, out.content_ranges()),
            message_roles=[message.get("role", "") for message in messages],
            message_tool_names=tool_names(messages),
        )

    def _message_ranges(self, text: str, spans: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
        ranges: dict[int, tuple[int, int]] = {}
        for position, (start, index) in enumerate(spans):
            end = spans[position + 1][0] if position + 1 < len(spans) else len(text)
            if index >= 0 and index not in ranges:
                ranges[index] = (start, end)
        return ranges

    def _sampled_ranges(self, text: str, message_ranges, messages: list[Message]) -> list[tuple[int, int]]:
        """Per assistant message: from the end of its header (the generation prompt) through its close."""
        prompt = self.generation_prompt()
        ranges = []
        for index, (start, end) in message_ranges.items():
            if messages[index].get("role") != "assistant":
                continue
            body = text[start:end]
            header = 0
            while header < min(len(prompt), len(body)) and body[header] == prompt[header]:
                header += 1
            after_close = self.TURN.after_close if self.TURN is not None else ""
            close_end = end - len(after_close) if after_close and body.endswith(after_close) else end
            ranges.append((start + header, close_end))
        return ranges

    # --- facts used by the parser and the bridge --------------------------------------

    @property
    def is_prefix_stable(self) -> bool:
        return self.PREFIX_STABLE

    def generation_prompt(self) -> str:
        """What ``add_generation_prompt=True`` appends (for this instance's knobs)."""
        if self._generation_prompt is None:
            probe = [{"role": "user", "content": "Hello."}]
            # Some templates only render with a tool list (Hermes iterates `tools` unguarded):
            # probe without tools first, then with an empty list.
            for tools in (None, []):
                try:
                    without = self.render_text(probe, tools=tools)
                    with_prompt = self.render_text(probe, tools=tools, add_generation_prompt=True)
                except jinja.TemplateError:
                    if tools is None:
                        continue
                    raise
                break
            self._generation_prompt = with_prompt[len(without) :] if with_prompt.startswith(without) else ""
        return self._generation_prompt

    def get_stop_token_ids(self) -> list[int]:
        """Ids of the stops that are single tokens of the tokenizer (the turn's own close first).

        A stop the tokenizer does not have as one token (a plain-text close such as
        ``</assistant>``) is only in :meth:`get_stop_strings`.
        """
        ids = []
        for stop in self.get_stop_strings():
            try:
                ids.append(self.encoder.token_id(stop))
            except ValueError:
                continue
        return ids

    def get_stop_strings(self) -> list[str]:
        """Every string that ends an assistant turn's generation (for engines that stop on text)."""
        return list(self.TURN.stop_tokens) if self.TURN is not None else []

    def decode(self, token_ids: list[int]) -> str:
        """Text of ``token_ids`` with special tokens kept; ids outside the vocabulary are skipped."""
        return self.encoder.decode(token_ids)

    def parse_response(
        self,
        token_ids: list[int],
        *,
        tools: list[ToolSpec] | None = None,
        prompt_ids: list[int] | None = None,
    ) -> ParsedResponse:
        """Content, reasoning and tool calls of a sampled turn; never raises on a list of ints.

        The completion ends at its first stop (a stop token id, or a stop string in its text),
        and the close's text before the stop (``\n`` of ``\n</assistant>``) is not content.
        When the class has not learned the turn syntax (``UNLEARNED``) the content is the raw
        text and the status says so.
        """
        ids = [token for token in token_ids if isinstance(token, int)]
        stop_ids = set(self.get_stop_token_ids())
        end = next((index for index, token in enumerate(ids) if token in stop_ids), len(ids))
        stop = self.decode([ids[end]]) if end < len(ids) else None
        ids = ids[:end]
        text = self.decode(ids)
        text, text_stop = cut_at_stop_string(text, self.get_stop_strings())
        stop = text_stop or stop
        if self.TURN is not None and stop:
            # the close's text before its stop (``\n`` of ``\n</assistant>``), or, when the next
            # header ended the turn, what the template writes before that header, is not content
            turn = self.TURN
            lead = turn.close[: len(turn.close) - len(stop)] if turn.close.endswith(stop) else ""
            lead = lead if turn.close else turn.after_close
            text = text[: len(text) - len(lead)] if lead and text.endswith(lead) else text
        if self.UNLEARNED:
            return ParsedResponse(content=text, reasoning_complete=None, status="unlearned")
        lead = self.TURN.content_lead
        skipped = len(lead) if lead and text.startswith(lead) else 0
        text = text[skipped:]
        prompt_tail = self.decode(list(prompt_ids)[-64:]) if prompt_ids else self.generation_prompt()
        parsed = parse_text(
            text,
            reasoning=self.REASONING,
            tool_calls=self.TOOL_CALLS,
            reasoning_prefilled=self._reasoning_prefilled(prompt_tail),
            tools=tools,
        )
        return to_parsed_response(parsed, lambda start, stop: self._token_span(ids, start + skipped, stop + skipped))

    def _reasoning_prefilled(self, prompt_tail: str) -> bool:
        """Whether the prompt ends inside an open reasoning block (a prefilled ``<think>``)."""
        reasoning = self.REASONING
        if reasoning is None or not reasoning.open:
            return False
        at = prompt_tail.rfind(reasoning.open)
        return (
            at >= 0 and reasoning.close not in prompt_tail[at:] and not prompt_tail[at + len(reasoning.open) :].strip()
        )

    def _token_span(self, ids: list[int], start: int, stop: int) -> tuple[int, int]:
        return (self._token_at(ids, start), self._token_at(ids, stop))

    def _token_at(self, ids: list[int], char: int) -> int:
        """The smallest k whose decoded prefix ``ids[:k]`` covers ``char`` characters."""
        low, high = 0, len(ids)
        while low < high:
            middle = (low + high) // 2
            if len(self.decode(ids[:middle])) >= char:
                high = middle
            else:
                low = middle + 1
        return low

    def bridge_to_next_turn(
        self,
        previous_prompt_ids: list[int],
        previous_completion_ids: list[int],
        new_messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
    ) -> RenderedTokens | None:
        """``previous_prompt_ids + previous_completion_ids`` extended by ``new_messages`` and the
        generation prompt, or None when the caller must re-render (see :mod:`rllm_renderers.bridge`)."""
        return bridge_turn(self, previous_prompt_ids, previous_completion_ids, new_messages, tools=tools)


def cut_at_stop_string(text: str, stops: list[str]) -> tuple[str, str | None]:
    """``text`` up to its first stop string (excluded), and that stop (None when there is none)."""
    found = [(text.find(stop), -len(stop), stop) for stop in stops if stop and stop in text]
    if not found:
        return text, None
    at, _, stop = min(found)
    return text[:at], stop


def inside_ranges(offsets: list[int], ranges: list[tuple[int, int]]) -> list[bool]:
    """Per offset (ascending), whether it falls in one of the half-open character ranges."""
    starts, ends = [], []
    for start, end in sorted(ranges):
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)  # merge overlapping ranges
        else:
            starts.append(start)
            ends.append(end)
    flags, current = [], 0
    for offset in offsets:
        while current < len(ends) and ends[current] <= offset:
            current += 1
        flags.append(current < len(starts) and starts[current] <= offset)
    return flags

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
from typing import Any, ClassVar, Iterable, NamedTuple

from ..jinja import runtime as jinja
from ..bridging.bridge import RETENTION_POLICIES, bridge_turn
from .serving import as_served, check_server
from ..jinja.caller_text import CallerText, caller_data
from ..bridging.memory import History, PromptHistories
from ..turns.formats import ReasoningFormat, ToolCallFormat, TurnFormat, with_special_tokens
from .output import RenderOutput
from ..encoding.offsets import inside_ranges, span_values
from ..turns.parsing import as_token_ids, char_to_token, parse_text, starts_in_call, to_parsed_response
from ..turns.boundaries import close_lead_of, content_lead_of, tool_names
from ..encoding.unencodable import refuse_unencodable
from ..types import Message, ParsedResponse, RenderedTokens, ToolSpec

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
logger = logging.getLogger(__name__)

TemplateTypeError = jinja.TemplateTypeError  # what a Python TypeError in the template becomes


class _PrimeConfigClass:
    """``config_class`` for prime-rl's custom-renderer loader, built on first access.

    It needs PrimeIntellect's ``renderers`` (the ``prime`` extra); without it the attribute
    does not exist, so plain use never imports it.
    """

    def __get__(self, instance: Any, owner: type) -> type:
        try:
            from ..adapters.prime import config_class_for

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
    #: Roles of the messages the template requires before the first user message (firefunction-v1
    #: refuses a conversation without a "functions" message); the class's own probes send them.
    LEAD_ROLES: ClassVar[tuple[str, ...]] = ()
    #: How the template consumes message content: "string" (a list of text parts is joined) or
    #: "parts" (OpenAI content parts, passed as given). None: not learned, content passed as given.
    CONTENT_FORMAT: ClassVar[str | None] = None
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
    #: Learned facts that nothing proved when the class was compiled (no sample turn read back),
    #: with the reason: used as learned, reported as ``unproven`` by ``compiler list``.
    UNPROVEN: ClassVar[dict[str, str]] = {}

    def __init__(
        self,
        tokenizer: Any = None,
        config: Any = None,
        /,
        *,
        thinking_retention: str | None = None,
        control_token_safe: bool | Iterable[str] = False,
        special_tokens: dict[str, str] | None = None,
        served_by: str | None = None,
        **knobs: Any,
    ) -> None:
        #: Built the way prime-rl builds a custom renderer: results are ``renderers``' own types.
        self.prime_results = config is not None
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
        if tokenizer is not None:
            from ..encoding.tokenization import check_encoder_settings

            check_encoder_settings()  # a bad RLLM_RENDERERS_ENCODER fails here, not at the first render
        self.plain_content_roles = _plain_content_roles(control_token_safe)
        #: The inference server whose message normalizations the template's inputs get (core.serving).
        self.served_by = check_server(served_by)
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
        self._vocabulary: Any = None  # the tokenizer's tokenizers.Tokenizer (its size decides the encoder's)
        self._encoder_vocab_size = 0
        self._vocabulary_mark: tuple[int, str | None] = (0, None)  # (encoding.tokenization.vocabulary_mark)
        self._parse_cache: _ParseFacts | None = None
        self._generation_prompt: str | None = None
        self._turn_opening: str | None = None
        #: The conversations behind prompts rendered with the generation prompt (for the bridge).
        self.prompt_histories = PromptHistories()
        #: Whether the bridge was used: from then on a prompt's render keeps a checkpoint of its message
        #: loop for the next bridge (rllm_renderers.bridging.resume), which an engine that never bridges need not pay.
        self.bridging = False
        self._warm_if_encodable()

    def warm(self) -> GeneratedRenderer:
        """Build now whatever the first render, parse or bridge would build: the text encoder (its
        proof, engine and private backend copies), the byte table of the decoder and the stop ids.

        The constructor calls it when it is given a tokenizer, and so does unpickling.  So an engine
        that builds its renderer off its event loop (at start-up or in an executor) never has a
        render, parse or bridge build anything inside the loop.  Calling it again costs nothing.
        Returns the renderer.  Without a tokenizer there is nothing to build.
        """
        if self.tokenizer is not None:
            self.encoder.warm(plain=bool(self.plain_content_roles))
            self._parse_facts()
        return self

    def _warm_if_encodable(self) -> None:
        """:meth:`warm`, for a tokenizer the encoder takes (a fast one); another (a slow tokenizer, a
        stand-in) is refused where an encode is asked for, as before."""
        from ..encoding.tokenization import has_backend

        if self.tokenizer is not None and has_backend(self.tokenizer):
            self.warm()

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
        state["_vocabulary"] = None
        state["_parse_cache"] = None
        state["_generation_prompt"] = None
        state["_turn_opening"] = None
        state["prompt_histories"] = PromptHistories()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._warm_if_encodable()

    # --- inputs ---------------------------------------------------------------------

    def normalize_messages(self, messages: list[Message]) -> list[Message]:
        """Validate messages and convert content and tool-call arguments to the form the template consumes.

        The result is plain data; it is what the template (and the differential oracle) sees.
        A field of the wrong type is a ValueError naming the message index and the field.
        ``CONTENT_FORMAT`` says how list content (OpenAI content parts) is handled: a
        ``"string"`` template gets its text parts joined (a non-text part is an error), a
        ``"parts"`` template gets the list. ``TOOL_ARGUMENTS`` says which form tool-call
        arguments take: ``"dict"`` parses JSON-string arguments, ``"string"`` serialises dict
        arguments with ``json.dumps(..., ensure_ascii=False)``, ``"either"`` keeps them as given.
        """
        _check_message_list(messages)
        return [self._normalize_message(message, index) for index, message in enumerate(messages)]

    def _normalize_message(self, message: Any, index: int) -> Message:
        """One message of :meth:`normalize_messages` (``index``: its position, for errors)."""
        message = as_served(message, self.served_by, index, content_parts=self.CONTENT_FORMAT != "string")
        if not isinstance(message, dict):
            raise ValueError(f"message {index} must be a dict, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str):
            raise ValueError(f"message {index} field 'role' must be a string, got {type(role).__name__}")
        if self.ROLES and role not in self.ROLES:
            raise ValueError(
                f"unknown role {role!r} in message {index}; {type(self).__name__} renders the roles "
                + ", ".join(self.ROLES)
            )
        for key in ("name", "tool_call_id", *REASONING_FIELDS):
            value = message.get(key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"message {index} field {key!r} must be a string, got {type(value).__name__}")
        content = message.get("content")
        if isinstance(content, (list, tuple)):
            message = {**message, "content": self._normalize_content_parts(content, index)}
        elif content is not None and not isinstance(content, str):
            raise ValueError(
                f"message {index} field 'content' must be a string, a list of content parts or None, "
                f"got {type(content).__name__}"
            )
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, (list, tuple)):
            raise ValueError(f"message {index} field 'tool_calls' must be a list, got {type(tool_calls).__name__}")
        if tool_calls:
            message = {
                **message,
                "tool_calls": [self._normalize_tool_call(call, index) for call in tool_calls],
            }
        return message

    def _normalize_content_parts(self, parts: list | tuple, message_index: int) -> Any:
        """List content: joined text for a ``"string"`` template, the parts for a ``"parts"`` one."""
        for position, part in enumerate(parts):
            if not isinstance(part, (dict, str)):
                raise ValueError(
                    f"message {message_index} field 'content[{position}]' must be a content part dict, "
                    f"got {type(part).__name__}"
                )
        if self.CONTENT_FORMAT != "string":
            return list(parts)
        texts = []
        for position, part in enumerate(parts):
            if isinstance(part, str):
                texts.append(part)
            elif part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                kind = part.get("type", "untyped")
                raise ValueError(
                    f"message {message_index} field 'content[{position}]' is a {kind!r} part; "
                    f"{type(self).__name__}'s template renders text only (its content is a string)"
                )
        # joined as PrimeIntellect's renderers join text parts (no separator)
        return "".join(texts)

    def _normalize_tool_call(self, call: Any, message_index: int) -> Any:
        if not isinstance(call, dict):
            raise ValueError(f"malformed tool call in message {message_index}: expected a dict, got {call!r}")
        function = call.get("function", call)
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"malformed tool call in message {message_index}: no function name in {call!r}")
        arguments = function.get("arguments")
        converted = arguments
        if self.served_by is not None:
            pass  # the server's own conversion (core.serving), whichever form the template reads
        elif self.TOOL_ARGUMENTS == "dict" and isinstance(arguments, str):
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

    def template_inputs(
        self, messages: list[Message], tools: list[ToolSpec] | None, *, marked: bool = True
    ) -> tuple[list, Any]:
        """What transformers hands the template: None-valued keys dropped, reasoning aliased
        (``marked``: see :meth:`template_messages`)."""
        template_tools = self.template_tools(tools)
        return self.template_messages(messages, marked=marked), template_tools

    @staticmethod
    def template_tools(tools: list[ToolSpec] | None) -> Any:
        """The tools as the template sees them (checked, then converted once per content)."""
        check_tools(tools)
        return jinja.template_tools(tools)

    def template_messages(self, messages: list[Message], first_index: int = 0, *, marked: bool = True) -> list:
        """The messages as the template sees them, normalized (errors name the message by its index,
        counted from ``first_index``).

        ``marked``: every string of a message but its role is caller text
        (:mod:`rllm_renderers.jinja.caller_text`), so that the render says where the template wrote it
        (attribution, the control-token-safe mode). A render whose text is all that is asked for
        (``render_text``, ``render_ids`` of a renderer without that mode) leaves it out: the same
        text, without the cost of carrying the marks."""
        _check_message_list(messages)
        template_message, template_str, roles = jinja.template_message, jinja.TemplateStr, self.ROLES
        prepared = []
        for index, message in enumerate(messages):
            # the common chat message, {"role": ..., "content": "..."}: nothing to normalize or alias
            if type(message) is dict and len(message) == 2 and self.served_by is None:
                role, content = message.get("role"), message.get("content")
                if type(role) is str and type(content) is str and (not roles or role in roles):
                    wrapped = jinja.TemplateDict(message)  # (keeps the caller's key order)
                    wrapped["role"] = template_str(role)
                    wrapped["content"] = CallerText(content) if marked else template_str(content)
                    prepared.append(wrapped)
                    continue
            message = self._normalize_message(message, first_index + index)
            prepared.append(template_message(caller_data(message) if marked else message, REASONING_FIELDS))
        return jinja.TemplateList(prepared)

    # --- rendering ------------------------------------------------------------------

    @abstractmethod
    def render_template(
        self, out: RenderOutput, messages: Any, tools: Any, documents: Any, add_generation_prompt: bool
    ) -> None:
        """The translated template (each generated subclass defines it)."""

    def _render_output(
        self, messages: list[Message], tools: list[ToolSpec] | None, add_generation_prompt: bool, *, marked: bool = True
    ) -> RenderOutput:
        return self._run_template(*self._template_history(messages, tools, marked=marked), add_generation_prompt)

    def _template_history(
        self, messages: list[Message], tools: list[ToolSpec] | None, *, marked: bool = True
    ) -> tuple[list, Any]:
        if not messages:
            raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
        return self.template_inputs(messages, tools, marked=marked)

    def _run_template(
        self,
        template_messages: list,
        template_tools: Any,
        add_generation_prompt: bool,
        *,
        record: bool = False,
        resume_from: Any = None,
    ) -> RenderOutput:
        """Run the translated template on converted inputs.

        ``record``: keep a checkpoint of the message loop (``out.checkpoint``) for a later bridge;
        ``resume_from``: such a checkpoint of a conversation this one extends, to skip what that
        render already wrote where that is exact (see :mod:`rllm_renderers.bridging.resume`).

        What the template raises itself (``raise_exception``, an undefined value used) is a
        ``TemplateError``; a Python ``TypeError`` (where Jinja raises one too) becomes a
        :class:`TemplateTypeError` with the same message, and so does the template's call of a
        method its value does not have (``generation_preamble.strip()`` with a bool: Jinja calls
        an Undefined and raises). Anything else (``KeyError``, another ``AttributeError``, ...) is
        not something Jinja raises: it propagates as it is, with a note naming the message being
        rendered.
        """
        out = RenderOutput(template_messages, record=record, resume_from=resume_from)
        try:
            self.render_template(out, template_messages, template_tools, None, bool(add_generation_prompt))
        except jinja.TemplateError:
            raise
        except TypeError as exc:  # Jinja raises the same TypeError: the template refuses this input
            raise jinja.TemplateTypeError(f"{type(self).__name__}: cannot render {rendering_position(out, template_messages)}: {exc}") from exc
        except AttributeError as exc:
            if not self._template_called_a_missing_method(exc):
                exc.add_note(f"{type(self).__name__}: while rendering {rendering_position(out, template_messages)}")
                raise
            missing = jinja.Undefined(exc.name, exc.obj).message
            raise jinja.TemplateError(f"{type(self).__name__}: cannot render {rendering_position(out, template_messages)}: {missing}") from exc
        except Exception as exc:  # not a refusal Jinja would make: surface it as itself, saying where
            exc.add_note(f"{type(self).__name__}: while rendering {rendering_position(out, template_messages)}")
            raise
        return out

    def _template_called_a_missing_method(self, exc: AttributeError) -> bool:
        """Whether the translated template itself looked up a method on one of its plain values
        that lacks it (the error's innermost frame is this class's generated code): Jinja finds
        Undefined there and raises when it is called. (The translation calls methods directly.)"""
        frame = exc.__traceback__
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        generated = getattr(type(self).render_template, "__globals__", None)
        return (
            frame is not None
            and frame.tb_frame.f_globals is generated
            and isinstance(exc.name, str)
            and isinstance(exc.obj, _PLAIN_TEMPLATE_VALUES)
        )

    def render_text(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, add_generation_prompt: bool = False
    ) -> str:
        """The chat template's text for these messages."""
        return self._render_output(messages, tools, add_generation_prompt, marked=False).text()

    @property
    def encoder(self):
        """The tokenizer's :class:`~rllm_renderers.encoding.tokenization.TextEncoder` for its vocabulary as it is
        now: after ``tokenizer.add_special_tokens(...)`` (the vocabulary grew) the encoder, and with it
        the parse facts and the byte table, are built again, so ids, decoding and parsing follow the
        tokenizer (one C call per use: :func:`~rllm_renderers.encoding.tokenization.vocabulary_mark`)."""
        if self.tokenizer is None:
            raise ValueError(f"{type(self).__name__} was built without a tokenizer; only render_text is available")
        if self._vocabulary is None:
            from ..encoding.tokenization import _backend_of

            self._vocabulary = _backend_of(self.tokenizer)
        # (a renderer built while its tokenizer's proof ran in the background moves to the fast engine)
        if (
            self._encoder is None
            or self._vocabulary.id_to_token(self._vocabulary_mark[0]) != self._vocabulary_mark[1]
            or self._encoder.proof_decided_since()
        ):
            from ..encoding.tokenization import text_encoder_for, vocabulary_mark

            self._encoder = text_encoder_for(self.tokenizer)
            self._vocabulary_mark = vocabulary_mark(self._vocabulary)
            self._encoder_vocab_size = self._vocabulary.get_vocab_size(with_added_tokens=True)
        return self._encoder

    @property
    def vocab_size(self) -> int:
        """How many ids the tokenizer has, its added tokens included (``len(tokenizer)``): valid ids are
        ``0 .. vocab_size - 1``."""
        self.encoder  # (follows the tokenizer's vocabulary)
        return self._encoder_vocab_size

    def render_ids(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, add_generation_prompt: bool = False
    ) -> list[int]:
        """Token ids, identical to ``tokenizer.apply_chat_template(..., tokenize=True)``.

        Unless built with ``control_token_safe``: then the content of messages of those roles is
        encoded as plain text (see :func:`_plain_content_roles`).
        """
        # the safe mode needs to know where caller text is written; parity needs the text alone
        marked = bool(self.plain_content_roles)
        template_messages, template_tools = self._template_history(messages, tools, marked=marked)
        # a prompt with the generation prompt is one the bridge may be asked to go on from
        record = add_generation_prompt and self.bridging
        out = self._run_template(template_messages, template_tools, add_generation_prompt, record=record)
        text = out.text()
        try:
            if self.plain_content_roles:
                ids = self.encoder.encode(text, plain_ranges=self._plain_ranges(out, text, messages))
            else:
                ids = self.encoder.encode(text)
        except (UnicodeEncodeError, TypeError) as exc:  # text no tokenizer encodes: say where it is
            refuse_unencodable(exc, messages, tools)
            raise
        if add_generation_prompt:
            self.prompt_histories.remember(ids, History(template_messages, template_tools, text, out.checkpoint))
        return ids

    def render(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, add_generation_prompt: bool = False
    ) -> RenderedTokens:
        """Token ids with attribution: each token's message (-1: scaffolding) and whether the model samples it."""
        out = self._render_output(messages, tools, add_generation_prompt)
        text = out.text()
        part_starts = out.part_starts()
        spans = out.message_spans(part_starts)
        plain = self._plain_ranges(out, text, messages) if self.plain_content_roles else None
        try:
            token_ids, offsets = self.encoder.encode_with_offsets(text, plain_ranges=plain)
        except (UnicodeEncodeError, TypeError) as exc:  # text no tokenizer encodes: say where it is
            refuse_unencodable(exc, messages, tools)
            raise
        message_ranges = self._message_ranges(text, spans)
        sampled_ranges = self._sampled_ranges(
            text, message_ranges, messages, token_starts=set(offsets), caller_ranges=out.caller_ranges(part_starts)
        )
        return self._result(
            RenderedTokens(
                token_ids=token_ids,
                message_indices=span_values(offsets, out.attributed_spans(part_starts)),
                sampled_mask=inside_ranges(offsets, sampled_ranges),
                is_content=inside_ranges(offsets, out.content_ranges(part_starts)),
                message_roles=[message.get("role", "") for message in messages],
                message_tool_names=tool_names(messages),
            )
        )

    def build_supervised_example(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, train_on: str = "last_assistant"
    ):
        """Token ids and per-token loss weights for supervised training (``train_on``:
        ``"last_assistant"``, ``"all_assistant"`` or ``"all"``); the rules are in
        :mod:`rllm_renderers.supervised`."""
        from ..supervised import build_supervised_example

        return build_supervised_example(self, messages, tools=tools, train_on=train_on)

    def build_supervised_examples(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, split: str = "auto"
    ):
        """Examples that train every assistant message: one, or one per assistant turn where the
        template rewrites history (``split``: ``"auto"``, ``"never"``, ``"per_turn"``); see
        :mod:`rllm_renderers.supervised`."""
        from ..supervised import build_supervised_examples

        return build_supervised_examples(self, messages, tools=tools, split=split)

    def _message_ranges(self, text: str, spans: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
        ranges: dict[int, tuple[int, int]] = {}
        for position, (start, index) in enumerate(spans):
            end = spans[position + 1][0] if position + 1 < len(spans) else len(text)
            if index >= 0 and index not in ranges:
                ranges[index] = (start, end)
        return ranges

    def _sampled_ranges(
        self,
        text: str,
        message_ranges,
        messages: list[Message],
        token_starts: set[int] | None = None,
        caller_ranges: list[tuple[int, int, int]] | None = None,
    ) -> list[tuple[int, int]]:
        """Per assistant message: from the end of its header (the generation prompt) through its close.

        The header ends on a token boundary: a turn written without the header (DeepSeek-V4 after a
        system message) may share a character or two with it (``<`` of ``</think>``), not a token.
        Text the template writes in the message's block before its header (MiniMax-M3 closes a run
        of tool results, ``[e~[\n``, when the next message begins) is not sampled either, nor is a
        reasoning close written where the generation prompt opens the reasoning (see
        :meth:`_header_end`).
        """
        prompt = self.turn_opening()
        after_close = self.TURN.after_close if self.TURN is not None else ""
        first_caller: dict[int, int] = {}  # message index -> where its own text first starts in its block
        for low, _high, owner in caller_ranges or ():
            block = message_ranges.get(owner)
            if block is not None and block[0] <= low < block[1]:
                first_caller[owner] = min(low, first_caller.get(owner, low))
        ranges = []
        for index, (start, end) in message_ranges.items():
            if messages[index].get("role") != "assistant":
                continue
            body = text[start:end]
            own_text = first_caller.get(index, end) - start
            header = self._header_end(body, prompt, start, token_starts, own_text)
            if not header and prompt != prompt.lstrip() and prompt.strip():
                # the prompt starts with the line break the previous message writes before a history
                # turn's header (Falcon's "\nAssistant:"): the header is the rest of the prompt
                header = self._header_end(body, prompt.lstrip(), start, token_starts, own_text)
            close_end = end - len(after_close) if after_close and body.endswith(after_close) else end
            runs = self._sampled_runs(text, start + header, close_end, prompt)
            ranges += [(low, high) for low, high in runs if self._sampleable(text[low:high])]
        return ranges

    def _sampleable(self, run: str) -> bool:
        """Whether a model sampling after the generation prompt can write ``run`` for this message.

        Where the reasoning has no open marker the model starts every turn in its reasoning
        (Apriel's prompt ends ``Here are my reasoning steps:\n``), so a turn the template writes
        without the reasoning close (a history turn without reasoning, ``<|assistant|>\nFour.``)
        is one no model samples: sampled, those tokens are unfinished reasoning, not the answer
        (``parse_response`` reads them so). Such a turn is not marked sampled.
        """
        reasoning = self.REASONING
        return reasoning is None or bool(reasoning.open) or not reasoning.close or reasoning.close in run

    def _sampled_runs(self, text: str, begin: int, end: int, opening: str) -> list[tuple[int, int]]:
        """The parts of an assistant turn's text ``text[begin:end]`` the model samples: from ``begin``
        through the first stop, then, where the turn goes on after that stop with the opening the
        engine writes (gpt-oss writes one ``<|start|>assistant to=functions.NAME...<|call|>`` per
        parallel call), from after that opening through the next stop, and so on. Text after a stop
        that no opening follows is not sampled: the model stopped there."""
        stops = [stop for stop in self.get_stop_strings() if stop]
        runs = []
        while begin < end:
            found = [(at, -len(stop)) for stop in stops if (at := text.find(stop, begin, end)) >= 0]
            if not found:
                runs.append((begin, end))
                break
            at, negative_length = min(found)
            stop_end = at - negative_length
            runs.append((begin, stop_end))
            if not opening or not text.startswith(opening, stop_end) or stop_end + len(opening) > end:
                break
            begin = stop_end + len(opening)
        return runs

    def _header_end(self, body: str, prompt: str, start: int, token_starts: set[int] | None, first_caller: int) -> int:
        """Where the sampled part of an assistant turn's text ``body`` (at ``start`` of the render) begins.

        The header is the longest beginning of the generation prompt the turn's text holds, at its
        start or after template text before the message's own text (``first_caller``), ending on a
        token boundary. Where the turn parts from the prompt just where the prompt opens the
        reasoning, and the template writes the reasoning close there instead (a history turn whose
        reasoning DeepSeek-V4 or GLM-4.7 dropped: ``<｜Assistant｜></think>`` where the prompt is
        ``<｜Assistant｜><think>``), that close is header too: it is the other mode's generation
        prompt (chat mode prompts ``<｜Assistant｜></think>``), and no model samples a token right
        after a header the prompt goes on from.
        """

        def matched(at: int) -> int:
            length = 0
            while length < min(len(prompt), len(body) - at) and body[at + length] == prompt[length]:
                length += 1
            while token_starts is not None and 0 < length < len(body) - at and start + at + length not in token_starts:
                length -= 1
            return length

        lead, header = 0, matched(0)
        for at in range(1, first_caller):
            if token_starts is not None and start + at not in token_starts:
                continue
            length = matched(at)
            if length > header and at + length <= first_caller:
                lead, header = at, length
        end = lead + header
        reasoning = self.REASONING
        if (
            reasoning is not None
            and reasoning.open
            and reasoning.close
            and prompt[header:].startswith(reasoning.open)
            and body.startswith(reasoning.close, end)
            and end + len(reasoning.close) <= first_caller
        ):
            closed = end + len(reasoning.close)
            if token_starts is None or closed >= len(body) or start + closed in token_starts:
                end = closed
        return end

    def _plain_ranges(
        self, out: RenderOutput, text: str, messages: list[Message], spans: list[tuple[int, int]] | None = None
    ) -> list[tuple[int, int]]:
        """Character ranges of the caller text (content, content parts, reasoning, names, tool calls)
        of messages whose role is in ``plain_content_roles``, wherever the template wrote it
        (``out.caller_ranges()``). ``text`` and ``spans`` are not needed (kept for callers)."""
        roles = self.plain_content_roles
        return [
            (low, high)
            for low, high, index in out.caller_ranges()
            if index >= 0 and index < len(messages) and messages[index].get("role") in roles
        ]

    # --- facts used by the parser and the bridge --------------------------------------

    @property
    def is_prefix_stable(self) -> bool:
        return self.PREFIX_STABLE

    def generation_prompt(self) -> str:
        """What ``add_generation_prompt=True`` appends (for this instance's knobs).

        A template without a generation flag (DeepSeek-V4's encoder always opens the assistant
        turn after a trailing user message) appends nothing; its prompt is then what it writes
        after the last message.
        """
        if self._generation_prompt is None:
            probe = self._probe_conversation()
            # Some templates only render with a tool list (Hermes iterates `tools` unguarded):
            # probe without tools first, then with an empty list.
            for tools in (None, []):
                try:
                    without = self.render_text(probe, tools=tools)
                    output = self._render_output(probe, tools, True)
                except jinja.TemplateError:
                    if tools is None:
                        continue
                    raise
                break
            with_prompt = output.text()
            prompt = with_prompt[len(without) :] if with_prompt.startswith(without) else ""
            if not prompt and with_prompt == without:
                spans = output.message_spans()
                if spans[-1][1] == -1 and any(index >= 0 for _, index in spans):
                    prompt = with_prompt[spans[-1][0] :]
            self._generation_prompt = prompt
        return self._generation_prompt

    def _probe_conversation(self) -> list[dict]:
        """One user message, after the lead messages the template requires (``LEAD_ROLES``)."""
        lead = [{"role": role, "content": "Context."} for role in self.LEAD_ROLES]
        return [*lead, {"role": "user", "content": "Hello."}]

    def turn_opening(self) -> str:
        """The text that opens an assistant turn before the model samples: the generation prompt, or,
        for a template that writes it inside the last message whatever ``add_generation_prompt`` says
        (Apriel 1.6 sets the flag itself and opens the assistant turn at the end of the last user
        message), what a render of one user message holds past the point where an assistant reply to
        it starts ("" when the two renders differ before that point)."""
        if self._turn_opening is None:
            opening = self.generation_prompt()
            if not opening:
                probe = self._probe_conversation()
                for tools in (None, []):
                    try:
                        alone = self.render_text(probe, tools=tools, add_generation_prompt=True)
                        reply = self._render_output([*probe, {"role": "assistant", "content": "Hi."}], tools, False)
                    except ValueError:  # the template refuses the probe (or the class the assistant role)
                        continue
                    starts = [offset for offset, index in reply.message_spans() if index == len(probe)]
                    if starts and alone.startswith(reply.text()[: starts[0]]):
                        opening = alone[starts[0] :]
                    break
            self._turn_opening = opening
        return self._turn_opening

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
        """Text of ``token_ids`` with special tokens kept.

        ``token_ids``: any sequence of integers (list, tuple, numpy array, torch tensor, ``array.array``);
        anything else is a ``TypeError``, an id outside the vocabulary a ``ValueError`` naming its position.
        """
        return self._decode(as_token_ids(token_ids, "token_ids", self.vocab_size))

    def _decode(self, ids: list[int]) -> str:
        """:meth:`decode` of ids already checked (a list of ints of the vocabulary): what the bridge
        decodes, many times per call, without checking them again."""
        detokenizer = self._parse_facts().detokenizer
        if detokenizer is not None:
            return detokenizer.decode(ids)  # (a byte table proven to decode as the tokenizer does)
        return self.encoder.decode(ids)

    def parse_response(
        self,
        token_ids: list[int],
        *,
        tools: list[ToolSpec] | None = None,
        prompt_ids: list[int] | None = None,
    ) -> ParsedResponse:
        """Content, reasoning and tool calls of a sampled turn.

        ``token_ids`` may be any sequence of integers (list, numpy array, torch tensor, ...); anything
        else is a ``TypeError``, and an id outside the vocabulary (``0 .. vocab_size - 1``) a
        ``ValueError`` naming its position; so is ``tools`` that is not a list of tool dicts. Never
        raises on a sampled sequence (a tool call nested too deeply to read is reported by its
        status and ``reason``). Linear in the length of the completion.

        The completion ends at its first stop (a stop token id, or a stop string in its text),
        and the close's text before the stop (``\n`` of ``\n</assistant>``) is not content.
        When the class has not learned the turn syntax (``UNLEARNED``) the content is the raw
        text and the status says so.
        """
        vocab_size = self.vocab_size
        ids = as_token_ids(token_ids, "token_ids", vocab_size)
        prompt = as_token_ids(prompt_ids, "prompt_ids", vocab_size) if prompt_ids is not None else None
        check_tools(tools)
        turn = self._parse_turn(ids, tools, prompt)
        if turn.parsed is None:
            return self._result(ParsedResponse(content=turn.text, reasoning_complete=None, status="unlearned"))
        if not turn.parsed.calls:
            token_at = None
        elif turn.decoded is not None:
            token_at = turn.decoded.token_at
        else:
            token_at = char_to_token(self.encoder.decode, turn.ids)
        skipped = turn.skipped

        def token_span(start: int, stop: int) -> tuple[int, int]:
            first = token_at(start + skipped)
            return first, token_at(stop + skipped, first)

        return self._result(to_parsed_response(turn.parsed, token_span))

    def _parse_turn(
        self, ids: list[int], tools: list[ToolSpec] | None, prompt: list[int] | None = None, *, for_template: bool = False
    ) -> "_ParsedTurn":
        """:meth:`parse_response` up to the token spans of its tool calls (which the bridge does not need).

        ``for_template``: the turn as the template reads it back, where that differs from the parse
        (reasoning the template finds inside the content stays in the content).
        """
        facts = self._parse_facts()
        detokenizer = facts.detokenizer
        # the first stop token (the scans run in C)
        end = min([ids.index(stop_id) for stop_id in facts.stop_ids if stop_id in ids], default=len(ids))
        stop = facts.stop_texts[ids[end]] if end < len(ids) else None
        ids = ids[:end]
        decoded = detokenizer.decoded(ids) if detokenizer is not None else None
        text = decoded.text if decoded is not None else self.encoder.decode(ids)
        prefilled = False
        if self.REASONING is not None and self.REASONING.open:
            decode = detokenizer.decode if detokenizer is not None else self.encoder.decode
            prefilled = self._reasoning_prefilled(decode(prompt[-64:]) if prompt else self.generation_prompt())
        parsed, text, skipped = self._parse_turn_text(text, stop, tools, prefilled, for_template=for_template)
        return _ParsedTurn(parsed, text, ids, decoded, skipped)

    def _parse_turn_text(
        self,
        text: str,
        stop: str | None,
        tools: list[ToolSpec] | None,
        prefilled: bool,
        *,
        for_template: bool = False,
        with_reasoning: bool = True,
    ) -> tuple[Any, str, int]:
        """A completion's decoded text (up to its stop token ``stop``, None when it has none) parsed:
        ``(TextParse or None when UNLEARNED, the text from where it starts, characters of content lead
        skipped)``. ``prefilled``: the prompt left a reasoning block open. What :meth:`parse_response`
        and the streaming parser (:mod:`rllm_renderers.turns.streaming`) share."""
        text, text_stop = cut_at_stop_string(text, self._parse_facts().stop_strings)
        stop = text_stop or stop
        close_lead = close_lead_of(self.TURN, text, stop) if self.TURN is not None else ""
        text = text[: len(text) - len(close_lead)]
        if self.UNLEARNED:
            return None, text, 0
        lead = content_lead_of(self.TURN, text, tools)
        skipped = len(lead)
        text = text[skipped:]
        reasoning = self.REASONING
        if (for_template and reasoning is not None and reasoning.in_content) or not with_reasoning:
            reasoning = None
        parsed = parse_text(
            text,
            reasoning=reasoning,
            tool_calls=self.TOOL_CALLS,
            reasoning_prefilled=prefilled and reasoning is not None,
            tools=tools,
            close_lead=close_lead,
            in_call=starts_in_call(self.TOOL_CALLS, lead),
        )
        return parsed, text, skipped

    def _parse_facts(self) -> _ParseFacts:
        """What parsing needs of the current encoder, worked out once per encoder."""
        encoder = self.encoder
        facts = getattr(self, "_parse_cache", None)
        if facts is None or facts.encoder is not encoder:
            from ..encoding.detokenize import detokenizer_for

            stop_ids = tuple(dict.fromkeys(self.get_stop_token_ids()))
            close = self.TURN.close if self.TURN is not None else ""
            try:
                close_id = encoder.token_id(close) if close else None
            except ValueError:  # a close of several tokens
                close_id = None
            stop_strings = self.get_stop_strings()
            facts = self._parse_cache = _ParseFacts(
                encoder,
                stop_ids,
                {stop_id: encoder.decode([stop_id]) for stop_id in stop_ids},
                stop_strings,
                detokenizer_for(self.tokenizer)[0],
                close_id,
                tuple(stop for stop in stop_strings if stop not in encoder.added_token_strings),
            )
        return facts

    def _result(self, result: Any) -> Any:
        """``result`` as PrimeIntellect's own type when prime-rl built this renderer, else as is."""
        if not getattr(self, "prime_results", False) or result is None:
            return result
        from ..adapters.prime import to_prime_result

        return to_prime_result(result)

    def _reasoning_prefilled(self, prompt_tail: str) -> bool:
        """Whether the prompt ends inside an open reasoning block (a prefilled ``<think>``)."""
        reasoning = self.REASONING
        if reasoning is None or not reasoning.open:
            return False
        at = prompt_tail.rfind(reasoning.open)
        return (
            at >= 0 and reasoning.close not in prompt_tail[at:] and not prompt_tail[at + len(reasoning.open) :].strip()
        )

    def bridge_to_next_turn(
        self,
        previous_prompt_ids: list[int],
        previous_completion_ids: list[int],
        new_messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        messages: list[Message] | None = None,
    ) -> RenderedTokens | None:
        """``previous_prompt_ids + previous_completion_ids`` (cut at its stop, or closed) extended by
        exactly what the template renders for ``new_messages`` and the generation prompt, or None
        when the caller must re-render.

        ``messages``: the conversation the previous prompt was rendered from (without the sampled
        turn). Without it the renderer must have produced that prompt itself (``render_ids`` with
        the generation prompt, or an earlier bridge). The full contract is in
        :mod:`rllm_renderers.bridging.bridge`.
        """
        self.bridging = True
        try:
            result = bridge_turn(
                self, previous_prompt_ids, previous_completion_ids, new_messages, tools=tools, messages=messages
            )
        except (UnicodeEncodeError, TypeError) as exc:  # text no tokenizer encodes: say where it is
            refuse_unencodable(exc, new_messages, tools, "new_messages")
            refuse_unencodable(exc, messages)
            raise
        except RecursionError:  # a value nested deeper than the template can be run on: re-render
            logger.warning("%s: bridge_to_next_turn: a value nests too deeply to render; returning None", type(self).__name__)
            return None
        return self._result(result)


class _ParsedTurn(NamedTuple):
    """A completion's text parsed (``parsed``: None when the class has not learned the turn syntax)."""

    parsed: Any  # parsing.TextParse | None
    text: str  # the turn's text from where ``parsed`` starts (its content lead skipped)
    ids: list[int]  # the completion up to its stop
    decoded: Any  # detokenize.DecodedIds of ``ids``, or None
    skipped: int  # characters of the content lead before ``text``


class _ParseFacts(NamedTuple):
    """What ``parse_response`` needs of a renderer's encoder (see ``_parse_facts``)."""

    encoder: Any
    stop_ids: tuple[int, ...]
    stop_texts: dict[int, str]  # stop id -> its text
    stop_strings: list[str]
    detokenizer: Any  # a detokenize.Detokenizer, or None: decode with the tokenizer
    close_id: int | None  # the turn's close as one token, when it is one
    text_stops: tuple[str, ...]  # stops that are text, not an added token


def check_tools(tools: Any) -> None:
    """None or a list of tool dicts; anything else is a ValueError naming it."""
    if tools is not None:
        if not isinstance(tools, (list, tuple)):
            raise ValueError(f"tools must be a list of tool dicts, got {type(tools).__name__}")
        for position, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise ValueError(f"tools[{position}] must be a dict, got {type(tool).__name__}")


def _check_message_list(messages: Any) -> None:
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"messages must be a list of dicts, got {type(messages).__name__}")


#: Values a template holds whose missing method Jinja reads as Undefined (a knob's bool, a number,
#: text, a list): not the renderer's own objects, whose missing attribute is a bug of the translation.
_PLAIN_TEMPLATE_VALUES = (bool, int, float, str, type(None), list, tuple, dict)


def rendering_position(out: RenderOutput, messages: list[Message]) -> str:
    """Which message the template was rendering when it stopped (from the output's last mark)."""
    index = out.message_index(out.marks[-1][1]) if out.marks else -1
    if index < 0:
        return "the text outside the message loop"
    return f"message {index} (role {messages[index].get('role')!r})"


def _plain_content_roles(control_token_safe: bool | Iterable[str]) -> frozenset[str]:
    """The roles whose message content a renderer encodes as plain text.

    ``control_token_safe`` is off by default (template parity: a user who types ``<|im_end|>``
    gets the control token, exactly as ``apply_chat_template`` gives it).  ``True`` means user and
    tool messages; an iterable of roles names them (e.g. ``{"user", "tool", "system"}``).  Their
    content can then not forge control tokens, while the template's own markers stay special: a
    deliberate deviation from the template, for untrusted input.
    """
    if control_token_safe is True:
        return frozenset(("user", "tool"))
    if control_token_safe is False or control_token_safe is None:
        return frozenset()
    if isinstance(control_token_safe, str) or not all(isinstance(role, str) for role in control_token_safe):
        raise ValueError(f"control_token_safe must be a bool or a collection of role names, got {control_token_safe!r}")
    return frozenset(control_token_safe)


def cut_at_stop_string(text: str, stops: list[str]) -> tuple[str, str | None]:
    """``text`` up to its first stop string (excluded), and that stop (None when there is none)."""
    found = [(text.find(stop), -len(stop), stop) for stop in stops if stop and stop in text]
    if not found:
        return text, None
    at, _, stop = min(found)
    return text[:at], stop

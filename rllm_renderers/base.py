"""The base class of every generated renderer.

A generated class supplies ``render_template`` (the template, translated) and a few
class attributes describing what the compiler learned; this base turns that into
the renderer contract: input normalisation as transformers does it, knob
handling, token ids with per-token message attribution.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from . import template_runtime as jinja
from .output import RenderOutput
from .types import Message, RenderedTokens, ToolSpec

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class GeneratedRenderer:
    """Shared machinery of compiled renderers; subclasses are generated, not written."""

    #: Model ids whose chat template this class was compiled from.
    MODEL_IDS: ClassVar[tuple[str, ...]] = ()
    #: sha256 of the template source (what ``resolve`` matches a tokenizer's template against).
    TEMPLATE_SHA256: ClassVar[str] = ""
    #: Template variables that are not inputs: constructor keyword arguments.
    KNOBS: ClassVar[tuple[str, ...]] = ()
    #: Special-token variables the template reads, with the values baked in at compile time.
    SPECIAL_TOKENS: ClassVar[dict[str, str]] = {}
    #: Roles the template distinguishes; other roles are rejected. Empty: any role.
    ROLES: ClassVar[tuple[str, ...]] = ()
    #: How the template consumes tool-call arguments: "dict", "string" or "either".
    TOOL_ARGUMENTS: ClassVar[str] = "either"

    def __init__(self, tokenizer: Any = None, **knobs: Any) -> None:
        unknown = sorted(set(knobs) - set(self.KNOBS))
        if unknown:
            known = ", ".join(self.KNOBS) or "none"
            raise ValueError(
                f"unknown template knob {unknown[0]!r} for {type(self).__name__}; "
                f"the template reads these knobs: {known}"
            )
        self.tokenizer = tokenizer
        self.knob_values = dict(knobs)
        self.knobs = {name: jinja.template_data(knobs[name]) if name in knobs else jinja.Undefined(name) for name in self.KNOBS}
        if tokenizer is not None:
            self._check_special_tokens(tokenizer)
        self._encoder = None

    def _check_special_tokens(self, tokenizer: Any) -> None:
        for name, baked in self.SPECIAL_TOKENS.items():
            actual = getattr(tokenizer, name, None)
            if actual is not None and str(actual) != baked:
                raise ValueError(
                    f"{type(self).__name__} was compiled with {name}={baked!r} but the tokenizer has {actual!r}; "
                    "regenerate the renderer for this tokenizer"
                )

    # --- pickling: the encoder cache is rebuilt lazily --------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_encoder"] = None
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
                message = {**message, "tool_calls": [self._normalize_tool_call(call, index) for call in message["tool_calls"]]}
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

    def render_template(self, out: RenderOutput, messages: Any, tools: Any, documents: Any, add_generation_prompt: bool) -> None:
        raise NotImplementedError("generated subclasses implement render_template")

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
        except (TypeError, KeyError, IndexError, AttributeError) as exc:
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
        """Token ids with each token attributed to the message it was rendered for (-1: scaffolding)."""
        out = self._render_output(messages, tools, add_generation_prompt)
        token_ids, offsets = self.encoder.encode_with_offsets(out.text())
        spans = out.message_spans()
        message_indices = []
        span = 0
        for offset in offsets:
            while span + 1 < len(spans) and spans[span + 1][0] <= offset:
                span += 1
            message_indices.append(spans[span][1])
        return RenderedTokens(
            token_ids=token_ids,
            message_indices=message_indices,
            message_roles=[message.get("role", "") for message in messages],
            message_tool_names=tool_names(messages),
        )


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
            result.append(message.get("name") or names_by_id.get(message.get("tool_call_id", "")))
        else:
            result.append(None)
    return result

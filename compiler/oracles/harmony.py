"""OpenAI's ``openai-harmony`` encoder as the gpt-oss oracle (``--oracle harmony``).

openai-harmony (PyPI, the ``harmony`` extra) is OpenAI's own renderer of the harmony format;
vLLM renders gpt-oss prompts with it and PrimeIntellect treats it as the gpt-oss reference.
It needs the o200k_base vocabulary, which it would download on first use: the oracle
derives it from the gpt-oss tokenizer it is given (``ensure_harmony_vocab`` of
:mod:`rllm_renderers.adapters.prime`, which checks the sha256), so nothing touches the network.

An OpenAI conversation becomes a harmony ``Conversation`` the way OpenAI's harmony guide and
vLLM's gpt-oss serving path build one:

* the system message is harmony's own (model identity, ``Knowledge cutoff: 2024-06``,
  ``Current date`` = today, as the HF template's ``strftime_now``, reasoning effort, the
  required channels); a leading OpenAI ``system`` or ``developer`` message becomes the
  developer message's instructions, and the tools its ``functions`` namespace
  (a developer message is written only when there are instructions or tools);
* ``user`` -> a user message;
* ``assistant`` -> its ``reasoning_content`` (or ``thinking``) as an ``analysis`` message; text
  beside tool calls as a ``commentary`` preamble, otherwise as the ``final`` message; each tool
  call as a ``commentary`` message to ``functions.NAME`` with content type ``<|constrain|>json``
  and the arguments JSON as the content (a dict is serialised with ``json.dumps``);
* ``tool`` -> a message from ``functions.NAME`` (its ``name``, else the name of the call its
  ``tool_call_id`` answers, else the latest call) to ``assistant`` on ``commentary``, content verbatim.

``add_generation_prompt=True`` renders with ``render_conversation_for_completion(..., ASSISTANT)``
(which drops earlier turns' analysis, as harmony does for inference); a conversation that ends with
an assistant message and no generation prompt with ``render_conversation_for_training`` (the final
message ends in ``<|return|>``); anything else with ``render_conversation``.
Knobs: ``reasoning_effort`` (low / medium / high) and ``model_identity``, as the HF template
reads them; ``conversation_start_date`` (harmony's ``Current date``, today when unset);
``builtin_tools`` (browser / python) selects harmony's built-in tool sections.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from typing import Any

from ..oracle import EMPTY_CONVERSATION_MESSAGE, OracleRejected
from . import OracleUnavailable, TokenOracle

KNOBS = ("reasoning_effort", "model_identity", "conversation_start_date", "builtin_tools")


def _harmony():
    try:
        import openai_harmony
    except ImportError as exc:
        raise OracleUnavailable(
            f"the harmony oracle needs openai-harmony (pip install -e '.[harmony]'): {exc}"
        ) from None
    return openai_harmony


class HarmonyOracle(TokenOracle):
    """openai-harmony with the interface of :class:`compiler.oracle.TemplateOracle`."""

    def __init__(self, tokenizer: Any):
        if tokenizer is None:
            raise OracleUnavailable("the harmony oracle needs the gpt-oss tokenizer (its o200k vocabulary; --corpus)")
        from rllm_renderers.adapters.prime import ensure_harmony_vocab

        try:
            ensure_harmony_vocab(tokenizer)
        except RuntimeError as exc:
            raise OracleUnavailable(f"harmony oracle: {exc}") from None
        harmony = _harmony()
        self.harmony = harmony
        self.encoding = harmony.load_harmony_encoding(harmony.HarmonyEncodingName.HARMONY_GPT_OSS)
        self.tokenizer = tokenizer
        self.special_tokens: dict[str, str] = dict(tokenizer.special_tokens_map)

    def __repr__(self) -> str:
        return "HarmonyOracle()"

    # --- conversation -------------------------------------------------------------------

    def system_message(self, knobs: Mapping[str, Any], with_tools: bool):
        h = self.harmony
        unknown = sorted(set(knobs) - set(KNOBS))
        if unknown:
            raise ValueError(f"the harmony oracle has no knob {unknown[0]!r} (its knobs: {', '.join(KNOBS)})")
        date = knobs.get("conversation_start_date")
        if date is None:
            date = datetime.date.today().strftime("%Y-%m-%d")
        elif not isinstance(date, str):
            raise OracleRejected(f"conversation_start_date must be a string, got {date!r}", "TypeError")
        content = h.SystemContent.new().with_conversation_start_date(date)
        effort = knobs.get("reasoning_effort", "medium")
        efforts = {"low": h.ReasoningEffort.LOW, "medium": h.ReasoningEffort.MEDIUM, "high": h.ReasoningEffort.HIGH}
        if effort not in efforts:
            raise OracleRejected(f"harmony has no reasoning effort {effort!r}", "ValueError")
        content = content.with_reasoning_effort(efforts[effort])
        if "model_identity" in knobs:
            content = content.with_model_identity(knobs["model_identity"])
        for tool in knobs.get("builtin_tools") or ():
            if tool == "browser":
                content = content.with_browser_tool()
            elif tool == "python":
                content = content.with_python_tool()
        del with_tools  # harmony adds the "Calls to these tools..." line itself when functions exist
        return h.Message.from_role_and_content(h.Role.SYSTEM, content)

    def conversation(self, messages: list[dict], tools: list[dict] | None, knobs: Mapping[str, Any]):
        h = self.harmony
        functions = [tool.get("function", tool) for tool in tools or () if isinstance(tool, Mapping)]
        converted = [self.system_message(knobs, bool(functions))]
        rest = list(messages)
        instructions = ""
        if rest and rest[0].get("role") in ("system", "developer"):
            instructions = _text(rest.pop(0).get("content"), 0)
        if instructions or functions:
            developer = h.DeveloperContent.new()
            if instructions:
                developer = developer.with_instructions(instructions)
            if functions:
                developer = developer.with_function_tools(
                    [
                        h.ToolDescription.new(f["name"], f.get("description", ""), parameters=f.get("parameters"))
                        for f in functions
                    ]
                )
            converted.append(h.Message.from_role_and_content(h.Role.DEVELOPER, developer))
        call_names: dict[str, str] = {}
        latest_call: str | None = None
        for index, message in enumerate(rest, start=len(messages) - len(rest)):
            role = message.get("role")
            if role == "user":
                converted.append(h.Message.from_role_and_content(h.Role.USER, _text(message.get("content"), index)))
            elif role == "assistant":
                reasoning = message.get("reasoning_content", message.get("thinking"))
                content = _text(message.get("content"), index)
                calls = message.get("tool_calls") or []
                if reasoning:
                    converted.append(
                        h.Message.from_role_and_content(h.Role.ASSISTANT, reasoning).with_channel("analysis")
                    )
                if calls:
                    if content:
                        converted.append(
                            h.Message.from_role_and_content(h.Role.ASSISTANT, content).with_channel("commentary")
                        )
                    for call in calls:
                        function = call.get("function", call)
                        arguments = function.get("arguments", {})
                        if not isinstance(arguments, str):
                            arguments = json.dumps(arguments, ensure_ascii=False)
                        converted.append(
                            h.Message.from_role_and_content(h.Role.ASSISTANT, arguments)
                            .with_channel("commentary")
                            .with_recipient(f"functions.{function['name']}")
                            .with_content_type("<|constrain|>json")
                        )
                        latest_call = function["name"]
                        if call.get("id") is not None:
                            call_names[call["id"]] = function["name"]
                else:
                    converted.append(h.Message.from_role_and_content(h.Role.ASSISTANT, content).with_channel("final"))
            elif role == "tool":
                name = message.get("name") or call_names.get(message.get("tool_call_id")) or latest_call
                if name is None:
                    raise ValueError(f"message {index}: a tool result answers no tool call")
                converted.append(
                    h.Message.from_author_and_content(
                        h.Author.new(h.Role.TOOL, f"functions.{name}"), _text(message.get("content"), index)
                    )
                    .with_recipient("assistant")
                    .with_channel("commentary")
                )
            else:
                raise ValueError(f"message {index}: harmony has no place for a {role!r} message here")
        return h.Conversation.from_messages(converted)

    # --- rendering ----------------------------------------------------------------------

    def render_ids(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = False,
        knobs: dict | None = None,
    ) -> list[int]:
        try:
            if len(messages) == 0:
                raise ValueError(EMPTY_CONVERSATION_MESSAGE)
            conversation = self.conversation(messages, tools, dict(knobs or {}))
            if add_generation_prompt:
                return list(self.encoding.render_conversation_for_completion(conversation, self.harmony.Role.ASSISTANT))
            if messages[-1].get("role") == "assistant":
                return list(self.encoding.render_conversation_for_training(conversation))
            return list(self.encoding.render_conversation(conversation))
        except OracleRejected:
            raise
        except Exception as exc:
            raise OracleRejected(str(exc), type(exc).__name__) from exc

    def decode(self, ids: list[int]) -> str:
        return self.encoding.decode_utf8(ids)


def _text(content: Any, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content if isinstance(part, Mapping) and part.get("type") == "text"
        )
    raise ValueError(f"message {index}: content must be a string or a list of text parts, not {type(content).__name__}")

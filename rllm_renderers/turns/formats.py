"""Facts about a template's assistant-turn syntax, learned by the compiler from probe renders.

Generated classes spell these out as class constants, so a reviewer sees exactly
which markers the parser looks for and what the bridge appends. All strings are
literal text as the template writes it, whitespace included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

Format = TypeVar("Format")


def special_token_placeholder(name: str) -> str:
    """How a learned fact spells a special-token variable whose value is read at run time.

    A class compiled without a tokenizer learns its facts from renders in which ``eos_token``
    is the text ``<{eos_token}>``; when it is built, the placeholders in its facts become the
    values its tokenizer (or ``special_tokens=``) gives.
    """
    return "<{" + name + "}>"


def with_special_tokens(fact: Format, values: dict[str, str]) -> Format:
    """``fact`` (a format dataclass, or None) with every placeholder replaced by its value."""
    if fact is None or not values:
        return fact

    def resolve(value: Any) -> Any:
        if isinstance(value, str):
            for name, token in values.items():
                value = value.replace(special_token_placeholder(name), token)
            return value
        if isinstance(value, tuple):
            return tuple(item for item in (resolve(item) for item in value) if item != "")
        return value

    changes = {field.name: resolve(getattr(fact, field.name)) for field in dataclasses.fields(fact)}
    return dataclasses.replace(fact, **changes)


@dataclass(frozen=True)
class TurnFormat:
    """How an assistant turn ends.

    ``close`` is the text the template writes right after an assistant message's
    content and the model samples to end its turn: a special token (``<|im_end|>``),
    plain text (``\n</assistant>``), or ``""`` when nothing does and the next message's
    header ends the turn (GLM). ``after_close`` is what the template writes after it,
    before the next message (``"\n"`` for ChatML and Gemma). ``stop_tokens`` are the
    strings that end generation, the close's own marker first; each is matched as one
    token id where the tokenizer has it as one (``get_stop_token_ids``) and as text
    otherwise (``get_stop_strings``). When nothing closes a turn they are the headers
    of the messages that can follow it (GLM's ``<|user|>``, ``<|observation|>``).
    """

    close: str
    after_close: str = ""
    stop_tokens: tuple[str, ...] = ()
    #: what the template writes between the generation prompt and a plain answer's content when
    #: no reasoning format covers it (``"ASSISTANT:"`` then ``" "``; Kimi's empty
    #: ``<think></think>``): the model samples it, but it is not content
    content_lead: str = ""
    #: the same when the request declares tools, where the template writes another one then
    #: (Hunyuan-A13B asks for answers that start with ``助手：`` in its tool-use prompt)
    content_lead_with_tools: str | None = None
    #: the template writes an assistant message's content only when it is a list of OpenAI content
    #: parts (Idefics: ``{% for line in message['content'] %}``), none of a string's: a message
    #: rebuilt from a parsed turn gives its text as one text part
    content_parts: bool = False


@dataclass(frozen=True)
class ReasoningFormat:
    """Where reasoning sits in an assistant turn: ``open`` reasoning ``close`` content.

    ``after_open`` / ``before_close`` / ``after_close`` are the literal whitespace the
    template puts around the reasoning text; ``content_start`` is a marker the
    template writes before the content (gpt-oss's final channel header).

    ``in_content``: the template has no reasoning field; it finds the block inside the
    content and cuts it out (QwQ, DeepSeek-R1: ``content.split('</think>')[-1]``). The parser
    still reads it as reasoning, but a message for the template carries the turn's text whole.
    """

    open: str
    close: str
    after_open: str = ""
    before_close: str = ""
    after_close: str = ""
    content_start: str = ""
    in_content: bool = False


@dataclass(frozen=True)
class ToolCallFormat:
    """How one tool call is written.

    ``json`` style: ``call_start`` NAME ``name_end`` ARGUMENTS-JSON ``call_end``.
    ``xml`` style: ``call_start`` NAME ``name_end`` then, per argument,
    ``parameter_start`` KEY ``parameter_value`` VALUE ``parameter_end``, then ``call_end``.
    A template that marks which values are JSON writes ``parameter_value_json`` instead of
    ``parameter_value`` before them (DeepSeek-V4: ``string="false"`` against ``string="true"``).
    ``xml_tags`` style: each argument is an element named by its key,
    ``parameter_start`` KEY ``parameter_value`` VALUE ``parameter_end`` KEY ``parameter_value``;
    a VALUE is text or nested elements (an object), and elements all named ``array_item`` make
    an array (MiniMax-M3).
    ``block_start`` opens the list of calls (before the first one), and
    ``content_separator`` separates content from the first call; ``content_start`` is a header
    the template writes before the content of a tool-calling turn only (gpt-oss in harmony: a
    ``commentary`` preamble). ``call_index``: a separator the template writes after the name,
    followed by the call's position in the turn (Kimi-K2's ``functions.NAME:0``), before ``name_end``.
    ``call_id_after``: the delimiter (``"call_start"``, ``"name_end"`` or ``"call_end"``) after which
    the template writes the call's id, which ``call_id_end`` ends (Mistral: ``[CALL_ID]`` ID ``[ARGS]``;
    ``{"id": "`` ID ``", "name": "`` NAME ...).
    ``name_json``: the name is written as the body of a JSON string (escaped).
    ``key_value`` style: ``call_start`` NAME ``name_end`` key:VALUE,key:VALUE ``call_end``, keys bare,
    string values between ``string_quote`` (unescaped), objects ``{key:VALUE,...}``, lists
    ``[VALUE,...]``, other values as Python writes them (``true``, ``5``, ``None``) (Gemma-4).
    ``python`` style: ``call_start`` NAME ``name_end`` key=VALUE, key=VALUE ``call_end``: keyword
    arguments whose values are Python literals with ``string_quote`` around strings (escaped), or
    JSON for nested values; with no ``call_start`` the calls follow ``block_start``, each but the
    first after ``call_separator`` (LFM2.5's ``<|tool_call_start|>[f(a='x'), g()]`` separates them
    with ``", "``; a call ended by ``")\n"`` needs none: MiniCPM3 writes one per line).
    ``arguments_end``: the template writes the arguments before the name (``json`` style):
    ``call_start`` ARGUMENTS ``arguments_end`` NAME ``call_end`` (Hermes' vLLM template:
    ``<tool_call>\n{ "arguments": {...}, "name": "NAME"}``); ``name_end`` is then empty.
    ``content_last``: the template writes a tool-calling turn's content after its calls (Gemma-4),
    after ``block_end``, which closes the list of calls (LFM2's ``]<|tool_call_end|>``).
    ``prefilled_start``: the generation prompt ends with ``call_start``, so a turn that does not
    start with the answer's lead (``TurnFormat.content_lead``) starts inside its first call
    (Functionary-v3.2's prompt ends with ``>>>``: the model writes ``all\n`` and its answer, or
    ``NAME\n{...}``).
    """

    style: str
    call_start: str
    name_end: str
    call_end: str
    parameter_start: str = ""
    parameter_value: str = ""
    parameter_end: str = ""
    parameter_value_json: str = ""
    block_start: str = ""
    content_separator: str = ""
    array_item: str = ""
    call_index: str = ""
    call_id_after: str = ""
    call_id_end: str = ""
    name_json: bool = False
    string_quote: str = ""
    content_last: bool = False
    block_end: str = ""
    content_start: str = ""
    call_separator: str = ""
    arguments_end: str = ""
    prefilled_start: bool = False

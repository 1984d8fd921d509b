"""Facts about a template's assistant-turn syntax, learned by the compiler from probe renders.

Generated classes spell these out as class constants, so a reviewer sees exactly
which markers the parser looks for and what the bridge appends. All strings are
literal text as the template writes it, whitespace included.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TurnFormat:
    """How an assistant turn ends.

    ``close`` is the token the template writes to end the last assistant turn (the
    one the model samples to stop); ``after_close`` is what the template writes
    after it, before the next message (``"\\n"`` for ChatML); ``stop_tokens`` are
    every token that ends generation, ``close`` first.
    """

    close: str
    after_close: str = ""
    stop_tokens: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReasoningFormat:
    """Where reasoning sits in an assistant turn: ``open`` reasoning ``close`` content.

    ``after_open`` / ``before_close`` / ``after_close`` are the literal whitespace the
    template puts around the reasoning text; ``content_start`` is a marker the
    template writes before the content (gpt-oss's final channel header).
    """

    open: str
    close: str
    after_open: str = ""
    before_close: str = ""
    after_close: str = ""
    content_start: str = ""


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
    ``commentary`` preamble).
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
    content_start: str = ""

"""Parse a sampled assistant turn back into content, reasoning and tool calls.

The parser is driven by the format facts the compiler learned from the template
(:mod:`rllm_renderers.turns.formats`), so one implementation serves every family:
Hermes-style ``<tool_call>{json}</tool_call>``, XML parameters
(``<function=...><parameter=...>``), bare JSON (Llama 3), harmony headers
(gpt-oss ``to=functions.NAME``), special-token blocks. It never raises: malformed
or truncated calls are recorded with a status, as PrimeIntellect's ``renderers`` does.
"""

from __future__ import annotations

import ast
import functools
import json
import operator
import re
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from .formats import ReasoningFormat, ToolCallFormat
from ..types import ParsedResponse, ParsedToolCall, ToolCallParseStatus

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\r\n]*")
_TRAILING_SPACE = re.compile(r"\s*\Z")  # (what str.rstrip() strips, up to the end)
_INT = frozenset((int,))


@dataclass
class TextCall:
    """A tool call found in the text, with its character span."""

    raw: str
    start: int
    end: int
    name: str | None = None
    arguments: Any = None
    status: ToolCallParseStatus = ToolCallParseStatus.OK
    id: str | None = None
    reason: str | None = None  # why the call could not be read, where the status alone does not say


@dataclass
class TextParse:
    content: str
    reasoning: str | None
    reasoning_complete: bool | None
    calls: list[TextCall] = field(default_factory=list)
    #: where the text after the reasoning block starts (the content, or the calls): what a parser of
    #: the content alone is given (vLLM's tool parser after its reasoning parser)
    body_at: int = 0


def parse_text(
    text: str,
    *,
    reasoning: ReasoningFormat | None,
    tool_calls: ToolCallFormat | None,
    reasoning_prefilled: bool,
    tools: list[dict] | None = None,
    close_lead: str = "",
    in_call: bool = False,
) -> TextParse:
    """Parse the text of one assistant turn (without its stop token).

    ``close_lead``: the close's text that followed ``text`` before the stop (``\n`` of
    ``\n</assistant>``). It is not content, but the end of the last tool call may be written
    with it (Laguna's ``</tool_call>\n`` then ``</assistant>``), so calls are read through it.
    ``in_call``: the prompt wrote the first call's start (see :func:`starts_in_call`).
    """
    position = 0
    reasoning_text: str | None = None
    # as PrimeIntellect's renderers: True unless the completion leaves a reasoning block open
    # (so also True for a template without reasoning)
    reasoning_complete = True
    if reasoning is not None:
        # no open marker: the turn starts in its reasoning (Apriel's prompt ends "Here are my
        # reasoning steps:\n" and the model writes them up to "[BEGIN FINAL RESPONSE]")
        in_reasoning = reasoning_prefilled or not reasoning.open
        stripped = text.lstrip()
        if not in_reasoning and reasoning.open and stripped.startswith(reasoning.open):
            position = len(text) - len(stripped) + len(reasoning.open)
            position = _skip(text, position, reasoning.after_open)
            in_reasoning = True
        elif not in_reasoning and text.startswith(reasoning.close):
            # a turn that opens with the bare close has empty reasoning (MiniMax-M3's `</mm:think>answer`)
            reasoning_text = ""
            position = _skip(text, len(reasoning.close), reasoning.after_close)
        elif not in_reasoning and reasoning.in_content and reasoning.close in text[: calls_start(text, tool_calls)]:
            # the template reads all before the close as the block, also where the model skipped the
            # open; it cuts it from the content only, not from the calls written after it
            in_reasoning = True
        if in_reasoning:
            close_at = text.find(reasoning.close, position)
            if close_at < 0:
                return TextParse(content="", reasoning=text[position:], reasoning_complete=False, body_at=len(text))
            reasoning_text = _strip_suffix(text[position:close_at], reasoning.before_close)
            position = _skip(text, close_at + len(reasoning.close), reasoning.after_close)
        if reasoning.content_start and text.startswith(reasoning.content_start, position):
            position += len(reasoning.content_start)
    body_at = position
    if tool_calls is None:
        return TextParse(text[position:], reasoning_text, reasoning_complete, body_at=body_at)
    prefilled = tool_calls.call_start if in_call else ""
    found = find_calls(text[:position] + prefilled + text[position:] + close_lead, position, tool_calls, tools)
    for call in found:  # (positions in `text`: the prompt's call start is not in it)
        call.start, call.end = max(call.start - len(prefilled), position), call.end - len(prefilled)
    calls = [call for call in found if call.start < len(text) or (in_call and call.start == position)]
    for call in calls:  # a call ended with the close's text ends where the text does
        call.end = min(call.end, len(text))
    if calls and tool_calls.content_start and text.startswith(tool_calls.content_start, position):
        position += len(tool_calls.content_start)
    content_end = calls[0].start if calls else len(text)
    content = text[position:content_end]
    if calls:
        content = _strip_suffix(_strip_suffix(content, tool_calls.block_start), tool_calls.content_separator)
        if tool_calls.content_last:  # the template writes the content after the calls (Gemma-4)
            after = text[calls[-1].end :]
            if not (after.strip() and tool_calls.block_end.startswith(after)):  # (else a block end cut at its stop)
                content += _strip_prefix(after, tool_calls.block_end)
    return TextParse(content, reasoning_text, reasoning_complete, calls, body_at=body_at)


def calls_start(text: str, tool_calls: ToolCallFormat | None) -> int:
    """Where the first call's start marker is in ``text`` (its length when there is none, or when the
    template writes the content after the calls)."""
    if tool_calls is None or not tool_calls.call_start or tool_calls.content_last:
        return len(text)
    found = text.find(tool_calls.call_start)
    return len(text) if found < 0 else found


def starts_in_call(tool_calls: ToolCallFormat | None, content_lead: str) -> bool:
    """Whether a turn starts inside its first call: the prompt ends with the call start and the
    turn does not open with the answer's ``content_lead`` (see ``ToolCallFormat.prefilled_start``)."""
    return tool_calls is not None and tool_calls.prefilled_start and not content_lead


def find_calls(text: str, position: int, syntax: ToolCallFormat, tools: list[dict] | None) -> list[TextCall]:
    calls: list[TextCall] = []
    known_names = _tool_names(tools)
    if syntax.style == "python" and not syntax.call_start:
        calls = _python_calls(text, position, syntax)
        for call in calls:
            if call.status is ToolCallParseStatus.OK and known_names is not None and call.name not in known_names:
                call.status = ToolCallParseStatus.UNKNOWN_TOOL
        return calls
    while True:
        start = text.find(syntax.call_start, position)
        if start < 0 or not syntax.call_start:
            return calls
        try:
            call = _parse_call(text, start, syntax, tools)
        except RecursionError:  # arguments nested past the recursion limit (a sampled "[[[[..." loop)
            call = _too_deep(text, start, syntax)
        if call.status is ToolCallParseStatus.OK and known_names is not None and call.name not in known_names:
            call.status = ToolCallParseStatus.UNKNOWN_TOOL
        calls.append(call)
        position = max(call.end, start + len(syntax.call_start))


def _parse_call(text: str, start: int, syntax: ToolCallFormat, tools: list[dict] | None) -> TextCall:
    if syntax.arguments_end:
        call = _parse_arguments_first(text, start, syntax)
        if call.status is ToolCallParseStatus.OK and not call.name:
            call.status = ToolCallParseStatus.MISSING_NAME
        return call
    name_at = start + len(syntax.call_start)
    call_id = None
    if syntax.call_id_after == "call_start":  # {"id": "ID", "name": "NAME", ...
        id_end = text.find(syntax.call_id_end, name_at)
        if id_end < 0:
            return TextCall(text[start:], start, len(text), status=ToolCallParseStatus.UNCLOSED_BLOCK)
        call_id, name_at = text[name_at:id_end], id_end + len(syntax.call_id_end)
    positioned = _positioned_name_end(syntax.call_index, syntax.name_end).search(text, name_at) if syntax.call_index else None
    if positioned is not None:  # NAME, the separator, the call's position, name_end (Kimi-K3's name_end is '"')
        name, body_at = _call_name(text[name_at : positioned.start()], syntax), positioned.end()
    else:
        name_end = text.find(syntax.name_end, name_at) if syntax.name_end else _identifier_end(text, name_at)
        if name_end < 0:
            return TextCall(text[start:], start, len(text), status=ToolCallParseStatus.UNCLOSED_BLOCK)
        # between explicit delimiters the name is exactly what the template wrote; else only the
        # syntax's whitespace is stripped, never a name's own characters
        name = _call_name(text[name_at:name_end] if syntax.name_end else text[name_at:name_end].strip(" \t\r\n"), syntax)
        body_at = name_end + len(syntax.name_end)
    if syntax.call_id_after == "name_end":  # NAME [CALL_ID] ID [ARGS] ...
        id_end = text.find(syntax.call_id_end, body_at)
        if id_end < 0:
            return TextCall(text[start:], start, len(text), name, status=ToolCallParseStatus.UNCLOSED_BLOCK)
        call_id, body_at = text[body_at:id_end], id_end + len(syntax.call_id_end)
    if syntax.style == "xml":
        call = _parse_xml_arguments(text, start, body_at, syntax, name, tools)
    elif syntax.style == "key_value":
        call = _parse_key_value_arguments(text, start, body_at, syntax, name)
    elif syntax.style == "xml_tags":
        call = _parse_xml_elements(text, start, body_at, syntax, name, tools)
    elif syntax.style == "python":
        call = _parse_python_arguments(text, start, body_at, syntax, name)
    else:
        call = _parse_json_arguments(text, start, body_at, syntax, name)
    if call.status is ToolCallParseStatus.OK and not name:
        call.status = ToolCallParseStatus.MISSING_NAME
    if call_id is not None:
        call.id = call_id
    return call


#: The reason given for a call whose arguments nest too deeply to read.
TOO_DEEP = "the arguments nest too deeply to read (past Python's recursion limit)"


def _too_deep(text: str, start: int, syntax: ToolCallFormat) -> TextCall:
    """A call whose reading ran out of stack: malformed, up to its first ``call_end`` (or the text's end)."""
    end_at = text.find(syntax.call_end, start + len(syntax.call_start)) if syntax.call_end else -1
    end = end_at + len(syntax.call_end) if end_at >= 0 else len(text)
    return TextCall(text[start:end], start, end, status=ToolCallParseStatus.MALFORMED_STRUCTURE, reason=TOO_DEEP)


@functools.lru_cache(maxsize=64)
def _positioned_name_end(call_index: str, name_end: str) -> re.Pattern:
    """``call_index``, the call's position, ``name_end``: what follows a call's name."""
    return re.compile(re.escape(call_index) + r"\d+" + re.escape(name_end))


def _call_name(name: str, syntax: ToolCallFormat) -> str:
    """The name as written, unescaped where the template escapes it."""
    if syntax.name_json:  # the body of a JSON string: unescaped (left as written when it is not one)
        try:
            name = json.loads(f'"{name}"')
        except json.JSONDecodeError:
            pass
    return name


def _parse_arguments_first(text: str, start: int, syntax: ToolCallFormat) -> TextCall:
    """``call_start`` ARGUMENTS ``arguments_end`` NAME ``call_end``: JSON arguments written before the
    name (Hermes' vLLM template); the name runs up to the first ``call_end``."""
    body_at = start + len(syntax.call_start)
    try:
        arguments, arguments_end = _DECODER.raw_decode(text, _skip_space(text, body_at))
    except json.JSONDecodeError:
        end_at = text.find(syntax.call_end, body_at)
        if end_at < 0:
            return TextCall(text[start:], start, len(text), None, text[body_at:], ToolCallParseStatus.UNCLOSED_BLOCK)
        end = end_at + len(syntax.call_end)
        return TextCall(text[start:end], start, end, None, text[body_at:end_at], ToolCallParseStatus.INVALID_JSON)
    if not text.startswith(syntax.arguments_end, arguments_end):
        cut = syntax.arguments_end.startswith(text[arguments_end:])  # the text ends inside the delimiter
        status = ToolCallParseStatus.UNCLOSED_BLOCK if cut else ToolCallParseStatus.MALFORMED_STRUCTURE
        return TextCall(text[start:arguments_end], start, arguments_end, None, arguments, status)
    name_at = arguments_end + len(syntax.arguments_end)
    name_end = text.find(syntax.call_end, name_at)
    if name_end < 0:
        return TextCall(text[start:], start, len(text), None, arguments, ToolCallParseStatus.UNCLOSED_BLOCK)
    end = name_end + len(syntax.call_end)
    name = _call_name(text[name_at:name_end], syntax)
    if not isinstance(arguments, dict):
        return TextCall(text[start:end], start, end, name, arguments, ToolCallParseStatus.MALFORMED_STRUCTURE)
    return TextCall(text[start:end], start, end, name, arguments)


def _parse_json_arguments(text: str, start: int, body_at: int, syntax: ToolCallFormat, name: str) -> TextCall:
    try:
        arguments, arguments_end = _DECODER.raw_decode(text, _skip_space(text, body_at))
    except json.JSONDecodeError:
        end_at = text.find(syntax.call_end, body_at) if syntax.call_end else -1
        if end_at < 0:
            status = ToolCallParseStatus.UNCLOSED_BLOCK if syntax.call_end else ToolCallParseStatus.INVALID_JSON
            return TextCall(text[start:], start, len(text), name, text[body_at:], status)
        return TextCall(
            text[start : end_at + len(syntax.call_end)],
            start,
            end_at + len(syntax.call_end),
            name,
            text[body_at:end_at],
            ToolCallParseStatus.INVALID_JSON,
        )
    if not text.startswith(syntax.call_end, arguments_end):
        # (only space left: the text ended before the call did; found without copying the text)
        status = ToolCallParseStatus.UNCLOSED_BLOCK if _TRAILING_SPACE.match(text, arguments_end) else ToolCallParseStatus.MALFORMED_STRUCTURE
        return TextCall(text[start:arguments_end], start, arguments_end, name, arguments, status)
    end = arguments_end + len(syntax.call_end)
    call_id = None
    if syntax.call_id_after == "call_end":  # ... ARGUMENTS, "id": "ID"}
        id_end = text.find(syntax.call_id_end, end)
        if id_end < 0:
            return TextCall(text[start:], start, len(text), name, arguments, ToolCallParseStatus.UNCLOSED_BLOCK)
        call_id, end = text[end:id_end], id_end + len(syntax.call_id_end)
    if not isinstance(arguments, dict):
        return TextCall(text[start:end], start, end, name, arguments, ToolCallParseStatus.MALFORMED_STRUCTURE, call_id)
    return TextCall(text[start:end], start, end, name, arguments, id=call_id)


def _parse_xml_arguments(
    text: str, start: int, position: int, syntax: ToolCallFormat, name: str, tools: list[dict] | None
) -> TextCall:
    arguments: dict[str, Any] = {}
    types = _parameter_types(tools, name)
    while True:
        # a call without parameters may keep the blank line between its name and its end
        after_space = _skip_space(text, position)
        if text.startswith(syntax.call_end, after_space):
            end = after_space + len(syntax.call_end)
            return TextCall(text[start:end], start, end, name, arguments)
        if not text.startswith(syntax.parameter_start, position):
            status = ToolCallParseStatus.UNCLOSED_BLOCK if position >= len(text) else ToolCallParseStatus.MALFORMED_STRUCTURE
            return TextCall(text[start:position], start, position, name, arguments, status)
        key_at = position + len(syntax.parameter_start)
        key_end, separator = _parameter_separator(text, key_at, syntax)
        value_end = text.find(syntax.parameter_end, key_end + len(separator)) if key_end >= 0 else -1
        if key_end < 0 or value_end < 0:
            return TextCall(text[start:], start, len(text), name, arguments, ToolCallParseStatus.UNCLOSED_BLOCK)
        key = text[key_at:key_end]
        raw_value = text[key_end + len(separator) : value_end]
        if not syntax.parameter_value_json:
            arguments[key] = _xml_value(raw_value, types.get(key))
        elif separator == syntax.parameter_value_json:
            arguments[key] = _xml_value(raw_value, None)  # JSON, or the raw text when it does not parse
        else:  # marked as a string by the template's own syntax
            arguments[key] = raw_value
        position = value_end + len(syntax.parameter_end)


def _parse_key_value_arguments(text: str, start: int, position: int, syntax: ToolCallFormat, name: str) -> TextCall:
    """``key:VALUE,key:VALUE`` then ``call_end`` (the ``key_value`` style)."""
    reader = _KeyValueReader(text, syntax.string_quote)
    try:
        arguments, position = reader.members(position, syntax.call_end)
    except _Malformed as exc:
        return TextCall(text[start : exc.position], start, exc.position, name, None, exc.status)
    end = position + len(syntax.call_end)
    return TextCall(text[start:end], start, end, name, arguments)


_PYTHON_NAME = re.compile(r"[A-Za-z_][\w.\-]*")


def _python_calls(text: str, position: int, syntax: ToolCallFormat) -> list[TextCall]:
    """``NAME(key=VALUE, ...)`` calls right after ``block_start``, each but the first after
    ``call_separator`` (the ``python`` style with nothing before each name: LFM2.5's
    ``[f(a='x'), g()]``, one call per line in MiniCPM3's code block)."""
    calls: list[TextCall] = []
    block = text.find(syntax.block_start, position) if syntax.block_start else -1
    if block < 0:
        return calls
    at = block + len(syntax.block_start)
    separator_pattern = _separator_pattern(syntax.call_separator)
    while True:
        named = _PYTHON_NAME.match(text, at)
        if named is None or not text.startswith(syntax.name_end, named.end()):
            return calls
        call = _parse_python_arguments(text, at, named.end() + len(syntax.name_end), syntax, named.group())
        calls.append(call)
        if call.status is not ToolCallParseStatus.OK:
            return calls
        separator = separator_pattern.match(text, call.end)
        if separator is None:
            return calls
        at = separator.end()


def _separator_pattern(separator: str) -> re.Pattern:
    """``separator`` with any whitespace around its text (``", "`` also matches ``","``); one of
    whitespace only, or none, as written."""
    text = separator.strip(" \t\r\n")
    return re.compile(r"[ \t\r\n]*" + re.escape(text) + r"[ \t\r\n]*" if text else re.escape(separator))


def _parse_python_arguments(text: str, start: int, position: int, syntax: ToolCallFormat, name: str) -> TextCall:
    """``key=VALUE, ...`` then ``call_end`` (the ``python`` style): keyword arguments whose values
    are Python or JSON literals (``'it\\'s'``, ``3``, ``True``, ``{"a": null}``). The arguments end at
    the first ``call_end`` after which they parse as a call."""
    end = text.find(syntax.call_end, position) if syntax.call_end else -1
    while end >= 0:
        try:
            node = _python_call(text[position:end])
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            end = text.find(syntax.call_end, end + 1)
            continue
        stop = end + len(syntax.call_end)
        if not isinstance(node, ast.Call) or node.args or any(keyword.arg is None for keyword in node.keywords):
            return TextCall(text[start:stop], start, stop, name, None, ToolCallParseStatus.MALFORMED_STRUCTURE)
        try:
            arguments = {keyword.arg: _python_literal(keyword.value) for keyword in node.keywords}
        except (ValueError, RecursionError):
            return TextCall(text[start:stop], start, stop, name, None, ToolCallParseStatus.MALFORMED_STRUCTURE)
        return TextCall(text[start:stop], start, stop, name, arguments)
    return TextCall(text[start:], start, len(text), name, status=ToolCallParseStatus.UNCLOSED_BLOCK)


def _python_call(arguments: str) -> ast.AST:
    """``f(<arguments>)`` parsed. A template that escapes only quotes and backslashes writes a string
    value's newline as itself, inside the quotes, where Python wants ``\\n``: where the text does not
    parse as it is, such raw line breaks inside quoted strings are read as escaped ones (the value
    is the same string)."""
    try:
        return ast.parse(f"f({arguments})", mode="eval").body
    except SyntaxError:
        escaped = _escape_line_breaks_in_strings(arguments)
        if escaped == arguments:
            raise
        return ast.parse(f"f({escaped})", mode="eval").body


def _escape_line_breaks_in_strings(source: str) -> str:
    """``source`` with each raw ``\\n`` / ``\\r`` inside a single- or double-quoted string written as
    its escape (a backslash escape inside the string is kept as it is)."""
    out: list[str] = []
    quote = None
    index = 0
    while index < len(source):
        character = source[index]
        if quote is None:
            if character in "'\"":
                quote = character
        elif character == "\\":
            out.append(source[index : index + 2])
            index += 2
            continue
        elif character == quote:
            quote = None
        elif character in "\n\r":
            character = "\\n" if character == "\n" else "\\r"
        out.append(character)
        index += 1
    return "".join(out)


_PYTHON_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def _python_literal(node: ast.AST) -> Any:
    """A literal argument value; JSON's ``true``/``false``/``null`` too (a template writes nested
    values with ``tojson``). Anything else (a call, a variable) is a ValueError."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in _PYTHON_NAMES:
        return _PYTHON_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(node.operand, ast.Constant):
        value = node.operand.value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_python_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict) and all(key is not None for key in node.keys):
        return {_python_literal(key): _python_literal(value) for key, value in zip(node.keys, node.values)}
    raise ValueError("not a literal")


class _KeyValueReader:
    """Values written as Gemma-4's template writes them: ``QUOTE text QUOTE``, ``{key:VALUE,...}``,
    ``[VALUE,...]``, else a bare scalar (``true``, ``false``, ``None``, a number)."""

    def __init__(self, text: str, quote: str) -> None:
        self.text, self.quote = text, quote

    def fail(self, position: int):
        status = ToolCallParseStatus.UNCLOSED_BLOCK if position >= len(self.text) else ToolCallParseStatus.MALFORMED_STRUCTURE
        return _Malformed(status, min(position, len(self.text)))

    def members(self, position: int, closing: str) -> tuple[dict[str, Any], int]:
        """Members up to ``closing`` (not consumed): ``(object, position of closing)``."""
        text, result = self.text, {}
        while not text.startswith(closing, position):
            if result:
                if not text.startswith(",", position):
                    raise self.fail(position)
                position += 1
            colon = text.find(":", position)
            if colon < 0:
                raise self.fail(len(text))
            key = text[position:colon]
            result[key], position = self.value(colon + 1)
        return result, position

    def value(self, position: int) -> tuple[Any, int]:
        text, quote = self.text, self.quote
        if quote and text.startswith(quote, position):
            end = text.find(quote, position + len(quote))
            if end < 0:
                raise self.fail(len(text))
            return text[position + len(quote) : end], end + len(quote)
        if text.startswith("{", position):
            members, position = self.members(position + 1, "}")
            return members, position + 1
        if text.startswith("[", position):
            items: list[Any] = []
            position += 1
            while not text.startswith("]", position):
                if items:
                    if not text.startswith(",", position):
                        raise self.fail(position)
                    position += 1
                item, position = self.value(position)
                items.append(item)
            return items, position + 1
        end = position
        while end < len(text) and text[end] not in ",}]":
            end += 1
        if end >= len(text):
            raise self.fail(end)
        return _bare_scalar(text[position:end]), end


def _bare_scalar(raw: str) -> Any:
    """``true``/``false``/``None`` and numbers as Python values; anything else stays text."""
    constants = {"true": True, "false": False, "None": None}
    if raw in constants:
        return constants[raw]
    for convert in (int, float):
        try:
            return convert(raw)
        except ValueError:
            continue
    return raw


class _Malformed(Exception):
    """An element that does not close (``unclosed``) or is not an element at all."""

    def __init__(self, status: ToolCallParseStatus, position: int):
        super().__init__(status.value)
        self.status, self.position = status, position


def _parse_xml_elements(
    text: str, start: int, position: int, syntax: ToolCallFormat, name: str, tools: list[dict] | None
) -> TextCall:
    """Arguments as elements named by their key, values nested (``xml_tags`` style)."""
    types = _parameter_types(tools, name)
    try:
        members, position = _elements(text, position, syntax, syntax.call_end)
    except _Malformed as problem:
        return TextCall(text[start : problem.position], start, problem.position, name, None, problem.status)
    end = position + len(syntax.call_end)
    arguments = {key: _element_value(raw, types.get(key), syntax.array_item) for key, raw in members}
    return TextCall(text[start:end], start, end, name, arguments)


def _elements(text: str, position: int, syntax: ToolCallFormat, stop: str) -> tuple[list[tuple[str, Any]], int]:
    """Sibling elements from ``position`` up to ``stop`` (not consumed): [(key, raw value)], end."""
    members: list[tuple[str, Any]] = []
    while not text.startswith(stop, position):
        if position >= len(text):
            raise _Malformed(ToolCallParseStatus.UNCLOSED_BLOCK, len(text))
        if not text.startswith(syntax.parameter_start, position):
            raise _Malformed(ToolCallParseStatus.MALFORMED_STRUCTURE, position)
        key_at = position + len(syntax.parameter_start)
        key_end = text.find(syntax.parameter_value, key_at)
        if key_end < 0:
            raise _Malformed(ToolCallParseStatus.UNCLOSED_BLOCK, len(text))
        key = text[key_at:key_end]
        closing = syntax.parameter_end + key + syntax.parameter_value
        value_at = key_end + len(syntax.parameter_value)
        if text.startswith(syntax.parameter_start, value_at) and not text.startswith(closing, value_at):
            value, value_end = _elements(text, value_at, syntax, closing)
        else:
            value_end = text.find(closing, value_at)
            if value_end < 0:
                raise _Malformed(ToolCallParseStatus.UNCLOSED_BLOCK, len(text))
            value = text[value_at:value_end]
        members.append((key, value))
        position = value_end + len(closing)
    return members, position


def _element_value(raw: Any, declared_type: Any, item: str | None = None) -> Any:
    """A parsed element: text as a scalar; children all named like an array item make a list."""
    if isinstance(raw, str):
        return _xml_value(raw, declared_type) if declared_type else _json_or_text(raw)
    if item and all(key == item for key, _ in raw):
        return [_element_value(value, None, item) for _, value in raw]
    return {key: _element_value(value, None, item) for key, value in raw}


def _json_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _parameter_separator(text: str, key_at: int, syntax: ToolCallFormat) -> tuple[int, str]:
    """Where the parameter's key ends and the separator found there (the string or the JSON one)."""
    if not syntax.parameter_value_json and syntax.parameter_value:  # one separator
        return text.find(syntax.parameter_value, key_at), syntax.parameter_value
    # the first of the two (the longer where both start there); one search, which stops there: a find
    # of each would scan to the text's end for the one a call does not use (quadratic over many calls)
    if not syntax.parameter_value and not syntax.parameter_value_json:
        return -1, ""
    found = _either_separator(syntax.parameter_value, syntax.parameter_value_json).search(text, key_at)
    return (found.start(), found.group()) if found else (-1, syntax.parameter_value)


@functools.lru_cache(maxsize=64)
def _either_separator(*separators: str) -> re.Pattern:
    """A pattern matching any of the non-empty ``separators``, the longest first."""
    ordered = sorted(filter(None, separators), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, ordered)))


def _xml_value(raw: str, declared_type: Any) -> Any:
    """An XML-style argument value: verbatim for declared strings, else JSON when it parses."""
    if declared_type == "string":
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        # Templates print non-JSON scalars with Python's str(): True / False / None.
        return {"True": True, "False": False, "None": None}.get(raw, raw) if declared_type else raw


def _parameter_types(tools: list[dict] | None, name: str) -> dict[str, Any]:
    for tool in tools or []:
        function = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(function, dict) and function.get("name") == name:
            properties = (function.get("parameters") or {}).get("properties") or {}
            return {key: spec.get("type") for key, spec in properties.items() if isinstance(spec, dict)}
    return {}


def _tool_names(tools: list[dict] | None) -> set[str] | None:
    if not tools:
        return None
    names = set()
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def _identifier_end(text: str, position: int) -> int:
    while position < len(text) and (text[position].isalnum() or text[position] in "_-."):
        position += 1
    return position


def _skip(text: str, position: int, literal: str) -> int:
    return position + len(literal) if literal and text.startswith(literal, position) else position


def _skip_space(text: str, position: int) -> int:
    return _SPACE.match(text, position).end()


def _strip_prefix(text: str, prefix: str) -> str:
    return text[len(prefix) :] if prefix and text.startswith(prefix) else text


def _strip_suffix(text: str, suffix: str) -> str:
    return text[: -len(suffix)] if suffix and text.endswith(suffix) else text


class TokenIdsError(TypeError, ValueError):
    """Ids that are not a sequence of integers.  A ``TypeError``, and a ``ValueError`` too, which is what
    such input raised before, so callers that catch either keep working."""


#: Array element types that hold integers: numpy / torch dtype names (``int8`` ... ``uint64``) contain
#: "int"; ``array.array`` typecodes.
_INTEGER_TYPECODES = frozenset("bBhHiIlLqQ")


def token_sequence(token_ids: Any, what: str = "token_ids") -> list:
    """``token_ids`` as a Python list (numpy / torch / ``array.array`` converted once), elements unchecked.

    A sequence (list, tuple, ``range``, ...) or a one-dimensional integer array is accepted; anything
    else (a set, whose order is arbitrary; a string or bytes; a mapping; a scalar; a float, bool or
    2-d array) is a :class:`TokenIdsError` naming ``what``.
    """
    if isinstance(token_ids, (str, bytes, bytearray, memoryview, dict)):
        raise TokenIdsError(f"{what} must be a sequence of integers, got {type(token_ids).__name__}")
    if hasattr(token_ids, "tolist") and not isinstance(token_ids, (list, tuple)):  # numpy / torch / array.array
        dtype = getattr(token_ids, "dtype", None)
        kind = str(dtype) if dtype is not None else getattr(token_ids, "typecode", "")
        if not ("int" in kind or kind in _INTEGER_TYPECODES):
            raise TokenIdsError(f"{what} must be a sequence of integers, got an array of {kind}")
        dimensions = getattr(token_ids, "ndim", 1)
        if dimensions == 0:
            raise TokenIdsError(f"{what} must be a sequence of integers, got a scalar (a 0-d array)")
        if dimensions != 1:
            raise TokenIdsError(f"{what} must be a sequence of integers, got a {dimensions}-d array")
        return token_ids.tolist()  # one conversion to Python ints
    if not isinstance(token_ids, Sequence):  # a set (arbitrary order), an iterator, a number, None
        raise TokenIdsError(f"{what} must be a sequence of integers, got {type(token_ids).__name__}")
    return token_ids if type(token_ids) is list else list(token_ids)


def as_token_ids(token_ids: Any, what: str = "token_ids", vocab_size: int | None = None) -> list[int]:
    """``token_ids`` as a list of Python ints: any sequence of integers (list, tuple, numpy array,
    torch tensor, ``array.array``) is accepted; anything else is a :class:`TokenIdsError` (a
    ``TypeError``) naming ``what`` and, for an element, its position.

    ``vocab_size``: ids must also lie in ``[0, vocab_size)``; one outside is a ``ValueError`` naming
    ``what``, the position and the id (checked with ``min``/``max`` in C; positions are looked for
    only when one is out).
    """
    if type(token_ids) is list and set(map(type, token_ids)) <= _INT:  # the common case, checked in C
        ids = token_ids
    else:
        ids = token_sequence(token_ids, what)
        if not set(map(type, ids)) <= _INT:
            checked = []
            for index, token in enumerate(ids):
                if isinstance(token, bool) or not hasattr(token, "__index__"):
                    raise TokenIdsError(f"{what}[{index}] must be an integer, got {type(token).__name__} {token!r}")
                checked.append(operator.index(token))
            ids = checked
    if vocab_size is not None and ids and (min(ids) < 0 or max(ids) >= vocab_size):
        index, token = next((index, token) for index, token in enumerate(ids) if not 0 <= token < vocab_size)
        raise ValueError(
            f"{what}[{index}] is {token}, outside the tokenizer's vocabulary (ids 0 to {vocab_size - 1})"
        )
    return ids


def decoded_prefix_lengths(decode: Callable[[Sequence[int]], str], ids: list[int]) -> list[int]:
    """``lengths[k] == len(decode(ids[:k]).rstrip("\ufffd"))`` for every ``k``, in linear time.

    Incremental detokenization: ``ids[:read]`` is known to decode to ``emitted`` characters with
    no incomplete character at its end, and each step decodes only the window
    ``ids[window_start:k]`` (about two chunks), so the pass is linear in ``len(ids)``. A trailing
    incomplete character (U+FFFD) is not counted, as in the definition. Windowed decoding agrees
    with decoding the whole prefix for byte-level and SentencePiece decoders; should a decoder
    disagree, the lengths are recomputed prefix by prefix (exact, quadratic) rather than returned
    wrong.
    """
    lengths = [0]
    emitted = 0
    window_start = read = 0
    before = ""  # decode(ids[window_start:read])
    for k in range(1, len(ids) + 1):
        after = decode(ids[window_start:k])
        if not after.startswith(before):
            break
        complete = after.rstrip("\ufffd")
        lengths.append(emitted + max(len(complete) - len(before), 0))
        if len(complete) == len(after) and len(after) > len(before):
            emitted += len(after) - len(before)
            window_start, read = read, k
            before = decode(ids[window_start:read])
    if len(lengths) != len(ids) + 1 or lengths[-1] != len(decode(ids).rstrip("\ufffd")):
        lengths = [len(decode(ids[:k]).rstrip("\ufffd")) for k in range(len(ids) + 1)]
    return lengths


def token_index_at(lengths: list[int], char: int) -> int:
    """The smallest ``k`` whose prefix ``ids[:k]`` has produced ``char`` characters (the last
    index when none has).

    ``lengths`` (from :func:`decoded_prefix_lengths`) need not grow: a SentencePiece
    ``ByteFallback`` decoder turns a whole run of byte tokens into U+FFFDs once a token leaves
    the run invalid, so a prefix can show fewer characters than a shorter one.  The running
    maximum grows, and reaches ``char`` first where ``lengths`` does.
    """
    return min(bisect_left(list(accumulate(lengths, max)), char), len(lengths) - 1)


def char_to_token(decode: Callable[[Sequence[int]], str], ids: list[int]) -> Callable[..., int]:
    """``char -> token_index_at(decoded_prefix_lengths(decode, ids), char)`` (a second argument,
    a lower bound of the answer, is accepted and not needed).

    The prefix-decoding way, for tokenizers without a byte table
    (:mod:`rllm_renderers.encoding.detokenize`): one linear pass of windowed decodes, then a binary search
    per character over the running maximum.  A binary search over prefix decodes would decode
    less for a few tool calls, but is wrong where the lengths do not grow (see
    :func:`token_index_at`).
    """
    lengths = decoded_prefix_lengths(decode, ids)
    maxima = list(accumulate(lengths, max))
    last = len(lengths) - 1
    return lambda char, low=0: min(bisect_left(maxima, char), last)


def to_parsed_response(parse: TextParse, token_span) -> ParsedResponse:
    """Build the public result; ``token_span(start, end)`` maps a character span to tokens."""
    return ParsedResponse(
        content=parse.content,
        reasoning_content=parse.reasoning,
        tool_calls=[
            ParsedToolCall(
                raw=call.raw,
                name=call.name or None,
                arguments=call.arguments,
                token_span=token_span(call.start, call.end),
                status=call.status,
                id=call.id,
                reason=call.reason,
            )
            for call in parse.calls
        ],
        reasoning_complete=parse.reasoning_complete,
    )

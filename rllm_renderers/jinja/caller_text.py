"""Caller text: the strings of a message that came from the caller, and what the template makes of them.

Attribution (``render()``'s ``is_content`` and, for content written outside the message loop,
``message_indices``) and the control-token-safe mode need to know, for every character of a
render, whether it is a message's own text and whose. The template may write that text as it
is, trim or split it, concatenate it with its own literals into a variable, or build it in a
macro; so the mark travels with the value:

* every string of an input message but its role (content, content parts, reasoning, names,
  tool-call ids, names and arguments, the keys of dict arguments) is a :class:`CallerText`, whose
  *source* is itself;
* what the template derives from caller text by ``+``, slicing, ``strip``, ``split``, ``replace``,
  case changes, ``tojson`` (each string of the JSON where it stands), ``join`` and the like is a
  :class:`MarkedText`: a string with the character ranges that hold caller text, each with its
  source; ``| safe`` of it, and a Markup concatenation (which escapes), a :class:`MarkedMarkup`;
* what the render writes is scanned for both (:func:`marks_of`) only when attribution is asked
  for; the source's message is found by identity (:func:`sources_by_message`).

Both are :class:`~rllm_renderers.jinja.values.TemplateStr` (Jinja's lookups) and equal to the
plain string, so the text is exactly what plain strings give; only the marks are extra. An
operation this module does not know returns a plain ``str``: its text is right, and the mark is
lost (the attribution property test over every checked-in renderer would show it).
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

from markupsafe import Markup, escape

from .values import TemplateStr

__all__ = [
    "CallerText",
    "MarkedText",
    "MarkedMarkup",
    "MARKED_TYPES",
    "caller_data",
    "is_marked",
    "json_with_marks",
    "mark_safe",
    "marked_join",
    "marks_of",
    "sources_by_message",
]


class _Marks(TemplateStr):
    """The operations that keep marks (shared by :class:`CallerText` and :class:`MarkedText`)."""

    __slots__ = ()

    def __str__(self) -> str:  # str(x) / `x | string` keep the marks
        return self

    def __add__(self, other: Any) -> Any:
        if type(other) is not str and not isinstance(other, TemplateStr):
            # what str + other gives: other's own __radd__ first (Undefined raises Jinja's error, a
            # Markup escapes this text), else str's concatenation or its TypeError
            reflected = getattr(type(other), "__radd__", None)
            result = NotImplemented if reflected is None else reflected(other, self)
            if result is NotImplemented:
                return str.__add__(self, other)
            if type(result) is Markup:  # a Markup escaped this text: its marks stand where it was kept
                return marked_markup(result, _escaped_marks(self, 0, len(result) - len(other)))
            return result
        text = str.__add__(self, other)
        return _marked(text, _shifted(marks_of(self), 0) + _shifted(marks_of(other), len(self)))

    def __radd__(self, other: Any) -> Any:
        if not isinstance(other, str):
            raise TypeError(f"unsupported operand type(s) for +: '{type(other).__name__}' and 'str'")
        return _marked(str.__add__(other, self), _shifted(marks_of(other), 0) + _shifted(marks_of(self), len(other)))

    def __getitem__(self, index: Any) -> Any:
        value = TemplateStr.__getitem__(self, index)
        if type(value) is not TemplateStr:  # an Undefined, or a method looked up as an item
            return value
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return value
            sliced = _slice(self, start, max(start, stop))
        elif isinstance(index, int):
            position = index + len(self) if index < 0 else index
            sliced = _slice(self, position, position + 1)
        else:
            return value
        return sliced if isinstance(sliced, _Marks) else value

    def strip(self, chars: Any = None) -> Any:
        start = len(self) - len(str.lstrip(self, chars))
        return _slice(self, start, max(start, len(str.rstrip(self, chars))))

    def lstrip(self, chars: Any = None) -> Any:
        return _slice(self, len(self) - len(str.lstrip(self, chars)), len(self))

    def rstrip(self, chars: Any = None) -> Any:
        return _slice(self, 0, len(str.rstrip(self, chars)))

    def split(self, sep: Any = None, maxsplit: int = -1) -> list:
        return _located(self, str.split(self, sep, maxsplit), sep)

    def rsplit(self, sep: Any = None, maxsplit: int = -1) -> list:
        return _located(self, str.rsplit(self, sep, maxsplit), sep)

    def splitlines(self, keepends: bool = False) -> list:
        return _located(self, str.splitlines(self, keepends), None)

    def partition(self, sep: Any) -> tuple:
        return tuple(_located(self, list(str.partition(self, sep)), ""))

    def rpartition(self, sep: Any) -> tuple:
        return tuple(_located(self, list(str.rpartition(self, sep)), ""))

    def replace(self, old: Any, new: Any, count: int = -1) -> Any:
        text = str.replace(self, old, new, count)
        if not old or old == new:
            return _same_length_or_whole(self, text)
        pieces = str.split(self, old, count)
        result, at = [], 0
        for position, piece in enumerate(pieces):
            if position:
                # the new text stands where the old one was: it is the caller's where the old one was
                result.append(new if is_marked(new) else _covering(self, at - len(old), at, new))
            result.append(_slice(self, at, at + len(piece)))
            at += len(piece) + len(old)
        return marked_join("", result)

    def upper(self) -> Any:
        return _same_length_or_whole(self, str.upper(self))

    def lower(self) -> Any:
        return _same_length_or_whole(self, str.lower(self))

    def title(self) -> Any:
        return _same_length_or_whole(self, str.title(self))

    def capitalize(self) -> Any:
        return _same_length_or_whole(self, str.capitalize(self))

    def __iter__(self):
        return (self[position] for position in range(len(self)))


class CallerText(_Marks):
    """A string of an input message (not its role): caller text, its own source."""

    __slots__ = ()


class MarkedText(_Marks):
    """A string some of whose characters are caller text: ``marks`` are ``(start, end, source)``."""

    marks: tuple

    def __reduce__(self):
        return (str, (str(str.__str__(self)),))


class MarkedMarkup(Markup):
    """A Markup (``| safe``) some of whose characters are caller text (``marks`` as in :class:`MarkedText`).

    Markup's own operations build the result with ``self.__class__``: those without marks
    computed here have none (the class default)."""

    marks: tuple = ()

    def __str__(self) -> str:  # str(markup) is its plain text: marks kept
        return _marked(str.__str__(self), self.marks)

    def __add__(self, other: Any) -> Any:
        result = Markup.__add__(self, other)
        if result is NotImplemented:
            return result
        return marked_markup(result, self.marks + _escaped_marks(other, len(self), len(result) - len(self)))

    def __radd__(self, other: Any) -> Any:
        result = Markup.__radd__(self, other)
        if result is NotImplemented:
            return result
        escaped = len(result) - len(self)
        return marked_markup(result, _escaped_marks(other, 0, escaped) + _shifted(self.marks, escaped))


def marked_markup(markup: Markup, marks: tuple) -> Markup:
    """``markup`` with ``marks`` (a plain Markup when there are none)."""
    if not marks:
        return Markup(markup) if type(markup) is not Markup else markup
    result = MarkedMarkup(markup)
    result.marks = marks
    return result


def _escaped_marks(value: Any, by: int, length: int) -> tuple:
    """The marks of ``value`` where a Markup concatenation writes it (``length`` characters, escaped
    unless it is a Markup), shifted ``by``: as they are where escaping kept its length, else
    moved to where the escaped text of their characters stands (escaping is character by character)."""
    marks = marks_of(value)
    if not marks or length == len(value):
        return _shifted(marks, by)
    plain = str.__str__(value)
    return tuple((by + len(escape(plain[:low])), by + len(escape(plain[:high])), source) for low, high, source in marks)


def mark_safe(value: Any) -> Markup:
    """``value | safe``, keeping the marks of caller text in it."""
    return marked_markup(Markup(value), marks_of(value))


def is_marked(value: Any) -> bool:
    return isinstance(value, (_Marks, MarkedMarkup))


def marks_of(value: Any) -> tuple:
    """The ``(start, end, source)`` ranges of caller text in ``value`` (none for a plain string)."""
    kind = type(value)
    if kind is CallerText:
        return ((0, len(value), value),) if value else ()
    if kind is MarkedText or kind is MarkedMarkup:
        return value.marks
    return ()


def _shifted(marks: tuple, by: int) -> tuple:
    return marks if not by else tuple((start + by, end + by, source) for start, end, source in marks)


def _marked(text: str, marks: tuple) -> Any:
    """``text`` with ``marks`` (a plain str when there are none)."""
    if not marks:
        return text
    if len(marks) == 1 and marks[0][0] == 0 and marks[0][1] == len(text) and str.__eq__(marks[0][2], text):
        return marks[0][2]  # the caller's own string, whole
    result = MarkedText(text)
    result.marks = marks
    return result


def _slice(value: Any, start: int, stop: int) -> Any:
    text = str.__getitem__(value, slice(start, stop))
    marks = tuple(
        (max(low, start) - start, min(high, stop) - start, source)
        for low, high, source in marks_of(value)
        if low < stop and high > start and min(high, stop) > max(low, start)
    )
    return _marked(text, marks)


def _located(value: Any, pieces: list, sep: Any) -> list:
    """``pieces`` of ``value`` (in order) with the marks of where each stands in it."""
    located, at = [], 0
    for piece in pieces:
        found = str.find(value, piece, at) if sep is None or sep == "" else at
        found = at if found < 0 else found
        located.append(_slice(value, found, found + len(piece)))
        at = found + len(piece) + (len(sep) if sep else 0)
    return located


def _covering(value: Any, start: int, stop: int, text: str) -> Any:
    """``text`` marked as the source whose caller text covers ``value[start:stop]`` whole, if one does."""
    for low, high, source in marks_of(value):
        if low <= start and stop <= high:
            return _marked(text, ((0, len(text), source),)) if text else text
    return text


def _same_length_or_whole(value: Any, text: str) -> Any:
    """A case change (or a no-op replace): the same marks where the length is unchanged, else the
    whole text the caller's where ``value`` was wholly one source's."""
    if len(text) == len(value):
        return _marked(text, marks_of(value))
    marks = marks_of(value)
    if len(marks) == 1 and marks[0][:2] == (0, len(value)):
        return _marked(text, ((0, len(text), marks[0][2]),))
    return text


def marked_join(separator: Any, items: Iterable[Any]) -> Any:
    """``separator.join(items)`` keeping the marks of the separator and of every item."""
    items = items if isinstance(items, list) else list(items)
    text = separator.join(items)  # (a Markup separator escapes the items: its text, unmarked)
    if type(text) is not str or (not is_marked(separator) and MARKED_TYPES.isdisjoint(map(type, items))):
        return text
    marks: list = []
    at, gap, step = 0, marks_of(separator), len(separator)
    for position, item in enumerate(items):
        if position:
            if gap:
                marks.extend(_shifted(gap, at))
            at += step
        if type(item) in MARKED_TYPES:
            marks.extend(_shifted(marks_of(item), at))
        at += len(item)
    return _marked(text, tuple(marks))


def holds_caller_text(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is or holds (keys included) caller text."""
    if type(value) in MARKED_TYPES:
        return True
    if depth > 64:
        return False
    if isinstance(value, dict):
        return any(
            holds_caller_text(key, depth + 1) or holds_caller_text(item, depth + 1) for key, item in value.items()
        )
    if isinstance(value, (list, tuple)):
        return any(holds_caller_text(item, depth + 1) for item in value)
    return False


class NotPlainJson(Exception):
    """A value :func:`json_marks` leaves unmarked (``json.dumps`` writes it, or refuses it)."""


def json_with_marks(value: Any, text: str, ensure_ascii: bool, indent: Any, separators: Any, sort_keys: bool) -> Any:
    """``text`` (``json.dumps`` of ``value`` with these options) with the marks of the caller text
    in ``value``: each string's JSON text (between its quotes) is marked where the string was.
    ``text`` as it is when ``value`` holds none, or is not plain JSON data."""
    if not holds_caller_text(value):
        return text
    try:
        marked = json_marks(value, ensure_ascii, indent, separators, sort_keys)
    except (NotPlainJson, RecursionError, TypeError):
        return text
    return marked if str.__eq__(marked, text) else text  # (never other text than json.dumps')


def json_marks(value: Any, ensure_ascii: bool, indent: Any, separators: Any, sort_keys: bool) -> Any:
    """``json.dumps(value, ...)`` written piece by piece, each string a piece keeping its marks."""
    if indent is not None and not isinstance(indent, str):
        indent = " " * indent
    default_separators = (", ", ": ") if indent is None else (",", ": ")
    item_separator, key_separator = separators if separators is not None else default_separators
    quote = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    parts: list[Any] = []

    def string(item: str) -> None:
        quoted = quote(item)
        inner = quoted[1:-1]
        marks = marks_of(item)
        if len(inner) != len(item):  # escaped: the caller's whole where the string was one source's
            whole = len(marks) == 1 and marks[0][:2] == (0, len(item))
            marks = ((0, len(inner), marks[0][2]),) if whole else ()
        parts.extend(('"', _marked(inner, marks), '"'))

    def write(item: Any, level: int) -> None:
        if isinstance(item, str):
            string(item)
        elif item is None or item is True or item is False or type(item) in (int, float):
            if type(item) is float and not math.isfinite(item):
                raise NotPlainJson
            parts.append(json.dumps(item))
        elif isinstance(item, (dict, list, tuple)):
            is_object = isinstance(item, dict)
            if not item:
                parts.append("{}" if is_object else "[]")
                return
            if level > 64:
                raise NotPlainJson
            inner = "" if indent is None else "\n" + indent * (level + 1)
            parts.append("{" if is_object else "[")
            members = (sorted(item.items()) if sort_keys else list(item.items())) if is_object else list(item)
            for position, member in enumerate(members):
                parts.append(inner if not position else item_separator + inner)
                if is_object:
                    key, member = member
                    if not isinstance(key, str):
                        raise NotPlainJson
                    string(key)
                    parts.append(key_separator)
                write(member, level + 1)
            parts.append(("" if indent is None else "\n" + indent * level) + ("}" if is_object else "]"))
        else:
            raise NotPlainJson

    write(value, 0)
    return marked_join("", parts)


#: Fields whose value is structure, not text (what kind of part or call it is): never caller text.
STRUCTURAL_FIELDS = frozenset(("role", "type"))


def caller_data(value: Any, in_arguments: bool = False) -> Any:
    """``value`` with every string in it a :class:`CallerText`, but the values of
    :data:`STRUCTURAL_FIELDS`; dict keys only inside tool-call arguments (argument names are text the
    model writes; ``"name"`` or ``"content"`` are structure). Containers are copied as dicts and
    lists, for ``template_data`` to wrap."""
    if isinstance(value, str):
        return value if type(value) is CallerText else CallerText(value)
    if isinstance(value, dict):
        return {
            (caller_data(key) if in_arguments and isinstance(key, str) else key): (
                item
                if key in STRUCTURAL_FIELDS and not in_arguments
                else caller_data(item, in_arguments or key == "arguments")
            )
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [caller_data(item, in_arguments) for item in value]
    return value


def sources_by_message(messages: Iterable[Any]) -> dict[int, int]:
    """``id(source) -> message index`` for every piece of caller text in the messages."""
    found: dict[int, int] = {}
    for index, message in enumerate(messages):
        todo = [message]
        while todo:
            item = todo.pop()
            if type(item) is CallerText:
                found[id(item)] = index
            elif isinstance(item, dict):
                todo.extend(item.keys())
                todo.extend(item.values())
            elif isinstance(item, (list, tuple)):
                todo.extend(item)
    return found


#: The types whose instances carry marks (what a render's parts are scanned for).
MARKED_TYPES = frozenset((CallerText, MarkedText, MarkedMarkup))

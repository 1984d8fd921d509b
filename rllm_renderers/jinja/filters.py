"""Jinja's builtin filters (``x | trim``, ``xs | map(attribute="name")``) as Python functions.

Each filter is a function of the value first, then the filter's own positional and keyword
arguments, with jinja2 3.1.6's names and defaults, and behaves as it does in transformers'
chat-template environment (``ImmutableSandboxedEnvironment``, autoescape off, transformers'
``tojson``) on every input: Undefined, Markup (``| safe``), None, strings iterated as
characters, dicts iterated as keys.

What a reader of generated code should know:

* Like Jinja, ``select``, ``reject``, ``selectattr``, ``rejectattr``, ``map``, ``unique``,
  ``items``, ``batch`` and ``slice`` return generators: lazy, single-pass, always truthy
  (``{% if xs | select("odd") %}`` is true even when nothing is selected), without ``len``.
  ``reverse`` returns a reverse iterator (also always truthy) except on strings.
* Where Jinja returns a list (``sort``, ``list``, ``dictsort``, ``groupby``, ``batch``'s rows)
  the list is a :class:`~rllm_renderers.jinja.values.TemplateList`, so a missing index
  reads as Undefined as it does in Jinja.
* Errors Jinja raises as its own exceptions (a filter argument it refuses, an Undefined used)
  raise :class:`~rllm_renderers.jinja.values.TemplateError` with Jinja's message; errors
  Jinja lets Python raise (``TypeError``, ...) are raised as they are.

The filters that look another filter or a test up by name (``map``, ``select`` and the like) and
the name tables themselves are in :mod:`.builtins`.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain
from itertools import groupby as _groupby
from typing import Any, Callable, NamedTuple

from markupsafe import Markup
from markupsafe import escape as _markup_escape

from .caller_text import CallerText, MarkedText, json_with_marks, marked_join
from .caller_text import mark_safe as marked_safe
from .values import (
    TemplateDict,
    TemplateError,
    TemplateList,
    TemplateStr,
    Undefined,
    attribute_getter,
    getattr_only,
    ignore_case,
    multi_attribute_getter,
    name_type_as_jinja_does,
    soft_str,
)

__all__ = [
    "STR_FILTERS",
    "MARKUP_FILTERS",
    "MARKUP_KEEPING_FILTERS",
    "GroupTuple",
    "attr",
    "batch",
    "capitalize",
    "center",
    "default",
    "dictsort",
    "escape",
    "filesizeformat",
    "filter_abs",
    "filter_format",
    "filter_max",
    "filter_min",
    "filter_round",
    "filter_slice",
    "filter_sum",
    "first",
    "forceescape",
    "groupby",
    "indent",
    "items",
    "join",
    "last",
    "length",
    "lower",
    "mark_safe",
    "pprint",
    "replace",
    "reverse",
    "sort",
    "striptags",
    "title",
    "to_float",
    "to_int",
    "to_list",
    "tojson",
    "trim",
    "truncate",
    "unique",
    "upper",
    "urlencode",
    "urlize",
    "wordcount",
    "wordwrap",
    "xmlattr",
]


# --- strings ---------------------------------------------------------------------------


def trim(value: Any, chars: str | None = None) -> str:
    """``value | trim(chars)``: strip whitespace (or ``chars``) from both ends; keeps a Markup."""
    return soft_str(value).strip(chars)


def upper(value: Any) -> str:
    """``value | upper``."""
    return soft_str(value).upper()


def lower(value: Any) -> str:
    """``value | lower``."""
    return soft_str(value).lower()


def capitalize(value: Any) -> str:
    """``value | capitalize``: first character upper case, the rest lower case."""
    return soft_str(value).capitalize()


_WORD_BEGINNING_SPLIT = re.compile(r"([-\s({\[<]+)")


def title(value: Any) -> str:
    """``value | title`` (Jinja's word-boundary rule: after spaces, hyphens and brackets)."""
    return "".join(
        [item[0].upper() + item[1:].lower() for item in _WORD_BEGINNING_SPLIT.split(soft_str(value)) if item]
    )


def center(value: Any, width: int = 80) -> str:
    """``value | center(width)``."""
    return soft_str(value).center(width)


def replace(value: Any, old: Any, new: Any, count: int | None = None) -> str:
    """``value | replace(old, new[, count])`` (a plain str: autoescape is off)."""
    return str(value).replace(str(old), str(new), -1 if count is None else count)


def indent(value: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    """``value | indent(width, first, blank)``: indent every line but the first (and blank ones).

    ``width`` is a number of spaces or the indentation string itself. Lines are split as
    ``str.splitlines`` splits them (``\\r``, ``\\x0b``, ``\\u2028``, ... too) and joined with ``\\n``.
    """
    indentation = width if isinstance(width, str) else " " * width
    newline = "\n"
    if isinstance(value, Markup):
        indentation = Markup(indentation)
        newline = Markup(newline)
    value += newline  # Jinja's quirk: a trailing newline makes splitlines keep a last empty line
    # (joined with marked_join: the caller text of every line keeps its marks)
    if blank:
        result = marked_join(newline + indentation, value.splitlines())
    else:
        lines = value.splitlines()
        result = lines.pop(0)
        if lines:
            result += newline + marked_join(newline, [indentation + line if line else line for line in lines])
    if first:
        result = indentation + result
    return result


def truncate(
    value: Any, length: int = 255, killwords: bool = False, end: str = "...", leeway: int | None = None
) -> str:
    """``value | truncate(length, killwords, end, leeway)`` (Jinja's default leeway is 5)."""
    if leeway is None:
        leeway = 5
    if not length >= len(end):
        raise TemplateError(f"expected length >= {len(end)}, got {length}")
    if not leeway >= 0:
        raise TemplateError(f"expected leeway >= 0, got {leeway}")
    if len(value) <= length + leeway:
        return value
    if killwords:
        return value[: length - len(end)] + end
    return value[: length - len(end)].rsplit(" ", 1)[0] + end


def wordwrap(
    value: Any,
    width: int = 79,
    break_long_words: bool = True,
    wrapstring: str | None = None,
    break_on_hyphens: bool = True,
) -> str:
    """``value | wordwrap(width, ...)``: ``textwrap.wrap`` applied to each line separately."""
    import textwrap

    if wrapstring is None:
        wrapstring = "\n"
    return wrapstring.join(
        [
            wrapstring.join(
                textwrap.wrap(
                    line,
                    width=width,
                    expand_tabs=False,
                    replace_whitespace=False,
                    break_long_words=break_long_words,
                    break_on_hyphens=break_on_hyphens,
                )
            )
            for line in value.splitlines()
        ]
    )


_WORD = re.compile(r"\w+")


def wordcount(value: Any) -> int:
    """``value | wordcount``: the number of ``\\w+`` runs."""
    return len(_WORD.findall(soft_str(value)))


def filter_format(value: Any, *args: Any, **kwargs: Any) -> str:
    """``value | format(...)``: printf-style ``%`` formatting (positional or keyword, not both)."""
    if args and kwargs:
        raise TemplateError("can't handle positional and keyword arguments at the same time")
    return soft_str(value) % (kwargs or args)


def striptags(value: Any) -> str:
    """``value | striptags``: drop SGML/XML tags, unescape entities, collapse whitespace."""
    if hasattr(value, "__html__"):
        value = value.__html__()
    return Markup(str(value)).striptags()


def escape(value: Any) -> Markup:
    """``value | escape`` / ``e``: HTML-escape into a Markup (a Markup is kept as it is)."""
    return _markup_escape(value)


def forceescape(value: Any) -> Markup:
    """``value | forceescape``: HTML-escape, even a Markup."""
    if hasattr(value, "__html__"):
        value = value.__html__()
    return _markup_escape(str(value))


def mark_safe(value: Any) -> Markup:
    """``value | safe``: a ``markupsafe.Markup``, as Jinja returns.

    It matters: ``"<" + markup`` escapes the plain operand, exactly as in Jinja.
    """
    return marked_safe(value)


def _url_quote(value: Any, for_query: bool = False) -> str:
    from urllib.parse import quote_from_bytes

    if not isinstance(value, bytes):
        value = (value if isinstance(value, str) else str(value)).encode("utf-8")
    quoted = quote_from_bytes(value, b"" if for_query else b"/")
    return quoted.replace("%20", "+") if for_query else quoted


def urlencode(value: Any) -> str:
    """``value | urlencode``: percent-encode a string, or a dict / pairs as a query string."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        return _url_quote(value)
    pairs = value.items() if isinstance(value, dict) else iter(value)
    return "&".join(f"{_url_quote(key, True)}={_url_quote(item, True)}" for key, item in pairs)


_XML_ATTRIBUTE_KEY_FORBIDDEN = re.compile(r"[\s/>=]", flags=re.ASCII)


def xmlattr(value: Mapping, autospace: bool = True) -> str:
    """``value | xmlattr``: ``key="value"`` pairs, escaped, skipping None and Undefined values."""
    pairs = []
    for key, item in value.items():
        if item is None or isinstance(item, Undefined):
            continue
        if _XML_ATTRIBUTE_KEY_FORBIDDEN.search(key) is not None:
            raise ValueError(f"Invalid character in attribute name: {key!r}")
        pairs.append(f'{_markup_escape(key)}="{_markup_escape(item)}"')
    result = " ".join(pairs)
    return " " + result if autospace and result else result


def filesizeformat(value: Any, binary: bool = False) -> str:
    """``value | filesizeformat(binary)``: ``"1.5 kB"``, ``"2.0 MiB"``, ``"1 Byte"``, ``"12 Bytes"``."""
    size = float(value)
    base = 1024 if binary else 1000
    prefixes = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"]
    if not binary:
        prefixes = ["kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"]
    if size == 1:
        return "1 Byte"
    if size < base:
        return f"{int(size)} Bytes"
    for position, prefix in enumerate(prefixes):
        unit = base ** (position + 2)
        if size < unit:
            break
    return f"{base * size / unit:.1f} {prefix}"


def pprint(value: Any) -> str:
    """``value | pprint``: ``pprint.pformat``."""
    from pprint import pformat

    return pformat(value)


def tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson``: ``json.dumps`` without HTML escaping, non-ASCII kept by default."""
    kind = type(value)
    if kind is not TemplateDict and kind is not TemplateList:
        text = _json_text(value, ensure_ascii, indent, separators, sort_keys)
        return json_with_marks(value, text, ensure_ascii, indent, separators, sort_keys) if kind is not str else text
    # The template's own copies of the input (template_data) never change: the bridge renders the
    # same converted history turn after turn, so their text is remembered by identity.
    options = (ensure_ascii, indent, separators, sort_keys)
    remembered = _JSON_OF_WRAPPED.get(id(value))
    if remembered is not None and remembered[0] is value and remembered[1] == options:
        return remembered[2]
    text = _json_text(value, ensure_ascii, indent, separators, sort_keys)
    # a message's strings keep their marks in the JSON (the arguments of a tool call)
    text = json_with_marks(value, text, ensure_ascii, indent, separators, sort_keys)
    if len(_JSON_OF_WRAPPED) >= _JSON_REMEMBERED:
        _JSON_OF_WRAPPED.clear()
    _JSON_OF_WRAPPED[id(value)] = (value, options, text)  # (the value is held: its id is not reused)
    return text


#: id -> (TemplateDict / TemplateList, tojson options, text); cleared when full.
_JSON_OF_WRAPPED: dict[int, tuple[Any, tuple, str]] = {}
_JSON_REMEMBERED = 4096


def _json_text(value: Any, ensure_ascii: bool, indent: int | str | None, separators, sort_keys: bool) -> str:
    if indent is not None and not sort_keys:  # json.dumps writes indented JSON in pure Python, slowly
        try:
            return _indented_json(value, indent, ensure_ascii, separators)
        except _NotPlainJson:
            pass  # json.dumps writes (or refuses) everything else
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _NotPlainJson(Exception):
    """A value ``_indented_json`` leaves to ``json.dumps``."""


_JSON_STRINGS = (str, TemplateStr, CallerText, MarkedText)
_JSON_OBJECTS = (dict, TemplateDict)
_JSON_ARRAYS = (list, TemplateList, tuple)
_JSON_DEPTH = 64  # deeper (or circular) data goes to json.dumps, which refuses a cycle


def _indented_json(
    value: Any, indent: int | str, ensure_ascii: bool, separators: tuple[str, str] | None
) -> str:
    """``json.dumps(value, indent=..., ensure_ascii=..., separators=...)`` for plain JSON data: the
    same text, built by one recursive function over a list of parts instead of json's generators.

    Plain: objects with string keys, arrays, strings, exact ints and finite floats, booleans,
    None (dict / list / str subclasses: only the template wrappers).  Anything else raises
    :class:`_NotPlainJson`; :func:`tojson` then calls ``json.dumps`` itself.
    """
    indent = indent if isinstance(indent, str) else " " * indent
    item_separator, key_separator = separators if separators is not None else (",", ": ")
    quote = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    parts: list[str] = []
    append = parts.append

    def write(item: Any, level: int) -> None:
        kind = type(item)
        if kind in _JSON_STRINGS:
            append(quote(item))
        elif item is None:
            append("null")
        elif item is True:
            append("true")
        elif item is False:
            append("false")
        elif kind is int:
            append(int.__repr__(item))
        elif kind is float and math.isfinite(item):
            append(float.__repr__(item))
        elif kind in _JSON_OBJECTS or kind in _JSON_ARRAYS:
            if not item:
                append("{}" if kind in _JSON_OBJECTS else "[]")
                return
            if level >= _JSON_DEPTH:
                raise _NotPlainJson
            inner = "\n" + indent * (level + 1)
            if kind in _JSON_OBJECTS:
                append("{")
                for position, (key, member) in enumerate(item.items()):
                    if type(key) not in _JSON_STRINGS:
                        raise _NotPlainJson
                    append(inner if not position else item_separator + inner)
                    append(quote(key))
                    append(key_separator)
                    write(member, level + 1)
                append("\n" + indent * level + "}")
            else:
                append("[")
                for position, member in enumerate(item):
                    append(inner if not position else item_separator + inner)
                    write(member, level + 1)
                append("\n" + indent * level + "]")
        else:
            raise _NotPlainJson

    write(value, 0)
    return "".join(parts)


@functools.cache
def _urlize_patterns() -> tuple[re.Pattern, re.Pattern, re.Pattern, re.Pattern, re.Pattern]:
    """urlize's regular expressions: a URL, an e-mail address, a scheme prefix, leading/trailing punctuation."""
    url = re.compile(
        r"""
        ^
        (
            (https?://|www\.)([\w%-]+\.)*([a-z]{2,63}|xn--[\w%]{2,59})  # scheme or www, domain, tld
        |
            ([\w%-]{2,63}\.)+(com|net|int|edu|gov|org|info|mil)  # bare domain with a common tld
        |
            (https?://)((\d{1,3})(\.\d{1,3}){3}|(\[([\da-f]{0,4}:){2}([\da-f]{0,4}:?){1,6}]))  # IPv4 / IPv6
        )
        (?::\d{1,5})?  # port
        (?:[/?#]\S*)?  # path, query, fragment
        $
        """,
        re.IGNORECASE | re.VERBOSE,
    )
    email = re.compile(r"^\S+@\w[\w.-]*\.\w+$")
    scheme = re.compile(r"^([\w.+-]{2,}:(/){0,2})$")
    return url, email, scheme, re.compile(r"^([(<]|&lt;)+"), re.compile(r"([)>.,\n]|&gt;)+$")


def urlize(
    value: Any,
    trim_url_limit: int | None = None,
    nofollow: bool = False,
    target: str | None = None,
    rel: str | None = None,
    extra_schemes: Iterable[str] | None = None,
) -> str:
    """``value | urlize(...)``: HTML-escape the text and turn URLs and e-mail addresses into links.

    Links get ``rel="noopener"`` (Jinja's default policy) plus ``nofollow`` / ``rel``; surrounding
    punctuation and unbalanced brackets stay outside the link.
    """
    url_pattern, email_pattern, scheme_pattern, leading_pattern, trailing_pattern = _urlize_patterns()
    rel_words = set((rel or "").split()) | {"noopener"}
    if nofollow:
        rel_words.add("nofollow")
    rel = " ".join(sorted(rel_words))
    for scheme in extra_schemes or ():
        if scheme_pattern.fullmatch(scheme) is None:
            raise TemplateError(f"{scheme!r} is not a valid URI scheme prefix.")

    def shorten(url: str) -> str:
        if trim_url_limit is not None and len(url) > trim_url_limit:
            return f"{url[:trim_url_limit]}..."
        return url

    attributes = f' rel="{_markup_escape(rel)}"' + (f' target="{_markup_escape(target)}"' if target else "")
    words = re.split(r"(\s+)", str(_markup_escape(value)))
    for position, word in enumerate(words):
        head, middle, tail = "", word, ""
        leading = leading_pattern.match(middle)
        if leading:
            head, middle = leading.group(), middle[leading.end() :]
        if middle.endswith((")", ">", ".", ",", "\n", "&gt;")):
            trailing = trailing_pattern.search(middle)
            if trailing:
                tail, middle = trailing.group(), middle[: trailing.start()]
        # A closing bracket that balances one inside the URL belongs to it.
        for opening, closing in ("(", ")"), ("<", ">"), ("&lt;", "&gt;"):
            opened = middle.count(opening)
            if opened <= middle.count(closing):
                continue
            for _ in range(min(opened, tail.count(closing))):
                end = tail.index(closing) + len(closing)
                middle, tail = middle + tail[:end], tail[end:]
        if url_pattern.match(middle):
            href = middle if middle.startswith(("https://", "http://")) else f"https://{middle}"
            middle = f'<a href="{href}"{attributes}>{shorten(middle)}</a>'
        elif middle.startswith("mailto:") and email_pattern.match(middle[7:]):
            middle = f'<a href="{middle}">{middle[7:]}</a>'
        elif (
            "@" in middle and not middle.startswith(("www.", "@")) and ":" not in middle and email_pattern.match(middle)
        ):
            middle = f'<a href="mailto:{middle}">{middle}</a>'
        else:
            for scheme in extra_schemes or ():
                if middle != scheme and middle.startswith(scheme):
                    middle = f'<a href="{middle}"{attributes}>{middle}</a>'
        words[position] = f"{head}{middle}{tail}"
    return "".join(words)


# --- conversions -----------------------------------------------------------------------


def to_int(value: Any, default: Any = 0, base: int = 10) -> Any:
    """``value | int(default, base)``: ``"42"`` and ``"42.7"`` give 42; what cannot convert, ``default``."""
    try:
        if isinstance(value, str):
            return int(value, base)
        return int(value)
    except TemplateError:  # an Undefined used as a number (a ValueError here, not in Jinja)
        raise
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return default


def to_float(value: Any, default: Any = 0.0) -> Any:
    """``value | float(default)``."""
    try:
        return float(value)
    except TemplateError:
        raise
    except (TypeError, ValueError):
        return default


def to_list(value: Any) -> TemplateList:
    """``value | list``: a string gives its characters, a dict its keys."""
    return TemplateList(value)


def filter_abs(value: Any) -> Any:
    """``value | abs``."""
    return abs(value)


def filter_round(value: Any, precision: int = 0, method: str = "common") -> Any:
    """``value | round(precision, method)``: ``common`` is Python's ``round`` (an int stays an int)."""
    if method not in {"common", "ceil", "floor"}:
        raise TemplateError("method must be common, ceil or floor")
    if method == "common":
        return round(value, precision)
    return getattr(math, method)(value * (10**precision)) / (10**precision)


def default(value: Any, default_value: Any = "", boolean: bool = False) -> Any:
    """``value | default(default_value, boolean)`` / ``d``: ``default_value`` when Undefined (or falsy)."""
    if isinstance(value, Undefined) or (boolean and not value):
        return default_value
    return value


def attr(value: Any, name: Any) -> Any:
    """``value | attr(name)``: the attribute only, never an item; the sandbox's refusals read as an
    Undefined whose use raises ("access to attribute 'append' of 'list' object is unsafe.")."""
    return getattr_only(value, name)


# --- sequences -------------------------------------------------------------------------


def length(value: Any) -> int:
    """``value | length`` / ``count``."""
    return len(value)


def first(value: Any) -> Any:
    """``value | first``: Undefined when empty."""
    for item in value:
        return item
    return Undefined(hint="No first item, sequence was empty.")


def last(value: Any) -> Any:
    """``value | last``: Undefined when empty (a generator is refused, as in Jinja)."""
    for item in reversed(value):
        return item
    return Undefined(hint="No last item, sequence was empty.")


def join(value: Any, separator: Any = "", attribute: Any = None) -> str:
    """``value | join(separator, attribute)`` (a plain str: autoescape is off)."""
    if attribute is not None:
        value = map(attribute_getter(attribute), value)
    return marked_join(str(separator), list(map(str, value)))


def reverse(value: Any) -> Any:
    """``value | reverse``: a reversed string, else a reverse iterator (else a reversed list)."""
    if isinstance(value, str):
        return value[::-1]
    try:
        return reversed(value)
    except TypeError:
        try:
            items = list(value)
        except TypeError as exc:
            raise TemplateError("argument must be iterable") from exc
        items.reverse()
        return TemplateList(items)


def items(value: Any) -> Iterator[tuple[Any, Any]]:
    """``value | items``: a mapping's (key, value) pairs; nothing for Undefined."""
    if isinstance(value, Undefined):
        return
    if not isinstance(value, Mapping):
        raise TypeError("Can only get item pairs from a mapping.")
    yield from value.items()


def dictsort(value: Mapping, case_sensitive: bool = False, by: str = "key", reverse: bool = False) -> TemplateList:
    """``value | dictsort(case_sensitive, by, reverse)``: (key, value) pairs, case-insensitive by default."""
    if by == "key":
        position = 0
    elif by == "value":
        position = 1
    else:
        raise TemplateError('You can only sort by either "key" or "value"')

    def sort_key(pair: tuple[Any, Any]) -> Any:
        return pair[position] if case_sensitive else ignore_case(pair[position])

    return TemplateList(sorted(value.items(), key=sort_key, reverse=reverse))


def sort(value: Any, reverse: bool = False, case_sensitive: bool = False, attribute: Any = None) -> TemplateList:
    """``value | sort(reverse, case_sensitive, attribute)``; ``attribute="a,b.c"`` sorts by several."""
    key = multi_attribute_getter(attribute, None if case_sensitive else ignore_case)
    return TemplateList(sorted(value, key=key, reverse=reverse))


def unique(value: Any, case_sensitive: bool = False, attribute: Any = None) -> Iterator[Any]:
    """``value | unique(case_sensitive, attribute)``: first occurrences, in order (a generator)."""
    key = attribute_getter(attribute, None if case_sensitive else ignore_case)
    seen: set = set()
    for item in value:
        item_key = key(item)
        if item_key not in seen:
            seen.add(item_key)
            yield item


def _min_or_max(value: Any, choose: Callable, case_sensitive: bool, attribute: Any) -> Any:
    iterator = iter(value)
    try:
        head = next(iterator)
    except StopIteration:
        return Undefined(hint="No aggregated item, sequence was empty.")
    key = attribute_getter(attribute, None if case_sensitive else ignore_case)
    return choose(chain([head], iterator), key=key)


def filter_min(value: Any, case_sensitive: bool = False, attribute: Any = None) -> Any:
    """``value | min(case_sensitive, attribute)``: Undefined when empty."""
    return _min_or_max(value, min, case_sensitive, attribute)


def filter_max(value: Any, case_sensitive: bool = False, attribute: Any = None) -> Any:
    """``value | max(case_sensitive, attribute)``: Undefined when empty."""
    return _min_or_max(value, max, case_sensitive, attribute)


def filter_sum(value: Any, attribute: Any = None, start: Any = 0) -> Any:
    """``value | sum(attribute, start)``."""
    if attribute is not None:
        value = map(attribute_getter(attribute), value)
    return sum(value, start)


class GroupTuple(NamedTuple):
    """One group of ``groupby``: ``grouper`` (the shared value) and ``list`` (its items).

    Prints as a plain tuple, as Jinja's ``_GroupTuple`` does.
    """

    grouper: Any
    list: list

    def __repr__(self) -> str:
        return tuple.__repr__(self)

    def __str__(self) -> str:
        return tuple.__str__(self)


name_type_as_jinja_does(GroupTuple, "jinja2.filters._GroupTuple")


def groupby(value: Any, attribute: Any, default: Any = None, case_sensitive: bool = False) -> TemplateList:
    """``value | groupby(attribute, default, case_sensitive)``: sorted groups of equal attribute.

    Case-insensitive by default; a group's ``grouper`` then has the case of its first item.
    """
    key = attribute_getter(attribute, None if case_sensitive else ignore_case, default)
    groups = [GroupTuple(grouper, TemplateList(group)) for grouper, group in _groupby(sorted(value, key=key), key)]
    if not case_sensitive:
        original = attribute_getter(attribute, default=default)
        groups = [GroupTuple(original(group[0]), group) for _, group in groups]
    return TemplateList(groups)


def batch(value: Any, linecount: int, fill_with: Any = None) -> Iterator[TemplateList]:
    """``value | batch(linecount, fill_with)``: rows of ``linecount`` items (a generator)."""
    row: TemplateList = TemplateList()
    for item in value:
        if len(row) == linecount:
            yield row
            row = TemplateList()
        row.append(item)
    if row:
        if fill_with is not None and len(row) < linecount:
            row += [fill_with] * (linecount - len(row))
        yield row


def filter_slice(value: Any, slices: int, fill_with: Any = None) -> Iterator[TemplateList]:
    """``value | slice(slices, fill_with)``: ``slices`` columns, the first ones one longer (a generator)."""
    items = list(value)
    per_slice, with_extra = divmod(len(items), slices)
    offset = 0
    for number in range(slices):
        start = offset + number * per_slice
        if number < with_extra:
            offset += 1
        end = offset + (number + 1) * per_slice
        column = TemplateList(items[start:end])
        if fill_with is not None and number >= with_extra:
            column.append(fill_with)
        yield column


# What a filter's result is, for a translator deciding whether ``str()`` is needed and whether ``+``
# on the result escapes its other operand (it does when the result is a Markup).

STR_FILTERS: frozenset[str] = frozenset(
    [
        "capitalize",
        "center",
        "e",
        "escape",
        "filesizeformat",
        "forceescape",
        "format",
        "indent",
        "join",
        "lower",
        "pprint",
        "replace",
        "safe",
        "string",
        "striptags",
        "title",
        "tojson",
        "trim",
        "upper",
        "urlencode",
        "urlize",
        "wordwrap",
        "xmlattr",
    ]
)
"""Filters whose result is always a str (possibly a Markup, see below) when they return at all."""

MARKUP_FILTERS: frozenset[str] = frozenset(["e", "escape", "forceescape", "safe"])
"""Filters whose result is always a Markup."""

MARKUP_KEEPING_FILTERS: frozenset[str] = frozenset(
    ["capitalize", "center", "format", "indent", "lower", "reverse", "string", "trim", "truncate", "upper"]
)
"""Filters whose result is a Markup exactly when their input is one (``reverse`` and ``truncate`` on a
string; other inputs give other values). Every other filter in :data:`STR_FILTERS` gives a plain str."""

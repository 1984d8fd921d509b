"""Jinja semantics that generated renderers need, without jinja2.

A generated renderer is a line-by-line translation of a chat template into Python.
Most Jinja operations mean the same thing in Python (``+``, ``and``, ``in``,
slicing, string methods). The ones that do not are collected here, each written
to behave exactly as it does under transformers' chat-template environment
(jinja2 3.1 ``ImmutableSandboxedEnvironment`` with transformers' ``tojson``,
``raise_exception`` and ``strftime_now``):

* a missing key or variable is an :class:`Undefined` value that renders as ``""``,
  is falsy, iterates as empty and raises when used in arithmetic or indexed;
* input dicts and lists are wrapped (:class:`TemplateDict`, :class:`TemplateList`)
  so that ``message["content"]`` on a missing key or ``messages[i]`` out of range
  gives an ``Undefined`` instead of raising, as in Jinja;
* filters and tests whose Python spelling differs (``trim``, ``tojson``,
  ``dictsort``, ``is defined``, ``is sequence``, ...).

Errors a template raises (``raise_exception``) or runs into (using an undefined
value) surface as :class:`TemplateError`, a ``ValueError`` carrying the same
message Jinja would give.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from numbers import Number
from typing import Any

__all__ = [
    "TemplateError",
    "TemplateTypeError",
    "Undefined",
    "TemplateDict",
    "TemplateList",
    "TemplateStr",
    "Namespace",
    "template_data",
    "MISSING",
    "getitem",
    "getattribute",
    "soft_str",
    "raise_exception",
    "strftime_now",
    "defined",
    "is_sequence",
    "is_iterable",
    "is_mapping",
    "is_number",
    "is_boolean",
    "is_integer",
    "tojson",
    "trim",
    "default",
    "items",
    "dictsort",
    "join",
    "upper",
    "lower",
    "capitalize",
    "title",
    "replace",
    "first",
    "last",
    "length",
    "sort",
    "unique",
    "select_attr",
    "reject_attr",
    "select",
    "reject",
    "map_attribute",
    "map_filter",
    "mark_safe",
    "to_int",
    "to_float",
]


class TemplateError(ValueError):
    """The template rejected its input (``raise_exception``) or failed on it."""


class TemplateTypeError(TemplateError, TypeError):
    """The template ran into a type error on this input, where Jinja raises ``TypeError``
    (``"a" + 1``, ``tojson`` of an undefined value): both a refusal (``ValueError``) and a
    ``TypeError``, with the same message."""


class Undefined:
    """A missing value, with the semantics of ``jinja2.Undefined``.

    Renders as ``""``, is falsy, iterates as empty and has length 0; any other
    use (attribute access, indexing, arithmetic, ordering, calling) raises
    :class:`TemplateError` with Jinja's message, e.g.
    ``'dict object' has no attribute 'content'``.
    """

    __slots__ = ("_obj", "_name")

    _MISSING = object()

    def __init__(self, name: Any = None, obj: Any = _MISSING) -> None:
        self._obj = obj
        self._name = name

    @property
    def message(self) -> str:
        if self._obj is Undefined._MISSING:
            return f"{self._name!r} is undefined"
        type_repr = _object_type_repr(self._obj)
        if not isinstance(self._name, str):
            return f"{type_repr} has no element {self._name!r}"
        return f"{type_repr!r} has no attribute {self._name!r}"

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise TemplateError(self.message)

    __add__ = __radd__ = __sub__ = __rsub__ = _fail
    __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _fail
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _fail
    __pos__ = __neg__ = __call__ = __getitem__ = _fail
    __lt__ = __le__ = __gt__ = __ge__ = _fail
    __int__ = __float__ = __complex__ = __pow__ = __rpow__ = _fail

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise TemplateError(self.message)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return id(type(self))

    def __str__(self) -> str:
        return ""

    def __len__(self) -> int:
        return 0

    def __iter__(self):
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Undefined"

    def __reduce__(self):
        return (Undefined, (self._name, self._obj))


def _object_type_repr(obj: Any) -> str:
    """``jinja2.utils.object_type_repr``: how Jinja names a value's type in errors."""
    if obj is None:
        return "None"
    if obj is Ellipsis:
        return "Ellipsis"
    cls = type(obj)
    if cls in (TemplateDict, TemplateList, TemplateStr):
        cls = cls.__mro__[1]
    if cls.__module__ == "builtins":
        return f"{cls.__name__} object"
    return f"{cls.__module__}.{cls.__name__} object"


class TemplateDict(dict):
    """A dict whose missing keys read as :class:`Undefined` (Jinja's ``getitem``).

    As in Jinja, a missing key that names a dict method (``items``, ``get``, ...)
    resolves to that bound method.
    """

    __slots__ = ()

    def __missing__(self, key: Any) -> Any:
        if isinstance(key, str) and not key.startswith("_") and hasattr(dict, key):
            return getattr(self, key)
        return Undefined(key, self)


class TemplateList(list):
    """A list whose out-of-range indexes read as :class:`Undefined`; slices stay wrapped."""

    __slots__ = ()

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return TemplateList(list.__getitem__(self, index))
        try:
            return list.__getitem__(self, index)
        except (IndexError, TypeError):
            return Undefined(index, self)


class TemplateStr(str):
    """An input string whose lookups behave as in Jinja: ``s.name`` / ``s["name"]`` read as Undefined
    (or the str method of that name), an out-of-range ``s[i]`` too; its pieces stay wrapped."""

    __slots__ = ()

    def __getitem__(self, index: Any) -> Any:
        try:
            return TemplateStr(str.__getitem__(self, index))
        except IndexError:
            return Undefined(index, self)
        except TypeError:
            if isinstance(index, str) and not index.startswith("_") and hasattr(str, index):
                return getattr(self, index)
            return Undefined(index, self)

    def __iter__(self):
        return map(TemplateStr, str.__iter__(self))


class Namespace:
    """``namespace(...)``: the one mutable object a template may assign attributes on."""

    def __init__(self, **attrs: Any) -> None:
        for name in attrs:
            _check_namespace_name(name)
        self.__dict__.update(attrs)

    def __setattr__(self, name: str, value: Any) -> None:
        _check_namespace_name(name)
        self.__dict__[name] = value

    def __getattr__(self, name: str) -> Any:
        return Undefined(name, self)

    def __getitem__(self, name: Any) -> Any:
        # `ns.x` on a namespace reached through another name (an alias, a macro argument).
        return self.__dict__[name] if name in self.__dict__ else Undefined(name, self)

    def __repr__(self) -> str:
        return f"<Namespace {self.__dict__!r}>"


def _check_namespace_name(name: str) -> None:
    if name.startswith("_"):
        raise TemplateError(
            "Chat templates cannot store underscore-prefixed attributes on a namespace, "
            f"but got {name!r}. Please rename the attribute."
        )


class _Missing:
    """The default of a macro argument whose default Jinja evaluates at call time."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


def template_data(value: Any) -> Any:
    """Wrap plain JSON-like data so that missing keys and indexes behave as in Jinja."""
    if isinstance(value, Mapping):
        return TemplateDict((key, template_data(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return TemplateList(template_data(item) for item in value)
    if isinstance(value, str):
        return TemplateStr(value)
    return value


def getitem(obj: Any, key: Any) -> Any:
    """``obj[key]`` on a computed value (``s.split(",")[1]``): Undefined when missing, as in Jinja."""
    return _getitem(obj, key)


def getattribute(obj: Any, name: str) -> Any:
    """``obj.name`` on a computed value: Jinja's ``getattr`` (attribute, then item, else Undefined)."""
    if not name.startswith("_"):
        try:
            return getattr(obj, name)
        except AttributeError:
            pass
    try:
        return obj[name]
    except (TypeError, LookupError):
        return Undefined(name, obj)


def soft_str(value: Any) -> str:
    """``value | string``: ``str(value)``, but a str (a Markup too) is kept as it is."""
    return value if isinstance(value, str) else str(value)


# --- globals -------------------------------------------------------------------------


def raise_exception(message: Any) -> Any:
    """transformers' ``raise_exception(message)``."""
    raise TemplateError(str(message))


def strftime_now(format: str) -> str:
    """transformers' ``strftime_now(format)``: the local time now."""
    return datetime.now().strftime(format)


# --- tests (``x is ...``) --------------------------------------------------------------


def defined(value: Any) -> bool:
    """``value is defined``."""
    return not isinstance(value, Undefined)


def is_sequence(value: Any) -> bool:
    """``value is sequence``: has a length and supports indexing (strings do)."""
    try:
        len(value)
        value.__getitem__
    except Exception:
        return False
    return True


def is_iterable(value: Any) -> bool:
    """``value is iterable`` (strings and Undefined are)."""
    try:
        iter(value)
    except TypeError:
        return False
    return True


def is_mapping(value: Any) -> bool:
    """``value is mapping``."""
    return isinstance(value, Mapping)


def is_number(value: Any) -> bool:
    """``value is number`` (booleans count, as in Jinja)."""
    return isinstance(value, Number)


def is_boolean(value: Any) -> bool:
    """``value is boolean``."""
    return value is True or value is False


def is_integer(value: Any) -> bool:
    """``value is integer``."""
    return isinstance(value, int) and value is not True and value is not False


# --- filters (``x | ...``) -------------------------------------------------------------


def tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson``: ``json.dumps`` without HTML escaping, non-ASCII kept."""
    try:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    except TypeError as exc:
        raise TemplateTypeError(str(exc)) from exc


def trim(value: Any, chars: str | None = None) -> str:
    """``value | trim``."""
    return soft_str(value).strip(chars)


def default(value: Any, default_value: Any = "", boolean: bool = False) -> Any:
    """``value | default(default_value, boolean)``."""
    if isinstance(value, Undefined) or (boolean and not value):
        return default_value
    return value


def items(value: Any) -> list[tuple[Any, Any]]:
    """``value | items``."""
    if isinstance(value, Undefined):
        return []
    if not isinstance(value, Mapping):
        raise TemplateTypeError("Can only get item pairs from a mapping.")
    return list(value.items())


def _ignore_case(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def dictsort(value: Mapping, case_sensitive: bool = False, by: str = "key", reverse: bool = False) -> list:
    """``value | dictsort``: (key, value) pairs sorted by key, case-insensitively by default."""
    if by not in ("key", "value"):
        raise TemplateError('You can only sort by either "key" or "value"')
    position = 0 if by == "key" else 1

    def sort_key(pair: tuple[Any, Any]) -> Any:
        return pair[position] if case_sensitive else _ignore_case(pair[position])

    return sorted(value.items(), key=sort_key, reverse=reverse)


def _attribute_getter(attribute: str | int | None, case_sensitive: bool = True):
    """Jinja's ``make_attrgetter``: dotted paths, digits as indexes, Undefined when missing."""
    parts: list[Any] = []
    if attribute is not None:
        for part in str(attribute).split(".") if isinstance(attribute, str) else [attribute]:
            parts.append(int(part) if isinstance(part, str) and part.isdigit() else part)

    def getter(item: Any) -> Any:
        for part in parts:
            item = _getitem(item, part)
        return item if case_sensitive else _ignore_case(item)

    return getter


def _getitem(obj: Any, key: Any) -> Any:
    """Jinja's ``environment.getitem``: item first, then attribute, else Undefined."""
    try:
        return obj[key]
    except (TypeError, LookupError):
        if isinstance(key, str) and not key.startswith("_"):
            try:
                return getattr(obj, key)
            except AttributeError:
                pass
    return Undefined(key, obj)


def join(value: Iterable, separator: str = "", attribute: str | int | None = None) -> str:
    """``value | join(separator)``."""
    if attribute is not None:
        value = map(_attribute_getter(attribute), value)
    return str(separator).join(map(str, value))


def upper(value: Any) -> str:
    """``value | upper``."""
    return soft_str(value).upper()


def lower(value: Any) -> str:
    """``value | lower``."""
    return soft_str(value).lower()


def capitalize(value: Any) -> str:
    """``value | capitalize``."""
    return soft_str(value).capitalize()


def title(value: Any) -> str:
    """``value | title`` (Jinja's word-boundary rule: after spaces, hyphens and brackets)."""
    import re

    return "".join(
        [item[0].upper() + item[1:].lower() for item in re.compile(r"([-\s({\[<]+)").split(soft_str(value)) if item]
    )


def replace(value: Any, old: str, new: str, count: int | None = None) -> str:
    """``value | replace(old, new)``."""
    return str(value).replace(str(old), str(new), -1 if count is None else count)


def first(value: Iterable) -> Any:
    """``value | first``."""
    for item in value:
        return item
    return Undefined("first item")


def last(value: Any) -> Any:
    """``value | last``."""
    try:
        return list(value)[-1]
    except IndexError:
        return Undefined("last item")


def length(value: Any) -> int:
    """``value | length`` / ``count``."""
    return len(value)


def sort(value: Iterable, reverse: bool = False, case_sensitive: bool = False, attribute: Any = None) -> list:
    """``value | sort``."""
    return sorted(value, key=_attribute_getter(attribute, case_sensitive), reverse=reverse)


def unique(value: Iterable, case_sensitive: bool = False, attribute: Any = None) -> list:
    """``value | unique``."""
    getter = _attribute_getter(attribute, case_sensitive)
    seen: set = set()
    result = []
    for item in value:
        key = getter(item)
        if key not in seen:
            seen.add(key)
            result.append(item)
    return result


def _run_test(test: str, value: Any, *args: Any) -> bool:
    if test not in _TESTS:
        raise TemplateError(f"No test named {test!r}.")
    return _TESTS[test](value, *args)


_TESTS = {
    "defined": defined,
    "undefined": lambda value: not defined(value),
    "none": lambda value: value is None,
    "true": lambda value: value is True,
    "false": lambda value: value is False,
    "boolean": is_boolean,
    "string": lambda value: isinstance(value, str),
    "mapping": is_mapping,
    "number": is_number,
    "integer": is_integer,
    "float": lambda value: isinstance(value, float),
    "sequence": is_sequence,
    "iterable": is_iterable,
    "equalto": lambda value, other: value == other,
    "eq": lambda value, other: value == other,
    "==": lambda value, other: value == other,
    "ne": lambda value, other: value != other,
    "!=": lambda value, other: value != other,
    "in": lambda value, seq: value in seq,
    "odd": lambda value: value % 2 == 1,
    "even": lambda value: value % 2 == 0,
    "lower": lambda value: str(value).islower(),
    "upper": lambda value: str(value).isupper(),
}


def _select_or_reject(value: Any, keep: bool, test: str | None, args: tuple, getter=None) -> list:
    """Jinja's ``select_or_reject``: items whose test (or truthiness) is ``keep``.

    Jinja checks the value's truthiness first, so a falsy non-iterable selects nothing.
    """
    if not value:
        return []
    result = []
    for item in value:
        subject = getter(item) if getter else item
        if bool(_run_test(test, subject, *args) if test else subject) is keep:
            result.append(item)
    return result


def select_attr(value: Iterable, attribute: str, test: str | None = None, *args: Any) -> list:
    """``value | selectattr(attribute[, test, ...])``."""
    return _select_or_reject(value, True, test, args, _attribute_getter(attribute))


def reject_attr(value: Iterable, attribute: str, test: str | None = None, *args: Any) -> list:
    """``value | rejectattr(attribute[, test, ...])``."""
    return _select_or_reject(value, False, test, args, _attribute_getter(attribute))


def select(value: Iterable, test: str | None = None, *args: Any) -> list:
    """``value | select([test, ...])``."""
    return _select_or_reject(value, True, test, args)


def reject(value: Iterable, test: str | None = None, *args: Any) -> list:
    """``value | reject([test, ...])``."""
    return _select_or_reject(value, False, test, args)


def map_attribute(value: Iterable, attribute: str, default: Any = None) -> list:
    """``value | map(attribute=...)``."""
    if not value:
        return []
    getter = _attribute_getter(attribute)
    result = []
    for item in value:
        found = getter(item)
        result.append(default if default is not None and isinstance(found, Undefined) else found)
    return result


def map_filter(value: Iterable, filter_function, *args: Any) -> list:
    """``value | map('filter', ...)``: apply one of the filters above to every item."""
    if not value:
        return []
    return [filter_function(item, *args) for item in value]


def mark_safe(value: Any) -> Any:
    """``value | safe``: a ``markupsafe.Markup``, as Jinja returns.

    It matters: ``"<" + markup`` escapes the plain operand, exactly as in Jinja.
    """
    from markupsafe import Markup

    return Markup(value)


def to_int(value: Any, default: int = 0, base: int = 10) -> int:
    """``value | int``."""
    if isinstance(value, Undefined):
        raise TemplateError(value.message)
    try:
        if isinstance(value, str):
            return int(value, base)
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return default


def to_float(value: Any, default: float = 0.0) -> float:
    """``value | float``."""
    if isinstance(value, Undefined):
        raise TemplateError(value.message)
    try:
        return float(value)
    except (TypeError, ValueError):
        return default

"""Jinja's builtin tests (``x is defined``, ``x is divisibleby 3``) as Python functions.

Each test is ``is_<name>(value, *args)`` and behaves as jinja2 3.1.6's own on every input,
:class:`~rllm_renderers.jinja.values.Undefined` included (it is a string of length 0 that
iterates as empty: ``is sequence`` and ``is iterable`` hold for it, as in Jinja).
The tests that look a name up (``is filter``, ``is test``) and the name table :data:`TESTS` are in
:mod:`.builtins`.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Number
from typing import Any

from .values import Undefined

__all__ = [
    "is_boolean",
    "is_callable",
    "is_defined",
    "defined",
    "is_divisibleby",
    "is_eq",
    "is_escaped",
    "is_even",
    "is_false",
    "is_float",
    "is_ge",
    "is_gt",
    "is_in",
    "is_integer",
    "is_iterable",
    "is_le",
    "is_lower",
    "is_lt",
    "is_mapping",
    "is_ne",
    "is_none",
    "is_number",
    "is_odd",
    "is_sameas",
    "is_sequence",
    "is_string",
    "is_true",
    "is_undefined",
    "is_upper",
]


def is_defined(value: Any) -> bool:
    """``value is defined``."""
    return not isinstance(value, Undefined)


defined = is_defined  # the name generated renderers have always called


def is_undefined(value: Any) -> bool:
    """``value is undefined``."""
    return isinstance(value, Undefined)


def is_none(value: Any) -> bool:
    """``value is none``."""
    return value is None


def is_true(value: Any) -> bool:
    """``value is true``: the boolean ``True`` itself, not any truthy value."""
    return value is True


def is_false(value: Any) -> bool:
    """``value is false``: the boolean ``False`` itself, not any falsy value."""
    return value is False


def is_boolean(value: Any) -> bool:
    """``value is boolean``."""
    return value is True or value is False


def is_integer(value: Any) -> bool:
    """``value is integer`` (booleans are not)."""
    return isinstance(value, int) and value is not True and value is not False


def is_float(value: Any) -> bool:
    """``value is float``."""
    return isinstance(value, float)


def is_number(value: Any) -> bool:
    """``value is number`` (booleans count, as in Jinja)."""
    return isinstance(value, Number)


def is_string(value: Any) -> bool:
    """``value is string``."""
    return isinstance(value, str)


def is_mapping(value: Any) -> bool:
    """``value is mapping``."""
    return isinstance(value, Mapping)


def is_sequence(value: Any) -> bool:
    """``value is sequence``: has a length and supports indexing (strings and Undefined do)."""
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


def is_callable(value: Any) -> bool:
    """``value is callable``."""
    return callable(value)


def is_escaped(value: Any) -> bool:
    """``value is escaped``: a Markup (anything with ``__html__``)."""
    return hasattr(value, "__html__")


def is_odd(value: Any) -> bool:
    """``value is odd``."""
    return value % 2 == 1


def is_even(value: Any) -> bool:
    """``value is even``."""
    return value % 2 == 0


def is_divisibleby(value: Any, num: Any) -> bool:
    """``value is divisibleby(num)``."""
    return value % num == 0


def is_lower(value: Any) -> bool:
    """``value is lower``."""
    return str(value).islower()


def is_upper(value: Any) -> bool:
    """``value is upper``."""
    return str(value).isupper()


def is_eq(value: Any, other: Any) -> bool:
    """``value is eq(other)`` (also ``equalto``, ``==``)."""
    return value == other


def is_ne(value: Any, other: Any) -> bool:
    """``value is ne(other)`` (also ``!=``)."""
    return value != other


def is_lt(value: Any, other: Any) -> bool:
    """``value is lt(other)`` (also ``lessthan``, ``<``)."""
    return value < other


def is_le(value: Any, other: Any) -> bool:
    """``value is le(other)`` (also ``<=``)."""
    return value <= other


def is_gt(value: Any, other: Any) -> bool:
    """``value is gt(other)`` (also ``greaterthan``, ``>``)."""
    return value > other


def is_ge(value: Any, other: Any) -> bool:
    """``value is ge(other)`` (also ``>=``)."""
    return value >= other


def is_sameas(value: Any, other: Any) -> bool:
    """``value is sameas(other)``: the same object (``is``)."""
    return value is other


def is_in(value: Any, seq: Any) -> bool:
    """``value is in(seq)``."""
    return value in seq

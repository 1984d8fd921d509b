"""The builtins that are looked up by name, and the tables that name them.

``value | map("trim")``, ``value | select("odd")`` and ``value is filter`` name another filter or
test at run time, so they need the tables of every filter and test; the tables, in turn, list
them. They live here, above :mod:`.filters` and :mod:`.tests`, so neither of those imports the
other. :data:`FILTERS` maps every Jinja filter name, aliases included, to its function,
:data:`REFUSED_FILTERS` names the ones a renderer cannot reproduce (and why), and :data:`TESTS`
maps every Jinja test name to its function.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable

from . import filters, tests
from .values import TemplateError, attribute_getter, soft_str

__all__ = [
    "FILTERS",
    "REFUSED_FILTERS",
    "TESTS",
    "filter_map",
    "is_filter",
    "is_test",
    "map_attribute",
    "map_filter",
    "reject",
    "reject_attr",
    "select",
    "select_attr",
]


# --- select / reject / map --------------------------------------------------------------


def _run_test(name: Any, value: Any, args: tuple, kwargs: dict) -> bool:
    test = TESTS.get(name) if isinstance(name, str) else None
    if test is None:
        raise TemplateError(f"No test named {name!r}.")
    return test(value, *args, **kwargs)


def _select_or_reject(value: Any, keep: bool, lookup_attribute: bool, args: tuple, kwargs: dict) -> Iterator[Any]:
    """Jinja's ``select_or_reject``: a generator; its argument errors surface when iterated."""
    if not value:
        return
    subject_of: Callable[[Any], Any] | None = None
    if lookup_attribute:
        if not args:
            raise TemplateError("Missing parameter for attribute name")
        subject_of = attribute_getter(args[0])
        args = args[1:]
    for item in value:
        subject = subject_of(item) if subject_of else item
        passes = _run_test(args[0], subject, args[1:], kwargs) if args else subject
        if bool(passes) is keep:
            yield item


def select(value: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    """``value | select([test, *test_args])``: the items that pass the test (truthy without one)."""
    return _select_or_reject(value, True, False, args, kwargs)


def reject(value: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    """``value | reject([test, *test_args])``: the items that fail the test (falsy without one)."""
    return _select_or_reject(value, False, False, args, kwargs)


def select_attr(value: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    """``value | selectattr(attribute[, test, *test_args])``."""
    return _select_or_reject(value, True, True, args, kwargs)


def reject_attr(value: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    """``value | rejectattr(attribute[, test, *test_args])``."""
    return _select_or_reject(value, False, True, args, kwargs)


def filter_map(value: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    """``value | map(filter_name, *filter_args)`` or ``value | map(attribute=..., default=...)`` (a generator)."""
    if value:
        if not args and "attribute" in kwargs:
            kwargs = dict(kwargs)
            attribute = kwargs.pop("attribute")
            default_value = kwargs.pop("default", None)
            if kwargs:
                raise TemplateError(f"Unexpected keyword argument {next(iter(kwargs))!r}")
            function = attribute_getter(attribute, default=default_value)
        else:
            if not args:
                raise TemplateError("map requires a filter argument")
            name, filter_args = args[0], args[1:]

            def function(item: Any) -> Any:
                filter_function = FILTERS.get(name) if isinstance(name, str) else None
                if filter_function is None:
                    raise TemplateError(REFUSED_FILTERS.get(name) or f"No filter named {name!r}.")
                return filter_function(item, *filter_args, **kwargs)

        for item in value:
            yield function(item)


def map_attribute(value: Any, attribute: Any, default: Any = None) -> Iterator[Any]:
    """``value | map(attribute=..., default=...)`` (kept for the translator's older spelling)."""
    return filter_map(value, attribute=attribute, default=default)


def map_filter(value: Any, filter_function: Callable, *args: Any) -> Iterator[Any]:
    """``value | map(filter, ...)`` with the filter's function given (the translator's older spelling)."""
    if value:
        for item in value:
            yield filter_function(item, *args)


def is_filter(value: Any) -> bool:
    """``value is filter``: a filter of that name exists in transformers' environment."""
    return value in FILTERS or value in REFUSED_FILTERS


def is_test(value: Any) -> bool:
    """``value is test``: a test of that name exists in transformers' environment."""
    return value in TESTS


# --- the registry ------------------------------------------------------------------------

FILTERS: dict[str, Callable[..., Any]] = {
    "abs": filters.filter_abs,
    "attr": filters.attr,
    "batch": filters.batch,
    "capitalize": filters.capitalize,
    "center": filters.center,
    "count": filters.length,
    "d": filters.default,
    "default": filters.default,
    "dictsort": filters.dictsort,
    "e": filters.escape,
    "escape": filters.escape,
    "filesizeformat": filters.filesizeformat,
    "first": filters.first,
    "float": filters.to_float,
    "forceescape": filters.forceescape,
    "format": filters.filter_format,
    "groupby": filters.groupby,
    "indent": filters.indent,
    "int": filters.to_int,
    "items": filters.items,
    "join": filters.join,
    "last": filters.last,
    "length": filters.length,
    "list": filters.to_list,
    "lower": filters.lower,
    "map": filter_map,
    "max": filters.filter_max,
    "min": filters.filter_min,
    "pprint": filters.pprint,
    "reject": reject,
    "rejectattr": reject_attr,
    "replace": filters.replace,
    "reverse": filters.reverse,
    "round": filters.filter_round,
    "safe": filters.mark_safe,
    "select": select,
    "selectattr": select_attr,
    "slice": filters.filter_slice,
    "sort": filters.sort,
    "string": soft_str,
    "striptags": filters.striptags,
    "sum": filters.filter_sum,
    "title": filters.title,
    "tojson": filters.tojson,
    "trim": filters.trim,
    "truncate": filters.truncate,
    "unique": filters.unique,
    "upper": filters.upper,
    "urlencode": filters.urlencode,
    "urlize": filters.urlize,
    "wordcount": filters.wordcount,
    "wordwrap": filters.wordwrap,
    "xmlattr": filters.xmlattr,
}
"""Every jinja2 3.1.6 filter name (aliases too) a renderer reproduces -> its function."""

REFUSED_FILTERS: dict[str, str] = {
    "random": "`random` picks an item at random: no renderer can reproduce it (transformers' output differs "
    "from one call to the next)",
}
"""Jinja filters transformers' environment has that a renderer cannot reproduce, with the reason."""


TESTS: dict[str, Callable[..., bool]] = {
    "!=": tests.is_ne,
    "<": tests.is_lt,
    "<=": tests.is_le,
    "==": tests.is_eq,
    ">": tests.is_gt,
    ">=": tests.is_ge,
    "boolean": tests.is_boolean,
    "callable": tests.is_callable,
    "defined": tests.is_defined,
    "divisibleby": tests.is_divisibleby,
    "eq": tests.is_eq,
    "equalto": tests.is_eq,
    "escaped": tests.is_escaped,
    "even": tests.is_even,
    "false": tests.is_false,
    "filter": is_filter,
    "float": tests.is_float,
    "ge": tests.is_ge,
    "greaterthan": tests.is_gt,
    "gt": tests.is_gt,
    "in": tests.is_in,
    "integer": tests.is_integer,
    "iterable": tests.is_iterable,
    "le": tests.is_le,
    "lessthan": tests.is_lt,
    "lower": tests.is_lower,
    "lt": tests.is_lt,
    "mapping": tests.is_mapping,
    "ne": tests.is_ne,
    "none": tests.is_none,
    "number": tests.is_number,
    "odd": tests.is_odd,
    "sameas": tests.is_sameas,
    "sequence": tests.is_sequence,
    "string": tests.is_string,
    "test": is_test,
    "true": tests.is_true,
    "undefined": tests.is_undefined,
    "upper": tests.is_upper,
}
"""Every jinja2 3.1.6 test name (aliases too) -> the function that implements it."""

"""Jinja semantics that generated renderers need, without jinja2 (imported as ``jinja``).

A generated renderer is a line-by-line translation of a chat template into Python.
Most Jinja operations mean the same thing in Python (``+``, ``and``, ``in``,
slicing, string methods). The ones that do not are collected here, each written
to behave exactly as it does under transformers' chat-template environment
(jinja2 3.1.6 ``ImmutableSandboxedEnvironment``, trim_blocks, lstrip_blocks, with
transformers' ``tojson``, ``raise_exception``, ``strftime_now``, ``dict`` and
``namespace``):

* values (:mod:`.values`): :class:`Undefined`, the wrapped input data whose
  missing keys read as Undefined, Jinja's ``x[key]`` / ``x.name`` with the sandbox's
  refusals;
* filters (:mod:`.filters`) and tests (:mod:`.tests`), one function each, listed by Jinja
  name in :data:`FILTERS` and :data:`TESTS` (:mod:`.builtins`): the translator emits
  ``jinja.<function.__name__>(value, *args, **kwargs)`` for ``value | name(*args, **kwargs)``
  and ``value is name(*args)``;
* the globals transformers' environment defines, listed in :data:`GLOBALS`.

Errors a template raises (``raise_exception``) or runs into (using an undefined
value) surface as :class:`TemplateError`, a ``ValueError`` carrying the same
message Jinja would give.

For the translator:

* ``value | name(*args, **kwargs)`` -> ``jinja.<FILTERS[name].__name__>(value, *args, **kwargs)``;
  ``value is name(*args)`` -> ``jinja.<TESTS[name].__name__>(value, *args)`` (all ``is_<name>``);
  a global ``name(...)`` -> ``jinja.<GLOBALS[name].__name__>(...)``. A name in
  :data:`REFUSED_FILTERS` / :data:`REFUSED_GLOBALS` is refused at compile time with that reason.
* ``select``, ``reject``, ``selectattr``, ``rejectattr``, ``map``, ``unique``, ``items``, ``batch``
  and ``slice`` return generators, as in Jinja: always truthy, single-pass, no ``len``. A variable
  that may hold one needs ``list(...)`` before ``len()`` / ``loop.length`` / ``loop.last`` (Jinja
  computes those on generators too), and ``{% for %}...{% else %}`` over it needs an
  "iterated at least once" flag rather than the truthiness of the iterable.
* :data:`STR_FILTERS`, :data:`MARKUP_FILTERS` and :data:`MARKUP_KEEPING_FILTERS` say which
  results are strings and which are Markup (``+`` on a Markup escapes the other operand).
* A method call on a computed value, ``x.append(y)``, is refused by the sandbox:
  ``jinja.getattribute(x, "append")(y)`` raises the same error.
"""

from __future__ import annotations

import locale
import re
import time
from datetime import datetime, timedelta
from typing import Any, Callable

from .filters import *  # noqa: F401,F403  (re-exported: generated code calls jinja.<filter>)
from .filters import __all__ as _FILTER_NAMES
from .tests import *  # noqa: F401,F403  (re-exported: generated code calls jinja.is_<test>)
from .tests import __all__ as _TEST_NAMES
from .builtins import *  # noqa: F401,F403  (the name tables, and the builtins that use them)
from .builtins import __all__ as _BUILTIN_NAMES
from .values import *  # noqa: F401,F403
from .values import Namespace, TemplateDict, TemplateError, Undefined, name_type_as_jinja_does
from .values import __all__ as _VALUE_NAMES
from .frozen_inputs import memoized_macro, template_tools  # noqa: F401  (generated code and base call them)
from .caller_text import MARKED_TYPES, marked_join

__all__ = [
    *_VALUE_NAMES,
    *_TEST_NAMES,
    *_FILTER_NAMES,
    *_BUILTIN_NAMES,
    "GLOBALS",
    "REFUSED_GLOBALS",
    "memoized_macro",
    "template_tools",
    "raise_exception",
    "set_attribute",
    "missing_filter_or_test",
    "strftime_now",
    "safe_range",
    "new_dict",
    "Cycler",
    "Joiner",
    "TemplateReference",
    "concat",
]


def concat(parts: list) -> str:
    """``"".join(parts)`` of what a macro or ``{% set %}`` block wrote, caller text keeping its marks
    (:mod:`rllm_renderers.jinja.caller_text`)."""
    text = "".join(parts)
    return text if MARKED_TYPES.isdisjoint(map(type, parts)) else marked_join("", parts)


# --- globals -------------------------------------------------------------------------


def raise_exception(message: Any) -> Any:
    """transformers' ``raise_exception(message)``."""
    raise TemplateError(str(message))


def set_attribute(target: Any, name: str, value: Any) -> None:
    """``{% set target.name = value %}`` where ``target`` is not known to be a namespace: Jinja
    assigns only on a ``namespace()`` and refuses anything else (a message dict, Undefined)."""
    if type(target) is not Namespace:
        raise TemplateError("cannot assign attribute on non-namespace object")
    setattr(target, name, value)


def missing_filter_or_test(kind: str, name: str, *evaluated: Any) -> Any:
    """A filter or test the environment does not have, used inside an ``if`` or an inline if:
    Jinja compiles the template and raises only when that branch runs (after evaluating the
    value and arguments, here ``evaluated``)."""
    raise TemplateError(f"No {kind} named {name!r} found.")


def strftime_now(format: str) -> str:
    """transformers' ``strftime_now(format)``: the local time now.

    A format of date fields only (``"%d %b %Y"``, ``"%Y-%m-%d"``: what templates write) gives the
    same text all day, so its text is kept with the local day, the ``LC_TIME`` locale (month and
    day names) and the time zone it holds for, and formatted again once any of them is different.
    """
    remembered = _DATE_TEXTS.get(format) if type(format) is str else None
    if remembered is not None:
        day_start, day_end, names, text = remembered
        if day_start <= time.time() < day_end and names == _date_setting():
            return text
    now = datetime.now()
    text = now.strftime(format)
    if type(format) is str and _DATE_ONLY_FORMAT.match(format):
        midnight = datetime(now.year, now.month, now.day)
        if len(_DATE_TEXTS) >= 64:
            _DATE_TEXTS.clear()
        day = (midnight.timestamp(), (midnight + timedelta(days=1)).timestamp())
        _DATE_TEXTS[format] = (*day, _date_setting(), text)
    return text


def _date_setting() -> tuple[str, tuple[str, str]]:
    """What else a date's text and the local day depend on: the ``LC_TIME`` locale and the time zone."""
    return locale.setlocale(locale.LC_TIME), time.tzname


#: Directives whose text depends on the local date only (no time of day, no time zone).
_DATE_ONLY_FORMAT = re.compile(r"(?:[^%]|%[aAbBdDeFjmyY%])*\Z")
#: format -> (local day start, next local day start (POSIX timestamps), _date_setting(), its text).
_DATE_TEXTS: dict[str, tuple[float, float, tuple, str]] = {}


MAX_RANGE = 100_000
"""The longest ``range`` the sandbox allows."""


def safe_range(*args: int) -> range:
    """The sandbox's ``range(...)``: refuses ranges longer than :data:`MAX_RANGE`."""
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise OverflowError(f"Range too big. The sandbox blocks ranges larger than MAX_RANGE ({MAX_RANGE}).")
    return numbers


class _DictGlobal:
    """transformers' ``dict`` global: ``dict(a=1)``, ``dict.fromkeys(keys)`` (missing keys read as Undefined)."""

    def __call__(self, *args: Any, **kwargs: Any) -> TemplateDict:
        return TemplateDict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> TemplateDict:
        return TemplateDict(dict.fromkeys(*args, **kwargs))

    __name__ = "new_dict"

    def __repr__(self) -> str:
        return "new_dict"


new_dict = _DictGlobal()


class Cycler:
    """``cycler(*items)``: ``.next()`` returns the items in turn, forever; ``.current``, ``.reset()``."""

    def __init__(self, *items: Any) -> None:
        if not items:
            raise RuntimeError("at least one item has to be provided")
        self.items = items
        self.pos = 0

    def reset(self) -> None:
        self.pos = 0

    @property
    def current(self) -> Any:
        return self.items[self.pos]

    def next(self) -> Any:
        value = self.current
        self.pos = (self.pos + 1) % len(self.items)
        return value

    __next__ = next


class Joiner:
    """``joiner(sep)``: calling it returns ``""`` the first time, ``sep`` after."""

    def __init__(self, sep: str = ", ") -> None:
        self.sep = sep
        self.used = False

    def __call__(self) -> str:
        if not self.used:
            self.used = True
            return ""
        return self.sep


class TemplateReference:
    """Jinja's ``self`` (the template itself, whose attributes are its blocks): a chat template
    compiled from a string has none, so ``self.X`` is undefined, and ``self`` prints as Jinja's
    ``<TemplateReference None>``. It is never an input: apply_chat_template cannot pass ``self``."""

    __slots__ = ()

    def __getitem__(self, name: Any) -> Undefined:
        return Undefined(name, self)

    def __repr__(self) -> str:
        return "<TemplateReference None>"

    __str__ = __repr__


name_type_as_jinja_does(TemplateReference, "jinja2.runtime.TemplateReference")
name_type_as_jinja_does(Cycler, "jinja2.utils.Cycler")
name_type_as_jinja_does(Joiner, "jinja2.utils.Joiner")


GLOBALS: dict[str, Callable[..., Any]] = {
    "cycler": Cycler,
    "dict": new_dict,
    "joiner": Joiner,
    "namespace": Namespace,
    "raise_exception": raise_exception,
    "range": safe_range,
    "strftime_now": strftime_now,
}
"""transformers' chat-template globals -> their implementation (``jinja.<value.__name__>`` in generated code)."""

REFUSED_GLOBALS: dict[str, str] = {
    "lipsum": "`lipsum` generates random placeholder text: no renderer can reproduce it",
}
"""Globals transformers' environment has that a renderer cannot reproduce, with the reason."""

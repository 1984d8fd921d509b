"""Jinja's values in Python: Undefined, lookups that never raise, the sandbox's attribute rules.

The building blocks of :mod:`rllm_renderers.jinja.runtime` (which re-exports everything
public here; generated code only ever imports that module, as ``jinja``):

* a missing key or variable is an :class:`Undefined` value that renders as ``""``,
  is falsy, iterates as empty and raises when used in arithmetic or indexed;
* input dicts, lists and strings are wrapped (:class:`TemplateDict`, :class:`TemplateList`,
  :class:`TemplateStr`) so that ``message["content"]`` on a missing key or ``messages[i]``
  out of range gives an ``Undefined`` instead of raising, as in Jinja;
* :func:`getitem` / :func:`getattribute` are Jinja's ``x[key]`` / ``x.name`` on any value,
  including the refusals of transformers' ``ImmutableSandboxedEnvironment`` (underscore
  names, methods that mutate a list, dict or set): those read as an Undefined whose every
  use raises, exactly as the sandbox's "unsafe" Undefined does.
"""

from __future__ import annotations

import string
import types
from _string import formatter_field_name_split
from collections import deque
from collections.abc import Mapping, MutableMapping, MutableSequence, MutableSet
from typing import Any, Callable

from markupsafe import EscapeFormatter
from markupsafe import Markup as _Markup

__all__ = [
    "TemplateError",
    "TemplateTypeError",
    "Undefined",
    "TemplateDict",
    "TemplateList",
    "TemplateStr",
    "Namespace",
    "template_data",
    "template_message",
    "MISSING",
    "getitem",
    "getattribute",
    "soft_str",
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
    ``'dict object' has no attribute 'content'``, or ``hint`` when one is given
    (``No first item, sequence was empty.``).
    """

    __slots__ = ("_obj", "_name", "_hint")

    _MISSING = object()

    def __init__(self, name: Any = None, obj: Any = _MISSING, hint: str | None = None) -> None:
        self._obj = obj
        self._name = name
        self._hint = hint

    @property
    def message(self) -> str:
        if self._hint:
            return self._hint
        if self._obj is Undefined._MISSING:
            return f"{self._name!r} is undefined"
        type_repr = object_type_repr(self._obj)
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
        return (Undefined, (self._name, self._obj, self._hint))


# How Jinja names the types whose Python twin here has another name (in error messages).
_JINJA_TYPE_NAMES: dict[str, str] = {}


def name_type_as_jinja_does(cls: type, qualified_name: str) -> None:
    """Make error messages name ``cls`` as Jinja names its counterpart (``jinja2.utils.Cycler``)."""
    _JINJA_TYPE_NAMES[f"{cls.__module__}.{cls.__name__}"] = qualified_name


def object_type_repr(obj: Any) -> str:
    """``jinja2.utils.object_type_repr``: how Jinja names a value's type in errors."""
    if obj is None:
        return "None"
    if obj is Ellipsis:
        return "Ellipsis"
    name = jinja_type_name(obj)
    return f"{name} object"


def jinja_type_name(obj: Any) -> str:
    """The qualified type name Jinja would see for ``obj`` (builtins unqualified)."""
    cls = type(obj)
    if cls in (TemplateDict, TemplateList, TemplateStr):
        cls = cls.__mro__[1]
    qualified = f"{cls.__module__}.{cls.__name__}"
    if qualified in _JINJA_TYPE_NAMES:
        return _JINJA_TYPE_NAMES[qualified]
    return cls.__name__ if cls.__module__ == "builtins" else qualified


def _plain_type_name(obj: Any) -> str:
    """``type(obj).__name__`` as Jinja would see it (our wrappers read as their base type)."""
    return jinja_type_name(obj).rsplit(".", 1)[-1]


class TemplateDict(dict):
    """A dict whose missing keys read as :class:`Undefined` (Jinja's ``getitem``).

    As in Jinja, a missing key that names a dict method (``items``, ``get``, ...)
    resolves to that bound method; the sandbox refuses the ones that mutate.
    """

    __slots__ = ()

    def __missing__(self, key: Any) -> Any:
        if isinstance(key, str) and hasattr(dict, key):
            return _safe_getattr(self, key, getattr(self, key))
        return Undefined(key, self)

    def __format__(self, spec: str) -> str:  # (`"{0:>9}".format(d)`: the error names a dict, as in Jinja)
        return _format_as(dict, self, spec)


class TemplateList(list):
    """A list whose out-of-range indexes read as :class:`Undefined` (a method name as the method, as in
    Jinja); slices stay wrapped."""

    __slots__ = ()

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return TemplateList(list.__getitem__(self, index))
        try:
            return list.__getitem__(self, index)
        except IndexError:
            return Undefined(index, self)
        except TypeError:
            if isinstance(index, str) and hasattr(list, index):
                return _safe_getattr(self, index, getattr(self, index))
            return Undefined(index, self)

    def __format__(self, spec: str) -> str:
        return _format_as(list, self, spec)


def _format_as(kind: type, value: Any, spec: str) -> str:
    """``format(value, spec)`` of a wrapped dict or list as of the plain ``kind`` it wraps."""
    if spec:
        raise TypeError(f"unsupported format string passed to {kind.__name__}.__format__")
    return str(value)


class TemplateStr(str):
    """An input string whose lookups behave as in Jinja: ``s.name`` / ``s["name"]`` read as Undefined
    (or the str method of that name), an out-of-range ``s[i]`` too; its pieces stay wrapped."""

    __slots__ = ()

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):  # Jinja slices in Python itself: bad bounds raise TypeError
            return TemplateStr(str.__getitem__(self, index))
        try:
            return TemplateStr(str.__getitem__(self, index))
        except IndexError:
            return Undefined(index, self)
        except TypeError:
            if isinstance(index, str) and hasattr(str, index):
                return _safe_getattr(self, index, getattr(self, index))
            return Undefined(index, self)

    def __iter__(self):
        return map(TemplateStr, str.__iter__(self))

    def __format__(self, spec: str) -> str:  # (a bad spec's error names a str, as in Jinja)
        return format(str.__str__(self), spec)


class Namespace:
    """``namespace(...)``: the one mutable object a template may assign attributes on.

    Takes what ``dict()`` takes (``namespace(a=1)``, ``namespace({"a": 1})``), as transformers'
    ``TemplateNamespace`` does, and like it refuses underscore-prefixed names.
    """

    def __init__(self, *args: Any, **attrs: Any) -> None:
        values = dict(*args, **attrs)
        for name in values:
            _check_namespace_name(name)
        self.__dict__.update(values)

    def __setattr__(self, name: str, value: Any) -> None:
        _check_namespace_name(name)
        self.__dict__[name] = value

    def __getattr__(self, name: str) -> Any:
        return Undefined(name, self)

    def __getitem__(self, name: Any) -> Any:
        # `ns.x` on a namespace reached through another name (an alias, a macro argument).
        if name in self.__dict__:
            return self.__dict__[name]
        if isinstance(name, str) and hasattr(type(self), name):  # `__class__` and the like
            return _unsafe(self, name)
        return Undefined(name, self)

    def __repr__(self) -> str:
        return f"<Namespace {self.__dict__!r}>"


name_type_as_jinja_does(Namespace, "transformers.utils.chat_template_utils.TemplateNamespace")


def _check_namespace_name(name: Any) -> None:
    if isinstance(name, str) and name.startswith("_"):
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
    kind = type(value)  # exact JSON types first: the abstract Mapping check is slow
    if kind is str:
        return TemplateStr(value)
    if kind is dict:  # (comprehensions: a third faster than generators on tool schemas)
        return TemplateDict({key: template_data(item) for key, item in value.items()})
    if kind is list:
        return TemplateList([template_data(item) for item in value])
    if kind in _JSON_SCALARS:
        return value
    if isinstance(value, Mapping):
        return TemplateDict({key: template_data(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return TemplateList([template_data(item) for item in value])
    if isinstance(value, str):  # a TemplateStr subclass (caller text) stays what it is
        return value if isinstance(value, TemplateStr) else TemplateStr(value)
    return value


_JSON_SCALARS = frozenset([int, float, bool, type(None)])


def template_message(message: dict, reasoning_fields: tuple[str, ...] = ()) -> TemplateDict:
    """One input message as transformers hands it to the template, wrapped: keys whose value is None
    dropped, and, when one of ``reasoning_fields`` holds a value (the first that does), that value
    also under ``"thinking"`` (first) and ``"reasoning_content"`` (last) unless the message sets them.

    ``template_data`` of that dict, built in one pass: string values (the common case) are wrapped
    here rather than by a call per value.
    """
    wrapped = {
        key: TemplateStr(value) if type(value) is str else template_data(value)
        for key, value in message.items()
        if value is not None
    }
    for field in reasoning_fields:
        reasoning = wrapped.get(field)
        if reasoning is not None:
            return TemplateDict({"thinking": reasoning, **wrapped, "reasoning_content": reasoning})
    return TemplateDict(wrapped)


def soft_str(value: Any) -> str:
    """``value | string``: ``str(value)``, but a str (a Markup too) is kept as it is."""
    return value if isinstance(value, str) else str(value)


# --- lookups ---------------------------------------------------------------------------


def getitem(obj: Any, key: Any) -> Any:
    """``obj[key]`` as Jinja's sandbox does it: the item, else a safe attribute, else Undefined."""
    try:
        return obj[key]
    except (TypeError, LookupError):
        if isinstance(key, str):
            try:
                value = getattr(obj, key)
            except AttributeError:
                pass
            else:
                return _safe_getattr(obj, key, value)
    return Undefined(key, obj)


def getattribute(obj: Any, name: str) -> Any:
    """``obj.name`` as Jinja's sandbox does it: a safe attribute, else the item, else Undefined."""
    if type(obj) is TemplateDict and name in obj and name not in _TEMPLATE_DICT_ATTRIBUTES:
        return dict.__getitem__(obj, name)  # the common case: a key that no attribute shadows
    try:
        value = getattr(obj, name)
    except AttributeError:
        try:
            return obj[name]
        except (TypeError, LookupError):
            return Undefined(name, obj)
    return _safe_getattr(obj, name, value)


# What ``getattr`` finds on a TemplateDict (it has no instance attributes: ``__slots__ = ()``).
_TEMPLATE_DICT_ATTRIBUTES = frozenset(dir(TemplateDict))


def getattr_only(obj: Any, name: str) -> Any:
    """``obj | attr(name)``: the attribute only (never an item), refused as the sandbox refuses."""
    from inspect import getattr_static

    try:
        getattr_static(obj, name)  # (a non-str name raises TypeError, as in Jinja)
    except AttributeError:
        if not hasattr(obj, name):
            return Undefined(name, obj)
    return getattribute(obj, name)


def _safe_getattr(obj: Any, name: str, value: Any) -> Any:
    if name in _FORMAT_METHODS:
        sandboxed = wrap_str_format(value)
        if sandboxed is not None:
            return sandboxed
    if isinstance(value, Undefined) or is_safe_attribute(obj, name):  # (an Undefined: nothing was found)
        return value
    return _unsafe(obj, name)


# --- str.format / str.format_map ------------------------------------------------------

_FORMAT_METHODS = frozenset(["format", "format_map"])


def wrap_str_format(value: Any) -> Callable[..., str] | None:
    """The sandbox's ``wrap_str_format``: a str's bound ``format`` / ``format_map`` becomes a function
    whose replacement fields (``{0.name}``, ``{0[key]}``) look attributes and items up as the sandbox
    does (:func:`getattribute` / :func:`getitem`), so ``"{0.__class__}".format(x)`` renders an unsafe
    Undefined (``""``) and ``"{0.__globals__[os]}"`` raises, as under transformers. The wrapping
    happens when the method is looked up, so every later call of it is sandboxed."""
    if not isinstance(value, (types.MethodType, types.BuiltinMethodType)) or value.__name__ not in _FORMAT_METHODS:
        return None
    text = value.__self__
    if not isinstance(text, str):
        return None
    formatter = _SandboxedEscapeFormatter(text.escape) if isinstance(text, _Markup) else _SandboxedFormatter()
    result_type = _Markup if isinstance(text, _Markup) else str  # (Jinja: type(text), a plain str there)
    is_format_map = value.__name__ == "format_map"

    def sandboxed_format(*args: Any, **kwargs: Any) -> str:
        if is_format_map:
            if kwargs:
                raise TypeError("format_map() takes no keyword arguments")
            if len(args) != 1:
                raise TypeError(f"format_map() takes exactly one argument ({len(args)} given)")
            kwargs = args[0]
            args = ()
        return result_type(formatter.vformat(text, args, kwargs))

    sandboxed_format.__name__ = value.__name__
    sandboxed_format.__qualname__ = value.__qualname__
    return sandboxed_format


class _SandboxedFormatter(string.Formatter):
    """``string.Formatter`` whose field lookups are the sandbox's (jinja2's ``SandboxedFormatter``)."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> tuple[Any, Any]:
        first, rest = formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attribute, key in rest:
            obj = getattribute(obj, key) if is_attribute else getitem(obj, key)
        return obj, first


class _SandboxedEscapeFormatter(_SandboxedFormatter, EscapeFormatter):
    """The same for a Markup's format: every field escaped (jinja2's ``SandboxedEscapeFormatter``)."""

    def __init__(self, escape: Callable[[Any], Any]) -> None:
        super().__init__(escape)


def _unsafe(obj: Any, name: str) -> Undefined:
    """The sandbox's answer to a refused attribute: an Undefined whose every use raises."""
    return Undefined(name, obj, hint=f"access to attribute {name!r} of {_plain_type_name(obj)!r} object is unsafe.")


# What ImmutableSandboxedEnvironment refuses to expose: methods that modify a known mutable type.
_MUTATING_METHODS: tuple[tuple[type, frozenset[str]], ...] = (
    (
        MutableSet,
        frozenset(
            ["add", "clear", "difference_update", "discard", "pop", "remove", "symmetric_difference_update", "update"]
        ),
    ),
    (MutableMapping, frozenset(["clear", "pop", "popitem", "setdefault", "update"])),
    (MutableSequence, frozenset(["append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"])),
    (deque, frozenset(["append", "appendleft", "clear", "extend", "extendleft", "pop", "popleft", "remove", "rotate"])),
)

_INTERNAL_ATTRIBUTES: tuple[tuple[Any, frozenset[str]], ...] = (
    (types.GeneratorType, frozenset(["gi_frame", "gi_code"])),
    (types.CoroutineType, frozenset(["cr_frame", "cr_code"])),
    (types.AsyncGeneratorType, frozenset(["ag_code", "ag_frame"])),
)


# Every name is_safe_attribute refuses on some value (underscore names aside).
_REFUSED_NAMES = frozenset({"mro"}).union(
    _FORMAT_METHODS, *(names for _, names in (*_MUTATING_METHODS, *_INTERNAL_ATTRIBUTES))
)


def sandbox_may_refuse(name: str) -> bool:
    """Whether the sandbox refuses or intercepts ``x.name`` for some value ``x`` (``dict.update``,
    ``list.append``, ``__class__``, ``str.format``...): a translation must read such a name through
    :func:`getattribute`, never as a plain Python attribute, whose method would run unchecked."""
    return name.startswith("_") or name in _REFUSED_NAMES


def is_safe_attribute(obj: Any, name: str) -> bool:
    """Whether transformers' ``ImmutableSandboxedEnvironment`` lets a template read ``obj.name``."""
    if name.startswith("_"):
        return False
    if isinstance(obj, type) and name == "mro":
        return False
    if isinstance(obj, (types.CodeType, types.TracebackType, types.FrameType)):
        return False
    for kind, internal in _INTERNAL_ATTRIBUTES:
        if isinstance(obj, kind) and name in internal:
            return False
    return not modifies_known_mutable(obj, name)


def modifies_known_mutable(obj: Any, name: str) -> bool:
    """Whether ``obj.name`` is a method that modifies a list, dict, set or deque (what the immutable
    sandbox refuses on top of the plain sandbox's rules)."""
    for kind, mutating in _MUTATING_METHODS:
        if isinstance(obj, kind):
            return name in mutating
    return False


# --- attribute paths (``map(attribute="a.b")``, ``sort(attribute="0")``) ----------------


def ignore_case(value: Any) -> Any:
    """Jinja's ``ignore_case``: a string lowered, anything else as it is."""
    return value.lower() if isinstance(value, str) else value


def _attribute_parts(attribute: Any) -> list[Any]:
    """``"a.0.b"`` -> ``["a", 0, "b"]`` (Jinja's ``_prepare_attribute_parts``)."""
    if attribute is None:
        return []
    if isinstance(attribute, str):
        return [int(part) if part.isdigit() else part for part in attribute.split(".")]
    return [attribute]


def attribute_getter(
    attribute: Any, postprocess: Callable[[Any], Any] | None = None, default: Any = None
) -> Callable[[Any], Any]:
    """Jinja's ``make_attrgetter``: follow a dotted path of items/attributes (digits index).

    ``default`` replaces an Undefined met on the way; ``postprocess`` (``ignore_case``) the result.
    """
    parts = _attribute_parts(attribute)

    def get(item: Any) -> Any:
        for part in parts:
            item = getitem(item, part)
            if default is not None and isinstance(item, Undefined):
                item = default
        if postprocess is not None:
            item = postprocess(item)
        return item

    return get


def multi_attribute_getter(attribute: Any, postprocess: Callable[[Any], Any] | None = None) -> Callable[[Any], list]:
    """Jinja's ``make_multi_attrgetter``: ``"a,b.c"`` -> a key of several attribute paths."""
    paths = [_attribute_parts(item) for item in (attribute.split(",") if isinstance(attribute, str) else [attribute])]

    def get(item: Any) -> list:
        key = []
        for parts in paths:
            value = item
            for part in parts:
                value = getitem(value, part)
            key.append(postprocess(value) if postprocess is not None else value)
        return key

    return get

"""Tool schemas converted once, and macros over them rendered once.

In RL, thousands of rollouts pass the same tool schemas on every call.  Two costs repeat with them:
wrapping them for the template (:func:`template_tools`) and, in templates that describe tools with
a macro (gpt-oss' harmony ``render_tool_namespace`` writes TypeScript from the JSON schemas), the
macro's text.  Both are cached here, exactly:

* **Conversion** is keyed by ``marshal.dumps(tools)``: C code that writes exact types (a ``True``
  is not a ``1``, a tuple not a list, dict order kept) and refuses anything but built-in types,
  so equal keys decode to equal data, and that decoded data is what gets converted.  Tools marshal
  cannot write (str subclasses, custom objects) are converted every time, and so are tools with
  bytes in them (marshal writes any buffer, a bytearray say, as bytes: they would decode apart).
* A converted value is **frozen**: nothing can change it after conversion.  Templates cannot (the
  sandbox refuses mutating methods, in Jinja and in the generated code alike), the caller's own
  objects are not in it (it was built from the marshalled copy), and it holds only built-in values.
* :func:`memoized_macro` wraps a translated macro the compiler proved pure (it reads only its
  arguments, special tokens and other pure macros, and calls no ``strftime_now`` and no
  ``caller``): a call is looked up when every argument is a plain scalar (keyed by type and value)
  or a frozen container (keyed by identity; the key holds the object, so its id cannot be reused
  while the entry lives), and at least one is frozen.  Any other argument (a namespace, a list the
  template built, an Undefined), or scalars alone (a message's text: rarely repeated), and the
  macro runs as usual.  Exceptions are never cached.
"""

from __future__ import annotations

import functools
import marshal
import threading
from collections import OrderedDict
from typing import Any, Callable

from .. import forksafe
from .values import TemplateDict, TemplateList, TemplateStr, template_data

__all__ = ["template_tools", "memoized_macro"]

TOOLS_CACHE_SIZE = 64  # distinct tool sets kept converted
MACRO_CACHE_SIZE = 256  # calls kept per memoized macro

_lock = threading.Lock()
_converted: OrderedDict[bytes, tuple[Any, list[int]]] = OrderedDict()  # marshal key -> (value, its container ids)
_frozen: dict[int, Any] = {}  # id -> a container inside a converted value that is still cached


def _after_fork() -> None:
    """In a forked child (rllm_renderers.forksafe): a new lock, and the cache emptied."""
    global _lock
    _lock = threading.Lock()
    _converted.clear()
    _frozen.clear()


forksafe.in_child(_after_fork)


def template_tools(tools: Any) -> Any:
    """``template_data(tools)``, converted once per distinct content (module docstring)."""
    if tools is None:
        return None
    try:
        key = marshal.dumps(tools)
    except ValueError:  # not only built-in types: converted every time, never frozen
        return template_data(tools)
    with _lock:
        entry = _converted.get(key)
        if entry is not None:
            _converted.move_to_end(key)
            return entry[0]
    value = template_data(marshal.loads(key))
    containers = _containers(value)
    if containers is None:  # bytes: marshal writes every buffer (bytearray, memoryview, ...) as bytes
        return template_data(tools)
    with _lock:
        if key in _converted:  # another thread converted it meanwhile: use one value
            return _converted[key][0]
        _converted[key] = (value, [id(container) for container in containers])
        _frozen.update((id(container), container) for container in containers)
        while len(_converted) > TOOLS_CACHE_SIZE:
            _, (_, ids) = _converted.popitem(last=False)
            for id_ in ids:
                del _frozen[id_]
    return value


def _containers(value: Any) -> list | None:
    """The dicts and lists of a converted value (itself included), depth first; None if it holds
    bytes (which may have been another buffer type before marshalling)."""
    found, todo = [], [value]
    while todo:
        item = todo.pop()
        kind = type(item)
        if kind is TemplateDict:
            found.append(item)
            todo.extend(item.values())
        elif kind is TemplateList:
            found.append(item)
            todo.extend(item)
        elif kind is bytes:
            return None
        elif kind in (set, frozenset):  # left as they are by template_data; bytes may hide inside
            todo.extend(item)
    return found


class _Same:
    """A key part equal only to the same object (which it keeps alive)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return type(other) is _Same and other.value is self.value


_SCALARS = frozenset([str, TemplateStr, int, bool, type(None)])


def _key_part(value: Any) -> Any:
    """How an argument takes part in a key, or None where the call cannot be looked up."""
    kind = type(value)
    if kind in _SCALARS:
        return (kind, value)
    if kind is float:  # by repr: 0.0 == -0.0, but they print apart
        return (kind, repr(value))
    if _frozen.get(id(value)) is value:
        return _Same(value)
    return None


def memoized_macro(method: Callable[..., str]) -> Callable[..., str]:
    """A pure translated macro method, looked up by its arguments where they are scalars or frozen."""
    calls = forksafe.track(_MacroCalls())

    @functools.wraps(method)
    def looked_up(self, *args: Any, **kwargs: Any) -> str:
        parts, frozen = [type(self)], False
        for value in (*args, *kwargs.values()):
            part = _key_part(value)
            if part is None:
                return method(self, *args, **kwargs)
            frozen = frozen or type(part) is _Same
            parts.append(part)
        if not frozen:  # scalars only (a message's text, say): rarely repeated, not worth keeping
            return method(self, *args, **kwargs)
        key = (tuple(parts), tuple(kwargs))
        with calls.lock:
            text = calls.texts.get(key)
            if text is not None:
                calls.texts.move_to_end(key)
                return text
        text = method(self, *args, **kwargs)
        with calls.lock:
            calls.texts[key] = text
            while len(calls.texts) > MACRO_CACHE_SIZE:
                calls.texts.popitem(last=False)
        return text

    return looked_up


class _MacroCalls:
    """The remembered calls of one memoized macro, and their lock (rebuilt in a forked child)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.texts: OrderedDict = OrderedDict()

    def _after_fork(self) -> None:
        self.lock = threading.Lock()
        self.texts = OrderedDict()

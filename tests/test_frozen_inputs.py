"""Tool schemas converted once and pure macros looked up (``rllm_renderers.jinja.frozen_inputs``).

Exactness first: a cached conversion equals a fresh one, values that print differently never share
an entry, a memoized macro gives what the macro gives, and renders with the caches warm equal
transformers' on every corpus template that has a memoized macro.
"""

from __future__ import annotations

import copy
import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rllm_renderers.jinja import frozen_inputs  # noqa: E402
from rllm_renderers.jinja.frozen_inputs import memoized_macro, template_tools  # noqa: E402
from rllm_renderers.jinja.values import TemplateDict, TemplateList, TemplateStr, template_data  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "topn": {"type": "integer", "default": 10}},
                "required": ["query"],
            },
        },
    }
]


def test_same_content_is_converted_once_and_equals_a_fresh_conversion():
    first = template_tools(copy.deepcopy(TOOLS))
    again = template_tools(copy.deepcopy(TOOLS))  # other objects, same content
    assert again is first
    assert first == template_data(TOOLS)
    assert type(first) is TemplateList and type(first[0]) is TemplateDict
    assert type(first[0]["function"]["name"]) is TemplateStr


def test_the_callers_objects_are_not_kept():
    tools = copy.deepcopy(TOOLS)
    converted = template_tools(tools)
    tools[0]["function"]["name"] = "changed"
    tools[0]["function"]["parameters"]["required"].append("topn")
    assert converted[0]["function"]["name"] == "search"
    assert list(converted[0]["function"]["parameters"]["required"]) == ["query"]
    assert template_tools(tools)[0]["function"]["name"] == "changed"


@pytest.mark.parametrize(
    "one, other",
    [
        ([{"x": 1}], [{"x": True}]),  # == and hash alike, print apart
        ([{"x": 1.0}], [{"x": 1}]),
        ([{"x": 0.0}], [{"x": -0.0}]),
        ([{"x": (1, 2)}], [{"x": [1, 2]}]),  # both become lists: same text, but kept apart anyway
        ([{"a": 1, "b": 2}], [{"b": 2, "a": 1}]),  # dict order is what a template iterates
        ([{1: "x"}], [{"1": "x"}]),
    ],
)
def test_values_that_may_print_apart_never_share_an_entry(one, other):
    assert template_tools(one) is not template_tools(other)
    assert repr(template_tools(one)) == repr(template_data(one))
    assert repr(template_tools(other)) == repr(template_data(other))


class Text(str):
    pass


@pytest.mark.parametrize(
    "tools",
    [
        [{"name": Text("subclass")}],  # marshal refuses str subclasses
        [{"blob": bytearray(b"ab")}],  # marshal writes a bytearray as bytes: it would decode as bytes
        [{"blob": b"ab"}],
        [{"when": object()}],
    ],
)
def test_tools_marshal_cannot_tell_apart_are_converted_every_time(tools):
    first, second = template_tools(tools), template_tools(tools)
    assert first is not second
    assert repr(first) == repr(template_data(tools))
    assert id(first) not in frozen_inputs._frozen


def test_eviction_unfreezes_what_it_drops(monkeypatch):
    monkeypatch.setattr(frozen_inputs, "TOOLS_CACHE_SIZE", 3)
    values = [template_tools([{"k": k}]) for k in range(6)]
    assert all(frozen_inputs._frozen.get(id(value)) is value for value in values[-3:])
    assert not any(frozen_inputs._frozen.get(id(value)) is value for value in values[:3])
    assert len(frozen_inputs._converted) <= 3


class Calls:
    """A stand-in renderer whose macro counts its runs."""

    def __init__(self):
        self.runs = 0

    @memoized_macro
    def describe(self, name, tools=None, *, suffix=""):
        self.runs += 1
        if name == "boom":
            raise ValueError("no")
        return f"{name}:{len(tools or [])}{suffix}:{tools!r}"


def test_memoized_macro_looks_up_calls_on_frozen_arguments_only():
    renderer, tools = Calls(), template_tools([{"k": "memo"}])
    assert renderer.describe("a", tools) == renderer.describe("a", tools) == f"a:1:{tools!r}"
    assert renderer.runs == 1
    renderer.describe("a", tools, suffix="!")  # another keyword value: another entry
    renderer.describe(TemplateStr("a"), tools)  # another type: another entry
    assert renderer.runs == 3
    plain = [{"k": "memo"}]  # equal but not frozen: always run
    renderer.describe("a", plain)
    renderer.describe("a", plain)
    renderer.describe("a")  # scalars only: always run
    renderer.describe("a")
    assert renderer.runs == 7


def test_memoized_macro_never_caches_exceptions_nor_mutable_arguments():
    renderer, tools = Calls(), template_tools([{"k": "boom"}])
    for _ in range(2):
        with pytest.raises(ValueError):
            renderer.describe("boom", tools)
    assert renderer.runs == 2
    inner = template_data([{"k": 1}])  # a converted value that is not cached is not frozen
    renderer.describe("x", inner)
    renderer.describe("x", inner)
    assert renderer.runs == 4


# --- the translator marks pure macros only ---------------------------------------------------


def _method_decorated(source: str, name: str) -> bool:
    from tests.test_translate import code_of  # noqa: E402

    lines = code_of(source).splitlines()
    at = next(index for index, line in enumerate(lines) if f"def macro_{name}(" in line)
    return lines[at - 1].strip() == "@jinja.memoized_macro"


@pytest.mark.parametrize(
    "source, name, memoized",
    [
        ("{% macro t(x) %}[{{ x.name }}]{% endmacro %}{% for m in messages %}{{ t(m) }}{% endfor %}", "t", True),
        # the clock, directly or through another macro
        ("{% macro d(x) %}{{ strftime_now('%Y') }}{{ x }}{% endmacro %}{{ d(1) }}", "d", False),
        (
            "{% macro d() %}{{ strftime_now('%Y') }}{% endmacro %}{% macro u(x) %}{{ d() }}{{ x }}{% endmacro %}"
            "{{ u(messages) }}",
            "u",
            False,
        ),
        # a call block's body
        ("{% macro w(x) %}<{{ caller() }}>{% endmacro %}{% call w(1) %}{{ messages }}{% endcall %}", "w", False),
    ],
)
def test_only_macros_that_read_their_arguments_alone_are_memoized(source, name, memoized):
    assert _method_decorated(source, name) is memoized  # (each is a method: StopIteration otherwise)

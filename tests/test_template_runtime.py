"""The runtime's Jinja helpers (rllm_renderers/template_runtime.py) against jinja2 itself.

Every filter, test and global in the registries is run on many edge inputs (empty, unicode,
nested, Undefined, Markup, numbers, booleans, None, dicts, strings) in transformers' own
chat-template environment (``_compile_jinja_template``: ImmutableSandboxedEnvironment with
transformers' tojson, dict and namespace) and through the Python helper, and the two results
must be the same: same kind of value (str, Markup, list, generator, Undefined and its message,
...), same ``str()`` (what generated code writes), same truthiness. Where Jinja raises, the
helper must raise too: Jinja's own errors (UndefinedError, FilterArgumentError, SecurityError,
...) as TemplateError with the same message, Python's errors (TypeError, ...) as the same type.

The tables below are hand-picked edge inputs per filter; the property tests at the end draw
text, JSON values and lists of records (for the ``attribute=`` forms) at random.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import jinja2.filters
import jinja2.tests
import pytest
from markupsafe import Markup
from transformers.utils.chat_template_utils import _compile_jinja_template

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rllm_renderers.jinja import runtime as jinja  # noqa: E402


class _Undef:
    """Marks an input that is undefined: jinja2's Undefined in the template, jinja.Undefined in Python."""

    def __repr__(self) -> str:
        return "UNDEF"


UNDEF = _Undef()

# --- running both sides --------------------------------------------------------------------


def jinja_value(value: Any) -> Any:
    """An input as the template sees it (transformers passes plain JSON data)."""
    if value is UNDEF:
        return jinja2.Undefined(name="u")
    if isinstance(value, list):
        return [jinja_value(item) for item in value]
    if isinstance(value, dict):
        return {key: jinja_value(item) for key, item in value.items()}
    return value


def python_value(value: Any) -> Any:
    """The same input as generated code sees it (``template_data``; a Markup stays a Markup)."""
    if value is UNDEF:
        return jinja.Undefined("u")
    if isinstance(value, Markup):
        return value
    if isinstance(value, list):
        return jinja.TemplateList(python_value(item) for item in value)
    if isinstance(value, dict):
        return jinja.TemplateDict((key, python_value(item)) for key, item in value.items())
    return jinja.template_data(value)


def describe(value: Any) -> Any:
    """What the two sides must agree on, for one result: kind, str, truthiness, items (recursively)."""
    if isinstance(value, (jinja2.Undefined, jinja.Undefined)):
        message = value._undefined_message if isinstance(value, jinja2.Undefined) else value.message
        return ("Undefined", message)
    truthy = bool(value)
    if isinstance(value, Iterator) and not isinstance(value, str):
        return ("iterator", truthy, [describe(item) for item in value])
    if callable(value) and not isinstance(value, type):
        return ("callable", getattr(value, "__name__", type(value).__name__))
    if isinstance(value, Markup):
        return ("Markup", str(value))
    if isinstance(value, str):
        return ("str", str(value))
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    if value is None or isinstance(value, (bool, int, float)):
        return (type(value).__name__, value, str(value))
    if isinstance(value, tuple):
        return ("tuple", str(value), [describe(item) for item in value])
    if isinstance(value, list):
        return ("list", str(value), [describe(item) for item in value])
    if isinstance(value, dict):
        return ("dict", str(value), [(describe(key), describe(item)) for key, item in value.items()])
    return ("other", type(value).__name__, str(value))


def outcome(run) -> tuple:
    """``("value", description)`` or ``("error", kind, message)`` of calling ``run``."""
    try:
        return ("value", describe(run()))
    except jinja2.TemplateError as exc:  # Jinja's own errors: the helper raises TemplateError, same message
        return ("error", "TemplateError", str(exc))
    except jinja.TemplateError as exc:
        return ("error", "TemplateError", str(exc))
    except AssertionError as exc:  # jinja's `truncate` asserts its arguments; the helper raises TemplateError
        return ("error", "TemplateError", str(exc))
    except Exception as exc:
        return ("error", type(exc).__name__, None)


def jinja_outcome(source: str, **variables: Any) -> tuple:
    template = _compile_jinja_template(source)
    captured = []

    def capture(value: Any) -> str:
        captured.append(value)
        return ""

    def run():
        template.render(capture=capture, **{name: jinja_value(value) for name, value in variables.items()})
        return captured[0]

    return outcome(run)


# --- edge inputs -----------------------------------------------------------------------------

STRINGS = [
    "",
    "abc",
    "Hello World",
    "hello-world (a[b]c) <x>",
    "  padded\t\n",
    "héllo wörld ✓ 日本語",
    "<b>&amp;</b> \"q\" 'a'",
    "a\nb\r\nc\n\n",
    "line one\n\nline three\u2028four",
    "The quick brown fox jumps over the lazy dog and keeps running far away",
    "42",
    "-3.5",
    "0x1A",
    "1e3",
    " 7 ",
    "%s and %s",
    "%(a)s!",
    "a/b c&d=e?f",
    "UPPER",
    "lower",
]
NUMBERS = [0, 1, -7, 3.7, 2.5, -0.5, 10**20, 1e300, float("inf"), True, False]
CONTAINERS = [
    [],
    [3, 1, 2],
    ["b", "A", "c", "a", "B"],
    [{"a": 1, "b": "x"}, {"a": 2}, {"a": 1, "b": "Y"}, {"a": "A", "b": "y"}],
    [[1, 2], [3], []],
    ["x", None, "", 0, True, 2],
    [1, 2, 3, 4, 5, 6, 7],
    [{"name": "Bob", "age": 30}, {"name": "alice", "age": 25}, {"name": "Carol"}],
    {},
    {"k": "v", "A": 2, "b": None},
    {"b": 1, "a": 2, "C": 3},
    {"nested": {"x": [1, {"y": 2}]}, "list": [1, 2]},
    [{"city": "NY", "n": 1}, {"city": "ny", "n": 2}, {"city": "LA", "n": 3}, {"n": 4}],
    [{"a": {"b": "x"}}, {"a": {"b": "Y"}}, {"a": {"b": "x"}}],
    [Markup("<a>"), "<b>", "c"],
    [["k", "v"], ["a", 1]],
    ["é", "E", "e", "É"],
]
SPECIAL = [None, Markup("<i>safe</i> & x"), Markup(""), UNDEF]
VALUES = STRINGS + NUMBERS + CONTAINERS + SPECIAL

# Per filter: the argument lists to try, as (args, kwargs).
NO_ARGS: list[tuple[tuple, dict]] = [((), {})]
FILTER_ARGUMENTS: dict[str, list[tuple[tuple, dict]]] = {
    "abs": NO_ARGS,
    "attr": [(("a",), {}), (("upper",), {}), (("items",), {}), (("append",), {}), (("__class__",), {}), ((0,), {})],
    "batch": [((2,), {}), ((3,), {"fill_with": "-"}), ((1,), {})],
    "capitalize": NO_ARGS,
    "center": [((), {}), ((9,), {}), ((2,), {})],
    "count": NO_ARGS,
    "d": [((), {}), (("D",), {}), (("D", True), {})],
    "default": [((), {}), (("D",), {}), (("D",), {"boolean": True}), ((None, False), {})],
    "dictsort": [((), {}), ((True,), {}), ((), {"by": "value"}), ((), {"reverse": True}), ((), {"by": "x"})],
    "e": NO_ARGS,
    "escape": NO_ARGS,
    "filesizeformat": [((), {}), ((True,), {})],
    "first": NO_ARGS,
    "float": [((), {}), ((-1.0,), {})],
    "forceescape": NO_ARGS,
    "format": [((), {}), (("x", "y"), {}), ((), {"a": "<A>"}), (("x",), {"a": 1})],
    "groupby": [
        (("a",), {}),
        (("a",), {"default": "?"}),
        (("a",), {"case_sensitive": True}),
        ((0,), {}),
        (("city",), {"default": "XX"}),
        (("city",), {"default": "XX", "case_sensitive": True}),
        (("a.b",), {}),
    ],
    "indent": [((), {}), ((2,), {}), ((2, True), {}), ((2, False, True), {}), (("> ",), {"first": True})],
    "int": [((), {}), ((-1,), {}), ((), {"base": 16}), ((7, 2), {})],
    "items": NO_ARGS,
    "join": [((), {}), ((", ",), {}), ((Markup("<br>"),), {}), ((", ",), {"attribute": "a"}), (("|", 0), {})],
    "last": NO_ARGS,
    "length": NO_ARGS,
    "list": NO_ARGS,
    "lower": NO_ARGS,
    "map": [
        (("upper",), {}),
        (("string",), {}),
        (("default", "D"), {}),
        (("join", "-"), {}),
        (("nosuchfilter",), {}),
        ((), {"attribute": "a"}),
        ((), {"attribute": "a", "default": 0}),
        ((), {"attribute": "0"}),
        ((), {"attribute": "nested.x.1.y"}),
        ((), {"attribute": "a", "other": 1}),
        ((), {}),
    ],
    "max": [((), {}), ((True,), {}), ((), {"attribute": "a"}), ((), {"attribute": "age"})],
    "min": [((), {}), ((True,), {}), ((), {"attribute": "a"}), ((), {"attribute": "age"})],
    "pprint": NO_ARGS,
    "reject": [((), {}), (("odd",), {}), (("equalto", "a"), {}), (("in", [1, "a"]), {}), (("nosuchtest",), {})],
    "rejectattr": [(("a",), {}), (("a", "equalto", 1), {}), (("b", "defined"), {}), (("age", ">", 26), {}), ((), {})],
    "replace": [(("a", "A"), {}), (("l", "L", 1), {}), (("", "-"), {}), ((1, 2), {})],
    "reverse": NO_ARGS,
    "round": [((), {}), ((1,), {}), ((0, "floor"), {}), ((1, "ceil"), {}), ((0, "up"), {})],
    "safe": NO_ARGS,
    "select": [((), {}), (("odd",), {}), (("equalto", "a"), {}), (("string",), {}), (("nosuchtest",), {})],
    "selectattr": [(("a",), {}), (("a", "equalto", 1), {}), (("b", "defined"), {}), (("age", ">", 26), {}), ((), {})],
    "slice": [((2,), {}), ((3,), {"fill_with": 0}), ((1,), {})],
    "sort": [
        ((), {}),
        ((True,), {}),
        ((False, True), {}),
        ((), {"attribute": "a"}),
        ((), {"attribute": "age,name"}),
        ((), {"attribute": "1"}),
        ((), {"attribute": "a.b"}),
        ((), {"attribute": "n", "reverse": True}),
    ],
    "string": NO_ARGS,
    "striptags": NO_ARGS,
    "sum": [((), {}), ((), {"attribute": "a"}), ((), {"start": 10}), ((), {"attribute": "age", "start": 1})],
    "title": NO_ARGS,
    "tojson": [
        ((), {}),
        ((), {"ensure_ascii": True}),
        ((), {"indent": 2}),
        ((), {"separators": (",", ":")}),
        ((), {"sort_keys": True}),
        ((True, 1, (", ", ": "), True), {}),
    ],
    "trim": [((), {}), (("a",), {}), (("\n ",), {})],
    "truncate": [
        ((), {}),
        ((10,), {}),
        ((10, True), {}),
        ((10, False, "…", 0), {}),
        ((2,), {}),
        ((9, False, "...", -1), {}),
    ],
    "unique": [((), {}), ((True,), {}), ((), {"attribute": "a"}), ((), {"attribute": "a.b"})],
    "upper": NO_ARGS,
    "urlencode": NO_ARGS,
    "urlize": [
        ((), {}),
        ((10,), {}),
        ((None, True), {}),
        ((), {"target": "_blank", "rel": "ugc"}),
        ((), {"extra_schemes": ["ftp://", "tel:"]}),
        ((), {"extra_schemes": ["bad scheme"]}),
    ],
    "wordcount": NO_ARGS,
    "wordwrap": [((), {}), ((10,), {}), ((5, False), {}), ((10, True, "<br>"), {}), ((6, True, None, False), {})],
    "xmlattr": [((), {}), ((False,), {})],
}

# Extra inputs some filters only show their edges on.
EXTRA_VALUES: dict[str, list] = {
    "urlencode": [[["a b", "c&d"], ["é", 1]], {"q": "a b/c", "n": 1}],
    "urlize": [
        "see https://example.com/a?b=1&c=2, or www.python.org.",
        "(http://x.org/wiki/Foo_(bar)) <http://a.io> &lt;www.b.com&gt;",
        "mail me@example.com or mailto:you@ex.org, not @a@b or a@b",
        "example.com and sub.example.net/path http://1.2.3.4:8080/x http://[::1]/",
        "ftp://files.org tel:+123 xn--bcher-kva.example",
        Markup("<b>https://safe.example</b>"),
        "http://averyveryverylongdomainname.example.com/with/a/long/path",
    ],
    "xmlattr": [{"class": "x", "id": None, "data-x": "<&>"}, {"bad key": 1}, {"a": UNDEF}],
    "filesizeformat": [1000, 1024, 1536, 10**9, 10**30, "12345"],
    "format": [Markup("<p>%s</p>")],
    "attr": [jinja.Undefined("u")],
}


def filter_cases() -> list[tuple[str, tuple, dict]]:
    return [(name, args, kwargs) for name in sorted(jinja.FILTERS) for args, kwargs in FILTER_ARGUMENTS[name]]


def _case_id(case: tuple) -> str:
    name, args, kwargs = case
    shown = [repr(argument) for argument in args] + [f"{key}={value!r}" for key, value in kwargs.items()]
    return f"{name}({', '.join(shown)})"


@pytest.mark.parametrize("case", filter_cases(), ids=_case_id)
def test_filter_matches_jinja(case):
    name, args, kwargs = case
    function = jinja.FILTERS[name]
    source = "{{ capture(x | " + name + "(*args, **kwargs)) }}"
    mismatches = []
    values = VALUES + EXTRA_VALUES.get(name, [])
    for value in values:
        expected = jinja_outcome(source, x=value, args=list(args), kwargs=kwargs)
        actual = outcome(lambda: function(python_value(value), *[python_value(a) for a in args], **kwargs))
        if actual != expected:
            mismatches.append(f"  x={value!r}: jinja {expected!r}\n{' ' * len(f'  x={value!r}: ')}python {actual!r}")
    assert not mismatches, f"{_case_id(case)}: {len(mismatches)} of {len(values)} inputs differ:\n" + "\n".join(
        mismatches[:15]
    )


@pytest.mark.parametrize("name", sorted(jinja.FILTERS))
def test_result_kinds_declared_for_the_translator(name):
    """STR_FILTERS / MARKUP_FILTERS / MARKUP_KEEPING_FILTERS say what jinja2 itself returns."""
    source = "{{ capture(x | " + name + "(*args, **kwargs)) }}"
    for args, kwargs in FILTER_ARGUMENTS[name]:
        for value in VALUES + EXTRA_VALUES.get(name, []):
            result = jinja_outcome(source, x=value, args=list(args), kwargs=kwargs)
            if result[0] != "value":
                continue
            kind = result[1][0]
            where = f"{name}{args!r}{kwargs!r} on {value!r} gave {kind}"
            if name in jinja.STR_FILTERS:
                assert kind in ("str", "Markup"), where
            if name in jinja.MARKUP_FILTERS:
                assert kind == "Markup", where
            elif name in jinja.MARKUP_KEEPING_FILTERS and isinstance(value, str):
                assert (kind == "Markup") == isinstance(value, Markup), where
            elif name in jinja.STR_FILTERS:
                assert kind == "str", where


# --- tests (``x is name``) ---------------------------------------------------------------------

TEST_ARGUMENTS: dict[str, list[tuple]] = {
    "divisibleby": [(3,), (2,)],
    "eq": [("abc",), (1,), (None,)],
    "equalto": [("abc",), (0,)],
    "ne": [("abc",), (1,)],
    "lt": [(2,), ("b",)],
    "lessthan": [(2,)],
    "le": [(1,)],
    "gt": [(2,), ("b",)],
    "greaterthan": [(2,)],
    "ge": [(1,)],
    "==": [("abc",), (1,)],
    "!=": [("abc",)],
    "<": [(2,)],
    "<=": [(1,)],
    ">": [(2,)],
    ">=": [(1,)],
    "sameas": [(None,), (True,), (1,)],
    "in": [([1, "abc", None],), ("abcdef",), ({"k": 1},)],
}
TEST_VALUES = VALUES + ["trim", "odd", "random", "urlize", "nosuch", "==", jinja2.filters.do_trim]


def jinja_test_cases() -> list[tuple[str, tuple]]:
    return [(name, args) for name in sorted(jinja.TESTS) for args in TEST_ARGUMENTS.get(name, [()])]


@pytest.mark.parametrize("case", jinja_test_cases(), ids=lambda case: f"{case[0]}{case[1]!r}")
def test_test_matches_jinja(case):
    name, args = case
    function = jinja.TESTS[name]
    if name.isidentifier():
        source = "{{ capture(x is " + name + "(*args)) }}"
    else:  # `x is ==(y)` is not Jinja syntax; operators are tests only by name, through select
        source = "{{ capture(([x] | select(test, *args) | list | length) == 1) }}"
    mismatches = []
    for value in TEST_VALUES:
        expected = jinja_outcome(source, x=value, args=list(args), test=name)
        if callable(value):  # a function reaches generated code as itself
            actual = outcome(lambda: bool(function(value, *args)))
        else:
            actual = outcome(lambda: bool(function(python_value(value), *[python_value(a) for a in args])))
        if actual != expected:
            mismatches.append(f"  x={value!r}: jinja {expected!r}, python {actual!r}")
    assert not mismatches, f"is {name}{args!r}: {len(mismatches)} inputs differ:\n" + "\n".join(mismatches[:15])


# --- lookups and the sandbox ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["a", "k", "upper", "items", "append", "update", "pop", "get", "__class__", "_x", 0, 1, 5, -1, "0", None],
)
def test_getitem_and_getattribute_match_jinja(key):
    mismatches = []
    for value in VALUES + [{"_x": 1, "items": 2}]:
        for source, function in (("{{ capture(x[key]) }}", jinja.getitem),):
            expected = jinja_outcome(source, x=value, key=key)
            actual = outcome(lambda: function(python_value(value), key))
            if actual != expected:
                mismatches.append(f"  {source} x={value!r}: jinja {expected!r}, python {actual!r}")
        if isinstance(key, str) and key.isidentifier():
            source = "{{ capture(x." + key + ") }}"
            expected = jinja_outcome(source, x=value)
            actual = outcome(lambda: jinja.getattribute(python_value(value), key))
            if actual != expected:
                mismatches.append(f"  {source} x={value!r}: jinja {expected!r}, python {actual!r}")
    assert not mismatches, "\n".join(mismatches[:15])


@pytest.mark.parametrize(
    "setup, make",
    [
        ("{% set o = namespace(a=1) %}", lambda: jinja.Namespace(a=1)),
        ("{% set o = cycler(1, 2) %}", lambda: jinja.Cycler(1, 2)),
        ("{% set o = joiner() %}", lambda: jinja.Joiner()),
        (
            "{% set o = ([{'a': 1}] | groupby('a'))[0] %}",
            lambda: jinja.groupby(jinja.template_data([{"a": 1}]), "a")[0],
        ),
        ("{% set o = dict(a=1) %}", lambda: jinja.new_dict(a=1)),
    ],
)
@pytest.mark.parametrize("name", ["a", "x", "grouper", "list", "current", "items", "sep", "pop", "_x", "__class__"])
def test_lookups_on_runtime_objects_match_jinja(setup, make, name):
    expected = jinja_outcome(setup + "{{ capture(o." + name + ") }}")
    assert outcome(lambda: jinja.getattribute(make(), name)) == expected
    expected = jinja_outcome(setup + "{{ capture(o[name]) }}", name=name)
    assert outcome(lambda: jinja.getitem(make(), name)) == expected


UNDEFINED_OPERATIONS = {
    "x": lambda x: x,
    "x ~ 'a'": lambda x: str(x) + "a",
    "x + 1": lambda x: x + 1,
    "1 + x": lambda x: 1 + x,
    "x - 1": lambda x: x - 1,
    "x * 2": lambda x: x * 2,
    "x / 2": lambda x: x / 2,
    "x // 2": lambda x: x // 2,
    "x % 2": lambda x: x % 2,
    "x ** 2": lambda x: x**2,
    "-x": lambda x: -x,
    "x < 1": lambda x: x < 1,
    "x >= 1": lambda x: x >= 1,
    "x == y": lambda x: x == jinja.Undefined("y"),
    "x != 1": lambda x: x != 1,
    "x.a": lambda x: x.a,
    "x['a']": lambda x: x["a"],
    "x[0]": lambda x: x[0],
    "x()": lambda x: x(),
    "x | list": lambda x: list(x),
    "x | length": lambda x: len(x),
    "x | string": lambda x: str(x),
    "not x": lambda x: not x,
    "'a' in x": lambda x: "a" in x,
    "x is defined": lambda x: jinja.is_defined(x),
    "x | int": lambda x: jinja.to_int(x),
    "x | float": lambda x: jinja.to_float(x),
    "x | abs": lambda x: abs(x),
    "x | round": lambda x: jinja.filter_round(x),
    "x | sum": lambda x: jinja.filter_sum(x),
}


@pytest.mark.parametrize("expression", sorted(UNDEFINED_OPERATIONS))
@pytest.mark.parametrize(
    "setup, make",
    [
        ("", lambda: jinja.Undefined("x")),
        ("{% set x = {}['k'] %}", lambda: jinja.getitem(jinja.template_data({}), "k")),
    ],
    ids=["variable", "missing key"],
)
def test_undefined_behaves_as_jinja_undefined(expression, setup, make):
    expected = jinja_outcome(setup + "{{ capture(" + expression + ") }}")
    assert outcome(lambda: UNDEFINED_OPERATIONS[expression](make())) == expected


def test_unsafe_attribute_refusal_raises_on_use():
    value = jinja.attr(jinja.template_data([1]), "append")
    assert not value and str(value) == ""
    with pytest.raises(jinja.TemplateError, match="access to attribute 'append' of 'list' object is unsafe."):
        value(2)


# --- globals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, run",
    [
        ("{{ capture(range(*args)) }}", lambda args: jinja.safe_range(*args)),
        ("{{ capture(range(*args) | list) }}", lambda args: list(jinja.safe_range(*args))),
        ("{{ capture(dict(*args)) }}", lambda args: jinja.new_dict(*args)),
        ("{{ capture(dict.fromkeys(*args)) }}", lambda args: jinja.new_dict.fromkeys(*args)),
        ("{{ capture(namespace(*args) | string) }}", lambda args: str(jinja.Namespace(*args))),
        ("{{ capture(raise_exception(*args)) }}", lambda args: jinja.raise_exception(*args)),
        (
            "{% set c = cycler(*args) %}{{ capture([c.next(), c.next(), c.current, c.next()]) }}",
            lambda args: (lambda c: [c.next(), c.next(), c.current, c.next()])(jinja.Cycler(*args)),
        ),
        (
            "{% set c = cycler(*args) %}{% set _ = c.next() %}{% set _ = c.reset() %}{{ capture(c.current) }}",
            lambda args: (lambda c: (c.next(), c.reset(), c.current)[2])(jinja.Cycler(*args)),
        ),
        (
            "{% set j = joiner(*args) %}{{ capture([j(), j(), j()]) }}",
            lambda args: (lambda j: [j(), j(), j()])(jinja.Joiner(*args)),
        ),
    ],
)
@pytest.mark.parametrize(
    "args", [[], [3], [1, 10, 3], [5, 0, -2], [200_000], [{"a": 1}], [["a", "b"]], ["msg"], [" | "], [1, 2]]
)
def test_globals_match_jinja(source, run, args):
    expected = jinja_outcome(source, args=args)
    actual = outcome(lambda: run([python_value(argument) for argument in args]))
    assert actual == expected


def test_namespace_and_strftime_now():
    expected = jinja_outcome("{% set ns = namespace(a=1) %}{% set ns.b = 'x' %}{{ capture(ns | string) }}")
    namespace = jinja.Namespace(a=1)
    namespace.b = "x"
    assert outcome(lambda: str(namespace)) == expected
    assert jinja_outcome("{% set ns = namespace(_a=1) %}")[:2] == outcome(lambda: jinja.Namespace(_a=1))[:2]
    assert jinja_outcome("{{ capture(strftime_now('%Y')) }}") == outcome(lambda: jinja.strftime_now("%Y"))


@pytest.mark.parametrize("format", ["%Y-%m-%d", "%d %b %Y", "%A %B %j %%d", "%H:%M:%S", "%s", "%c", "no fields"])
def test_strftime_now_is_the_local_time_now(format):
    """Date-only formats are remembered for the local day; the text is always what transformers writes."""
    from datetime import datetime

    for _ in range(2):  # the second call may come from memory
        assert jinja.strftime_now(format) == datetime.now().strftime(format)
    from rllm_renderers.jinja import runtime as template_runtime

    assert (format in template_runtime._DATE_TEXTS) == (format in ("%Y-%m-%d", "%d %b %Y", "%A %B %j %%d", "no fields"))


def test_strftime_now_forgets_another_day_locale_or_time_zone():
    from datetime import datetime

    from rllm_renderers.jinja import runtime as template_runtime

    format = "%d %b %Y"
    jinja.strftime_now(format)
    start, end, setting, _ = template_runtime._DATE_TEXTS[format]
    today = datetime.now().strftime(format)
    stale = [
        (start - 86400, start, setting),  # yesterday's entry
        (end, end + 86400, setting),  # tomorrow's (the clock went back)
        (start, end, ("another locale", setting[1])),
        (start, end, (setting[0], ("XST", "XDT"))),
    ]
    for day_start, day_end, other in stale:
        template_runtime._DATE_TEXTS[format] = (day_start, day_end, other, "wrong text")
        assert jinja.strftime_now(format) == today


# --- the registries -------------------------------------------------------------------------------


def test_registries_cover_transformers_environment():
    environment = _compile_jinja_template("").environment
    assert set(jinja.FILTERS) | set(jinja.REFUSED_FILTERS) == set(environment.filters) == set(jinja2.filters.FILTERS)
    assert not set(jinja.FILTERS) & set(jinja.REFUSED_FILTERS)
    assert set(jinja.TESTS) == set(environment.tests) == set(jinja2.tests.TESTS)
    assert set(jinja.GLOBALS) | set(jinja.REFUSED_GLOBALS) == set(environment.globals)
    assert not set(jinja.GLOBALS) & set(jinja.REFUSED_GLOBALS)
    # What is refused, and why (a renderer must be deterministic).
    assert set(jinja.REFUSED_FILTERS) == {"random"}
    assert set(jinja.REFUSED_GLOBALS) == {"lipsum"}
    assert jinja.MARKUP_FILTERS <= jinja.STR_FILTERS <= set(jinja.FILTERS)
    assert jinja.MARKUP_KEEPING_FILTERS <= set(jinja.FILTERS) - jinja.MARKUP_FILTERS


@pytest.mark.parametrize("registry", [jinja.FILTERS, jinja.TESTS, jinja.GLOBALS], ids=["FILTERS", "TESTS", "GLOBALS"])
def test_every_helper_is_reachable_by_its_name(registry):
    # The translator emits `jinja.<helper.__name__>(...)`.
    for name, helper in registry.items():
        assert getattr(jinja, helper.__name__) is helper, name
        assert helper.__name__ in jinja.__all__, name


def test_tests_are_named_is_something():
    assert all(test.__name__.startswith("is_") for test in jinja.TESTS.values())


def test_importing_the_runtime_loads_no_jinja2():
    code = "import sys, rllm_renderers.jinja.runtime; print('jinja2' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert result.stdout.strip() == "False"


# --- generated inputs -------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))

TEXT = st.text(
    alphabet=st.sampled_from(list("ab AZ-_.,:;!?()[]{}<>&\"'%/\\\t\n\r\x0b\x0c\x1c\x85\u2028é✓日😀0129")), max_size=40
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.floats(-1e6, 1e6), TEXT)
JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(TEXT, children, max_size=4)),
    max_leaves=10,
)

STRING_FILTER_CALLS = st.one_of(
    st.tuples(
        st.sampled_from(["trim", "upper", "lower", "capitalize", "title", "wordcount", "striptags"]), st.just(())
    ),
    st.tuples(
        st.sampled_from(["escape", "forceescape", "urlencode", "urlize", "pprint", "reverse", "list", "string"]),
        st.just(()),
    ),
    st.tuples(st.just("trim"), st.tuples(TEXT)),
    st.tuples(st.just("center"), st.tuples(st.integers(0, 50))),
    st.tuples(st.just("indent"), st.tuples(st.one_of(st.integers(0, 4), TEXT), st.booleans(), st.booleans())),
    st.tuples(st.just("truncate"), st.tuples(st.integers(3, 30), st.booleans(), st.just("..."), st.integers(0, 5))),
    st.tuples(
        st.just("wordwrap"), st.tuples(st.integers(1, 20), st.booleans(), st.sampled_from(["\n", "|"]), st.booleans())
    ),
    st.tuples(st.just("replace"), st.tuples(TEXT, TEXT)),
    st.tuples(st.just("int"), st.tuples(st.integers(-1, 1), st.sampled_from([0, 2, 8, 10, 16, 36]))),
    st.tuples(st.just("float"), st.just(())),
    st.tuples(st.just("format"), st.tuples(TEXT)),
    st.tuples(st.just("sort"), st.tuples(st.booleans(), st.booleans())),
    st.tuples(st.just("unique"), st.tuples(st.booleans())),
    st.tuples(st.sampled_from(["min", "max"]), st.tuples(st.booleans())),
    st.tuples(st.just("batch"), st.tuples(st.integers(1, 5), SCALARS)),
    st.tuples(st.just("slice"), st.tuples(st.integers(1, 5), SCALARS)),
    st.tuples(st.just("join"), st.tuples(TEXT)),
    st.tuples(st.sampled_from(["first", "last", "length", "items", "dictsort", "tojson", "xmlattr"]), st.just(())),
    st.tuples(st.just("select"), st.sampled_from([(), ("string",), ("lower",), ("upper",), ("number",)])),
)


@FUZZ
@given(call=STRING_FILTER_CALLS, value=st.one_of(TEXT, TEXT.map(Markup), JSON))
def test_filters_on_generated_inputs(call, value):
    name, args = call
    expected = jinja_outcome("{{ capture(x | " + name + "(*args)) }}", x=value, args=list(args))
    actual = outcome(lambda: jinja.FILTERS[name](python_value(value), *args))
    assert actual == expected, f"{name}{args!r} on {value!r}"


@FUZZ
# (`sameas` is identity: whether two equal strings are one object is CPython's business, not Jinja's.)
@given(
    name=st.sampled_from(sorted(name for name in jinja.TESTS if name.isidentifier() and name != "sameas")),
    value=JSON,
    other=JSON,
)
def test_tests_on_generated_inputs(name, value, other):
    function = jinja.TESTS[name]
    arity = 1 if name in TEST_ARGUMENTS else 0
    args = [other][:arity]
    expected = jinja_outcome("{{ capture(x is " + name + "(*args)) }}", x=value, args=args)
    actual = outcome(lambda: bool(function(python_value(value), *[python_value(a) for a in args])))
    assert actual == expected, f"{name}{args!r} on {value!r}"


RECORD_VALUES = st.one_of(st.integers(-3, 3), st.sampled_from(["a", "B", "b", "A", "", "é"]), st.none(), st.booleans())
RECORDS = st.lists(
    st.dictionaries(
        st.sampled_from(["k", "v", "n"]),
        st.one_of(RECORD_VALUES, st.dictionaries(st.just("x"), RECORD_VALUES, max_size=1)),
        max_size=3,
    ),
    max_size=6,
)
ATTRIBUTE = st.sampled_from(["k", "v", "n", "n.x", "k.0", "missing"])
ATTRIBUTE_CALLS = st.one_of(
    st.tuples(st.just("map"), st.just(()), st.fixed_dictionaries({"attribute": ATTRIBUTE})),
    st.tuples(st.just("map"), st.just(()), st.fixed_dictionaries({"attribute": ATTRIBUTE, "default": RECORD_VALUES})),
    st.tuples(st.sampled_from(["selectattr", "rejectattr"]), st.tuples(ATTRIBUTE), st.just({})),
    st.tuples(
        st.sampled_from(["selectattr", "rejectattr"]),
        st.tuples(ATTRIBUTE, st.sampled_from(["defined", "none", "string", "odd", "true"])),
        st.just({}),
    ),
    st.tuples(
        st.sampled_from(["selectattr", "rejectattr"]),
        st.tuples(ATTRIBUTE, st.sampled_from(["eq", "ne", "gt", "in"]), RECORD_VALUES),
        st.just({}),
    ),
    st.tuples(
        st.sampled_from(["sort", "unique", "min", "max"]),
        st.just(()),
        st.fixed_dictionaries({"attribute": ATTRIBUTE, "case_sensitive": st.booleans()}),
    ),
    st.tuples(st.just("sort"), st.just(()), st.fixed_dictionaries({"attribute": st.sampled_from(["k,v", "n.x,k"])})),
    st.tuples(
        st.just("groupby"),
        st.tuples(ATTRIBUTE),
        st.fixed_dictionaries({"default": RECORD_VALUES, "case_sensitive": st.booleans()}),
    ),
    st.tuples(st.just("sum"), st.just(()), st.fixed_dictionaries({"attribute": ATTRIBUTE})),
    st.tuples(st.just("join"), st.tuples(st.just(","), ATTRIBUTE), st.just({})),
)


@FUZZ
@given(call=ATTRIBUTE_CALLS, records=RECORDS)
def test_attribute_forms_on_generated_records(call, records):
    name, args, kwargs = call
    expected = jinja_outcome(
        "{{ capture(x | " + name + "(*args, **kwargs)) }}", x=records, args=list(args), kwargs=kwargs
    )
    actual = outcome(lambda: jinja.FILTERS[name](python_value(records), *args, **kwargs))
    assert actual == expected, f"{name}{args!r}{kwargs!r} on {records!r}"


# --- tojson with an indent (written by the runtime itself, not json's pure-Python generators) ----

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    | st.dictionaries(st.integers(), inner, max_size=2),
    max_leaves=25,
)


@FUZZ
@given(
    value=JSON_VALUES,
    indent=st.sampled_from([0, 1, 2, 4, -1, "", "\t", "--"]),
    ensure_ascii=st.booleans(),
    separators=st.sampled_from([None, (",", ":"), (" , ", " : ")]),
)
def test_indented_tojson_is_json_dumps(value, indent, ensure_ascii, separators):
    import json

    want = json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators)
    for given_value in (value, jinja.template_data(value)):
        assert jinja.tojson(given_value, ensure_ascii, indent, separators) == want


def test_indented_tojson_leaves_the_rest_to_json_dumps():
    import json

    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        jinja.tojson(cycle, indent=2)
    deep: Any = "x"
    for _ in range(100):
        deep = {"k": [deep]}
    assert jinja.tojson(deep, indent=1) == json.dumps(deep, indent=1, ensure_ascii=False)
    with pytest.raises(TypeError, match="Undefined is not JSON serializable"):
        jinja.tojson({"a": [jinja.Undefined("x")]}, indent=2)
    assert jinja.tojson({"b": 1, "a": Markup("<x>")}, indent=2, sort_keys=True) == '{\n  "a": "<x>",\n  "b": 1\n}'
    # plain data (a tools list) is written by the runtime's own writer, not handed on
    from rllm_renderers.jinja import filters as template_filters

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": ["a"],
              "properties": {"a": {"type": "number", "default": 1.5}, "b": {"enum": [True, None, "é"]}}}}}]  # fmt: skip
    assert template_filters._indented_json(jinja.template_data(tools), 4, False, None) == json.dumps(tools, indent=4, ensure_ascii=False)


# --- input messages as the template sees them --------------------------------------------------

_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))
_json_values = st.recursive(
    _json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8
)
_message_keys = st.sampled_from(["role", "content", "reasoning_content", "thinking", "reasoning", "tool_calls", "name", "x"])


def _wrapped_shape(value: Any) -> Any:
    """A value with its wrapper types spelled out, so that equal shapes mean equal template data."""
    if isinstance(value, dict):
        return (type(value), [(key, _wrapped_shape(item)) for key, item in value.items()])
    if isinstance(value, list):
        return (type(value), [_wrapped_shape(item) for item in value])
    return (type(value), value)


@FUZZ
@given(st.dictionaries(_message_keys, _json_values, max_size=6))
def test_template_message_is_the_message_as_transformers_hands_it(message):
    """``template_message`` is ``template_data`` of the message with None values dropped and the first
    reasoning field aliased as ``thinking`` (first) and ``reasoning_content`` (last)."""
    fields = ("reasoning_content", "thinking", "reasoning")
    plain = {key: value for key, value in message.items() if value is not None}
    reasoning = next((plain[key] for key in fields if key in plain), None)
    if reasoning is not None:
        plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
    assert _wrapped_shape(jinja.template_message(message, fields)) == _wrapped_shape(jinja.template_data(plain))


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool", "robot"]), "content": st.text(max_size=6)}),
            st.fixed_dictionaries({"content": st.one_of(st.text(max_size=6), st.none(), st.integers()), "role": st.sampled_from(["user", "assistant"])}),
            st.dictionaries(_message_keys, _json_values, max_size=3).map(lambda m: {"role": "user", **m}),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_template_inputs_fast_path_is_the_general_conversion(messages):
    """``template_inputs`` takes a shortcut for ``{"role": str, "content": str}`` messages; it must give
    what normalizing then ``template_message`` gives (key order included), and refuse what that refuses."""
    from rllm_renderers.core.base import REASONING_FIELDS
    from rllm_renderers.generated.qwen3 import Qwen3Renderer

    from rllm_renderers.jinja.caller_text import caller_data

    renderer = Qwen3Renderer(None)
    try:
        normalized = renderer.normalize_messages(messages)
    except ValueError as refusal:
        with pytest.raises(ValueError) as raised:
            renderer.template_inputs(messages, None)
        assert str(raised.value) == str(refusal)
        return
    # with the caller-text marks (attribution) and without them (a render whose text is all that is asked for)
    for marked in (True, False):
        expected = [jinja.template_message(caller_data(m) if marked else m, REASONING_FIELDS) for m in normalized]
        got, _ = renderer.template_inputs(messages, None, marked=marked)
        assert _wrapped_shape(list(got)) == _wrapped_shape(expected)

"""The generated renderer refuses what transformers' sandbox refuses, and renders what it renders.

transformers renders a chat template in jinja2's ``ImmutableSandboxedEnvironment``; a generated
renderer checks the same things through ``rllm_renderers.jinja`` (attribute and item lookups,
``str.format`` / ``format_map`` with the sandbox's formatter, methods that mutate, ``range``).

* The first part compares those runtime checks with jinja2's own sandbox on the same values.
* The second compiles the cases of jinja2's security tests that apply to a chat template (its
  ``tests/test_security.py`` and the ``MAX_RANGE`` case of ``tests/test_api.py``; inputs written
  here in their style, as template data rather than Python objects), and 20 hostile snippets,
  each alone and behind a trigger (a message whose content is a magic word), and renders each
  both ways: the renderer raises where transformers raises and gives its text otherwise, or the
  compiler refuses the template with a ``CompileError``.
"""

from __future__ import annotations

import types
from collections import deque

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment, modifies_known_mutable

from compiler.errors import CompileError
from rllm_renderers.jinja import runtime as jinja
from rllm_renderers.jinja import values
from rllm_renderers.jinja.values import is_safe_attribute, template_data, wrap_str_format
from tests.test_translate import check, emit

SECRET = "s3cr3t-value-in-the-environment"
SANDBOX = ImmutableSandboxedEnvironment()

# --- the runtime's checks against jinja2's sandbox -------------------------------------------------


def _generator():
    yield 1


VALUES = [
    "text",
    template_data("text"),
    template_data({"role": "user", "content": "hi", "items": 3}),
    template_data([1, 2]),
    {"k": 1},
    [1],
    {1, 2},
    deque([1]),
    42,
    1.5,
    None,
    str,
    jinja.raise_exception,
    jinja.Namespace(a=1),
    jinja.Namespace,
    jinja.Cycler(1, 2),
    jinja.Joiner(),
    _generator(),
    (lambda: 0).__code__,
]
NAMES = [
    "upper",
    "format",
    "format_map",
    "items",
    "keys",
    "get",
    "update",
    "pop",
    "popitem",
    "setdefault",
    "clear",
    "append",
    "extend",
    "insert",
    "remove",
    "sort",
    "reverse",
    "add",
    "discard",
    "difference_update",
    "appendleft",
    "rotate",
    "mro",
    "gi_frame",
    "gi_code",
    "co_code",
    "__class__",
    "__globals__",
    "_private",
    "__init__",
    "a",
    "current",
]


@pytest.mark.parametrize("value", VALUES, ids=lambda value: type(value).__name__)
def test_attribute_rules_are_the_sandboxs(value):
    for name in NAMES:
        found = getattr(value, name, None)
        assert is_safe_attribute(value, name) == SANDBOX.is_safe_attribute(value, name, found), name
        assert values.modifies_known_mutable(value, name) == modifies_known_mutable(value, name), name


def _outcome(lookup, *arguments):
    """What a lookup gives, in comparable form: the value's text, or the error it raises when used."""
    try:
        value = lookup(*arguments)
        if callable(value) and getattr(value, "__name__", "") in ("format", "format_map"):
            return ("format", value("{0}", "x") if value.__name__ == "format" else value({"0": "x"}))
        text = str(value)
        return ("text", "<a bound method>" if text.startswith(("<built-in method", "&lt;built-in method")) else text)
    except Exception as exc:  # noqa: BLE001 (the kind is compared)
        return ("error", str(exc))


@pytest.mark.parametrize("value", VALUES[:8], ids=lambda value: type(value).__name__)
def test_lookups_give_what_the_sandbox_gives(value):
    for name in NAMES:
        assert _outcome(jinja.getattribute, value, name) == _outcome(SANDBOX.getattr, value, name), name
        assert _outcome(jinja.getitem, value, name) == _outcome(SANDBOX.getitem, value, name), name


FORMATS = [
    "a{0.__class__}b",
    "a{0}b{1}",
    "{}{}",
    "{0[0]}",
    "{0.foo}",
    "{0[foo]}",
    "{0.upper}",  # (a bound method's text holds its address: only compared when it is an error)
    "{0.__class__.__mro__}",
    "{0[__class__]}",
    "{0!r:>10}",
    "{0:{1}}",
    "{x}",
    "{",
    "{0.__globals__[os]}",
]
# (plain data for jinja2, wrapped for the runtime: transformers hands a template plain dicts and lists)
ARGUMENTS = [{"foo": 42}, "<b>", ["z"], jinja.raise_exception, 7]


@pytest.mark.parametrize("markup", [False, True])
@pytest.mark.parametrize("text", FORMATS)
def test_str_format_is_the_sandboxs_formatter(text: str, markup: bool):
    from markupsafe import Markup

    value = Markup(text) if markup else text
    for first in ARGUMENTS:
        for method, call_arguments in (("format", [first, ">"]), ("format_map", [{"0": first, "x": first}])):
            ours = wrap_str_format(getattr(value, method))
            theirs = SANDBOX.wrap_str_format(getattr(value, method))
            wrapped = [template_data(argument) for argument in call_arguments]
            assert _outcome(ours, *wrapped) == _outcome(theirs, *call_arguments), (method, first)
    assert _outcome(wrap_str_format(value.format_map), {}, 1) == _outcome(
        SANDBOX.wrap_str_format(value.format_map), {}, 1
    )


def test_every_callable_the_runtime_hands_a_template_is_safely_callable():
    """The sandbox's other call check, ``is_safe_callable``, refuses only objects marked ``unsafe``
    (or Django's ``alters_data``): none of the runtime's callables is."""
    callables = [*jinja.GLOBALS.values(), jinja.new_dict.fromkeys, jinja.Joiner(), jinja.Cycler(1).next]
    callables += [wrap_str_format("{}".format), template_data("x").upper, template_data({}).items]
    for function in callables:
        assert SANDBOX.is_safe_callable(function), function


def test_the_range_limit_is_the_sandboxs():
    from jinja2.sandbox import MAX_RANGE, safe_range

    assert jinja.MAX_RANGE == MAX_RANGE
    assert list(jinja.safe_range(0, MAX_RANGE * 2, 2)) == list(safe_range(0, MAX_RANGE * 2, 2))
    for arguments in [(MAX_RANGE + 1,), (0, MAX_RANGE * 3, 2), (-MAX_RANGE, MAX_RANGE)]:
        with pytest.raises(OverflowError) as theirs:
            safe_range(*arguments)
        with pytest.raises(OverflowError, match=str(theirs.value).replace("(", r"\(").replace(")", r"\)")):
            jinja.safe_range(*arguments)


# --- jinja2's security tests, as chat templates -----------------------------------------------------

USER = [{"role": "user", "content": "hi"}]

#: (case, template, messages, knobs, "same" | "refused"): "refused" is refused at compile time.
JINJA_SECURITY_CASES = [
    ("private method", "{{ messages[0].content._foo() }}", USER, {}, "same"),
    ("public method", "{{ messages[0].content.upper() }}", USER, {}, "same"),
    ("__class__ of a number", "{{ foo.__class__ }}", USER, {"foo": 42}, "same"),
    ("internal attribute of a function", "{{ raise_exception.func_code }}", USER, {}, "same"),
    ("__subclasses__ through __class__", "{{ foo.__class__.__subclasses__() }}", USER, {"foo": 42}, "same"),
    ("list.append", "{{ [].append(23) }}", USER, {}, "same"),
    ("list.clear", "{{ [].clear() }}", USER, {}, "same"),
    ("list.pop", "{{ [1].pop() }}", USER, {}, "same"),
    ("dict.clear", "{{ {1: 2}.clear() }}", USER, {}, "same"),
    ("input list.append", "{{ messages.append(messages[0]) }}{{ messages | length }}", USER, {}, "same"),
    ("input dict.update", "{{ messages[0].update({'role': 'x'}) }}", USER, {}, "same"),
    ("loop target attribute", "{% for item.attribute in messages %}x{% endfor %}", USER, {}, "refused"),
    ("tuple target attribute", "{% for foo, bar.baz in messages %}x{% endfor %}", USER, {}, "refused"),
    (
        "attr filter __subclasses__",
        '{{ (foo | attr("__class__") | attr("__subclasses__"))() }}',
        USER,
        {"foo": 1},
        "same",
    ),
    ("format __class__", '{{ "a{0.__class__}b".format(42) }}', USER, {}, "same"),
    ("format item as attribute", '{{ "a{0.foo}b".format({"foo": 42}) }}', USER, {}, "same"),
    ("safe format __class__", '{{ ("a{0.__class__}b{1}" | safe).format(42, "<foo>") }}', USER, {}, "same"),
    ("safe format escapes", '{{ ("a{0.foo}b{1}" | safe).format({"foo": 42}, "<foo>") }}', USER, {}, "same"),
    ("empty braces", '{{ "a{}b{}".format("foo", "42") }}{{ ("a{}b{}" | safe).format(42, "<foo>") }}', USER, {}, "same"),
    ("format_map __class__", '{{ "a{x.__class__}b".format_map({"x": 42}) }}', USER, {}, "same"),
    ("format_map item as attribute", '{{ "a{x.foo}b".format_map({"x": {"foo": 42}}) }}', USER, {}, "same"),
    (
        "safe format_map escapes",
        '{{ ("a{x.foo}b{y}" | safe).format_map({"x": {"foo": 42}, "y": "<foo>"}) }}',
        USER,
        {},
        "same",
    ),
    (
        "format kept in a namespace, called later",
        '{% set ns = namespace(run="{0.__call__.__builtins__[__import__]}".format) %}{{ ns.run(not_here) }}',
        USER,
        {},
        "same",
    ),
    (
        "attr filter format",
        '{{ ("{0.__call__.__builtins__[__import__]}" | attr("format"))(not_here) }}',
        USER,
        {},
        "same",
    ),
    (
        "items of a dict with an items key",
        "{{ foo.items() | list }}{{ foo['items'] }}",
        USER,
        {"foo": {"items": 42}},
        "same",
    ),
    ("attr filter items", '{{ (foo | attr("items"))() | list }}', USER, {"foo": {"items": 42}}, "same"),
    ("range over MAX_RANGE", "{% for item in range(total) %}{{ item }}{% endfor %}", USER, {"total": 100_001}, "same"),
    ("range at MAX_RANGE", "{{ range(total) | length }}", USER, {"total": 100_000}, "same"),
    (
        # the translator reads this loop as a loop over the messages; the sandbox's range() still runs
        "range over the messages' positions",
        "{% for i in range(messages | length) %}{% set m = messages[i] %}{{ m.content }}{% endfor %}",
        [{"role": "user", "content": "a"}] * 100_001,
        {},
        "same",
    ),
]


def run_case(source: str, messages: list[dict], knobs: dict) -> str:
    """``"same"`` when the renderer agrees with transformers (``check`` asserts it), ``"refused"``
    when the compiler refuses the template."""
    try:
        emit(source)
    except CompileError as refusal:
        assert str(refusal).startswith("t.jinja:"), refusal  # the template line, one clear message
        return "refused"
    outcome = check(source, messages=messages, **knobs)
    if outcome[0] == "text":
        assert SECRET not in outcome[1]
    return "same"


@pytest.fixture(autouse=True)
def planted_secret(monkeypatch):
    """What an escape would read: a secret in the environment (``os.environ`` through ``__globals__``)."""
    monkeypatch.setenv("RLLM_SANDBOX_SECRET", SECRET)


@pytest.mark.parametrize("case", JINJA_SECURITY_CASES, ids=[case[0] for case in JINJA_SECURITY_CASES])
def test_jinja2_security_case(case):
    _, source, messages, knobs, expected = case
    assert run_case(source, messages, knobs) == expected


# --- hostile snippets, alone and behind a trigger ---------------------------------------------------

ESCAPE = "{0.__globals__[locale].sys.modules[os].environ[RLLM_SANDBOX_SECRET]}"

#: (name, expression or statement, the conversation it reads): 20 ways a template can reach past its data.
HOSTILE_SNIPPETS = [
    ("format reaches os.environ", f"{{{{ '{ESCAPE}'.format(raise_exception) }}}}", None),
    ("format __class__", "{{ '{0.__class__}'.format(messages[0].content) }}", None),
    ("user message as format string", "{{ messages[0].content.format(raise_exception) }}", ESCAPE),
    ("user message as format_map string", "{{ messages[0].content.format_map(messages[0]) }}", "{role.__class__}"),
    ("format_map of a dict literal", "{{ '{x.__class__.__mro__}'.format_map({'x': messages}) }}", None),
    ("format kept in a variable", "{% set f = '{0.__init__.__globals__}'.format %}{{ f(namespace) }}", None),
    ("format in a namespace", "{% set ns = namespace(f='{0.__class__.__base__}'.format) %}{{ ns.f(messages) }}", None),
    ("format through an index", "{{ '{0[0].__class__}'.format(messages) }}", None),
    ("function globals", "{{ raise_exception.__globals__ }}", None),
    ("function globals item", "{{ raise_exception.__globals__['os'] }}", None),
    ("subclasses of object", "{{ messages.__class__.__base__.__subclasses__() }}", None),
    ("attr filter __class__", "{{ messages | attr('__class__') }}", None),
    ("map attribute __class__", "{{ messages | map(attribute='__class__') | list }}", None),
    ("mro of a str", "{{ messages[0].content.__class__.__mro__[1].__subclasses__() }}", None),
    ("list.append on the input", "{{ messages.append(messages[0]) }}", None),
    ("dict.update on a message", "{{ messages[0].update({'content': 'x'}) }}", None),
    ("list.pop on the input", "{{ messages.pop() }}", None),
    ("huge range", "{{ range(100001) | length }}", None),
    ("namespace class globals", "{{ namespace.__init__.__globals__['sys'] }}", None),
    ("bound method self", "{{ (messages | first).items.__self__ }}", None),
]

TRIGGER = "xyzzy"


def hostile_conversations(first_content: str | None) -> list[list[dict]]:
    first = [{"role": "user", "content": first_content or "hi"}]
    return [first, [*first, {"role": "user", "content": TRIGGER}]]


@pytest.mark.parametrize("behind_trigger", [False, True], ids=["alone", "behind-trigger"])
@pytest.mark.parametrize("snippet", HOSTILE_SNIPPETS, ids=[snippet[0] for snippet in HOSTILE_SNIPPETS])
def test_hostile_snippet(snippet, behind_trigger: bool):
    _, payload, first_content = snippet
    if behind_trigger:
        source = (
            "{% for m in messages %}{% if m.content == '" + TRIGGER + "' %}" + payload + "{% endif %}"
            "{{ m.role }}: {{ m.content }}\n{% endfor %}"
        )
    else:
        source = payload + "|{{ messages[0].content }}"
    for messages in hostile_conversations(first_content):
        assert run_case(source, messages, {}) == "same"


# --- the sandbox probe verify runs on every template -------------------------------------------------


def test_the_probe_finds_no_unchecked_lookup_in_any_checked_in_renderer():
    from pathlib import Path

    from compiler.sandbox_probe import unchecked_lookups

    folder = Path(__file__).resolve().parents[1] / "generated"
    files = sorted(path for path in folder.glob("*.py") if not path.name.startswith("_"))
    assert len(files) >= 30
    assert {path.name: unchecked_lookups(path.read_text(encoding="utf-8")) for path in files} == {
        path.name: [] for path in files
    }


def test_the_probe_names_every_lookup_that_skips_the_runtime():
    from compiler.sandbox_probe import unchecked_lookups

    code = (
        "def render(self, out, x):\n"
        "    out.append(str(jinja.getattribute(x, '__class__')))\n"  # the runtime's lookup: fine
        "    out.append(self._helper(x))\n"  # the renderer's own attribute: fine
        "    out.append('{0}'.format(x))\n"
        "    out.append(x.__class__)\n"
        "    y = x.append(1)\n"
        "    out.append(getattr(x, 'a'))\n"
    )
    assert unchecked_lookups(code) == ["line 4: '{0}'.format", "line 5: x.__class__", "line 6: x.append", "line 7: getattr"]


def _verify(source: str):
    from compiler.oracle import TemplateOracle
    from compiler.verify import verify
    from tests.test_translate import renderer_class

    return verify(renderer_class(source, {}), TemplateOracle(source, special_tokens={}), cases=0)


FORMATTING_TEMPLATE = "{% for m in messages %}{{ m.content.format(m) }}|{{ m.content.format_map(m) }}{% endfor %}"


def test_verify_probes_the_sandbox_with_hostile_contents():
    report = _verify(FORMATTING_TEMPLATE)
    assert report.ok, report.failure and report.failure.report()
    assert report.sandbox_code_checked and report.sandbox_probes == 6
    assert "sandbox: 6 hostile conversations alike, code checked" in report.summary()


def test_verify_fails_a_renderer_whose_runtime_lost_the_sandbox(monkeypatch):
    """The probe is not vacuous: with the runtime's format sandbox off, verify fails on it."""
    monkeypatch.setattr(values, "wrap_str_format", lambda value: None)
    report = _verify(FORMATTING_TEMPLATE)
    assert report.failure is not None and report.failure.reason.startswith("sandbox probe: "), report.summary()

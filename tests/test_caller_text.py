"""Caller text keeps its marks through what templates do with it, and gives exactly the plain-string text."""

from __future__ import annotations

import json

import pytest
from markupsafe import Markup

from rllm_renderers.jinja import runtime as jinja
from rllm_renderers.jinja.caller_text import CallerText, caller_data, marks_of, sources_by_message


def marked_text(value) -> list[str]:
    """The caller-text pieces of ``value``, as text."""
    return [str.__str__(value)[low:high] for low, high, _ in marks_of(value)]


def test_operations_keep_the_marks_and_the_text():
    text = CallerText("  Hi <b>there</b>  ")
    plain = str.__str__(text)
    cases = {
        "'[' + t + ']'": ("[" + text + "]", "[" + plain + "]"),
        "t.strip()": (text.strip(), plain.strip()),
        "t | trim": (jinja.trim(text), plain.strip()),
        "t[2:4]": (text[2:4], plain[2:4]),
        "t.split('<b>')[-1]": (text.split("<b>")[-1], plain.split("<b>")[-1]),
        "t.replace('there', 'you')": (text.replace("there", "you"), plain.replace("there", "you")),
        "t.upper()": (text.upper(), plain.upper()),
        "str(t)": (str(text), plain),
        "t | tojson": (jinja.tojson(text), json.dumps(plain, ensure_ascii=False)),
        "[t, 'x'] | join(', ')": (jinja.join([text, "x"], ", "), plain + ", x"),
        "concat": (jinja.concat(["<a>", text, "</a>"]), "<a>" + plain + "</a>"),
    }
    for name, (value, expected) in cases.items():
        assert value == expected, name
        assert "".join(marked_text(value)), name  # some of it is still the caller's
    # only the caller's characters are marked
    assert marked_text("[" + text + "]") == [plain]
    assert marked_text(jinja.concat(["<a>", text, "</a>"])) == [plain]
    assert marked_text(text.split("<b>")[-1]) == ["there</b>  "]


def test_tojson_marks_each_string_where_it_stands():
    arguments = jinja.template_data(caller_data({"arguments": {"city": 'Pa"ris', "days": 3}})["arguments"])
    for options in ({}, {"indent": 2}, {"sort_keys": True}, {"separators": (",", ":")}, {"ensure_ascii": True}):
        value = jinja.tojson(arguments, **options)
        assert value == json.dumps({"city": 'Pa"ris', "days": 3}, **{"ensure_ascii": False, **options})
        assert marked_text(value) == ["city", 'Pa\\"ris', "days"]  # (the escaped text of a string)


def test_indent_keeps_the_marks_of_every_line():
    """Command-R+'s ``arguments | tojson(indent=4) | indent(8)``: each line's caller text stays marked."""
    arguments = jinja.template_data(caller_data({"arguments": {"city": "Paris", "days": "3"}})["arguments"])
    text = jinja.tojson(arguments, indent=4)
    lines = CallerText("one\n\ntwo\nthree")
    for value, options in ((text, {}), (text, {"first": True}), (lines, {"blank": True}), (lines, {"width": "> "})):
        indented = jinja.indent(value, **options)
        plain = jinja.indent(str.__str__(value), **options)
        assert indented == plain and type(plain) is str, options
        # every mark kept (the line breaks are the filter's own: it splits the lines and joins them)
        assert "".join(marked_text(indented)) == "".join(marked_text(value)).replace("\n", ""), options
        for low, high, _ in marks_of(indented):  # where its text stands
            assert str.__str__(indented)[low:high] in str.__str__(value)


def test_markup_concatenation_moves_the_marks_where_escaping_puts_the_text():
    name = CallerText("a<b")
    value = (
        name
        + "[ARGS]"
        + jinja.mark_safe(jinja.tojson(jinja.template_data(caller_data({"arguments": {"k": "v"}})["arguments"])))
    )
    assert isinstance(value, Markup) and value == 'a&lt;b[ARGS]{"k": "v"}'
    assert marked_text(value) == ["a&lt;b", "k", "v"]


def test_errors_are_the_plain_strings_errors():
    text = CallerText("x")
    with pytest.raises(TypeError, match=r'can only concatenate str \(not "int"\) to str'):
        text + 1
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for \+: 'int' and 'str'"):
        1 + text
    with pytest.raises(jinja.TemplateError, match="'missing' is undefined"):
        text + jinja.Undefined("missing")


def test_caller_data_marks_text_not_structure():
    message = caller_data(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "hi"}],
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"k": "v"}}}],
        }
    )
    assert type(message["role"]) is str and type(message["content"][0]["type"]) is str
    assert type(message["content"][0]["text"]) is CallerText
    call = message["tool_calls"][0]
    assert type(call["id"]) is CallerText and type(call["type"]) is str
    assert type(call["function"]["name"]) is CallerText
    assert all(type(key) is str for key in call["function"])  # structure
    assert all(type(key) is CallerText for key in call["function"]["arguments"])  # the model's argument names
    wrapped = jinja.template_message(message)
    assert sources_by_message([wrapped])[id(wrapped["content"][0]["text"])] == 0

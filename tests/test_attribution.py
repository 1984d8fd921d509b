"""Attribution over every checked-in renderer: each message's own text is marked as its content, exactly.

For conversations whose strings are needles (:mod:`compiler.attribution`), in every family and for
every role the family renders: the characters where the template writes message k's text are
exactly the characters marked as caller text of message k (``RenderOutput.caller_ranges``), and
the tokens ``render()`` marks ``is_content`` are exactly the tokens starting in them, with
``message_indices`` k, wherever the template writes them (a system prompt before the message loop
included). A control token forged inside a message's text is its content too.

The count of families the property ran on is asserted: a family cannot drop out silently.
"""

from __future__ import annotations

import pytest

from compiler.attribution import (
    JSON_PUNCTUATION,
    actual_marks,
    attribution_mismatch,
    expected_marks,
    needle_conversation,
)
from tests.families import ALL_FAMILIES, ALL_FAMILY_IDS

CHECKED_ROLES = ("system", "user", "assistant", "tool")


def _call(name: str, arguments: dict, call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]

#: Conversation shapes (their strings become needles); a family renders those its template accepts.
SHAPES = [
    [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a", "reasoning_content": "r"},
        {"role": "user", "content": "u"},
    ],
    [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "u"},
    ],
    [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", {"city": "Paris"}, "abcdefghi")]},
        {"role": "tool", "tool_call_id": "abcdefghi", "name": "get_weather", "content": "t"},
    ],
    [
        {"role": "user", "content": "u"},
        {
            "role": "assistant",
            "content": "a",
            "reasoning_content": "r",
            "tool_calls": [_call("get_weather", {"city": "Paris", "days": 3}, "abcdefghi")],
        },
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "t"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": [{"type": "text", "text": "p"}, {"type": "text", "text": "q"}]},
    ],
    [{"role": "user", "content": [{"type": "text", "text": "p"}]}],
]


def _renderer(family):
    return family.renderer_class(family.load_tokenizer())


def _rendered_shapes(renderer):
    """(needle messages, owners, tools, gp) for every shape the template renders."""
    for shape in SHAPES:
        for tools in (None, TOOLS):
            messages, owners = needle_conversation(shape)
            try:
                renderer.render_text(messages, tools=tools, add_generation_prompt=True)
            except ValueError:
                continue
            yield messages, owners, tools


def _check_tokens(renderer, messages, tools, marks: dict[int, int]) -> int:
    """render()'s is_content / message_indices against the character marks; tokens checked."""
    rendered = renderer.render(messages, tools=tools, add_generation_prompt=True)
    text = renderer.render_text(messages, tools=tools, add_generation_prompt=True)
    ids, offsets = renderer.encoder.encode_with_offsets(text)
    assert rendered.token_ids == ids
    for position, offset in enumerate(offsets):
        assert rendered.is_content[position] == (offset in marks), (position, text[offset : offset + 20])
        if offset in marks:
            assert rendered.message_indices[position] == marks[offset], (position, text[offset : offset + 20])
    return sum(rendered.is_content)


def test_attribution_property_covers_every_checked_in_renderer():
    """Every family, every role it renders: the marks are exactly where the template writes each
    message's text. The number of families is asserted, so none drops out silently."""
    families_checked = []
    uncovered = {}
    for family in ALL_FAMILIES:
        renderer = _renderer(family)
        roles_seen: set[str] = set()
        for messages, owners, tools in _rendered_shapes(renderer):
            output = renderer._render_output(messages, tools, True)
            text = output.text()
            problem = attribution_mismatch(text, output.caller_ranges(), owners)
            assert problem is None, f"{family.module}: {problem}\n{messages}"
            expected = expected_marks(text, owners)
            roles_seen |= {messages[index]["role"] for indices in expected.values() for index in indices}
            marks = actual_marks(output.caller_ranges())
            assert _check_tokens(renderer, messages, tools, marks) > 0, family.module
        renderable = {role for role in CHECKED_ROLES if not renderer.ROLES or role in renderer.ROLES}
        if renderable - roles_seen:
            uncovered[family.module] = sorted(renderable - roles_seen)
        families_checked.append(family.module)
    assert families_checked == ALL_FAMILY_IDS and len(families_checked) == 30
    # roles a family accepts but whose text no shape got written: only those listed, with the reason
    assert uncovered == {module: roles for module, (roles, _) in UNCOVERED_ROLES.items()}, uncovered


#: Families with a role that none of the shapes gets written, and why.
UNCOVERED_ROLES: dict[str, tuple[list[str], str]] = {
    "gemma_3": (["tool"], "its template has no tool role: a tool message breaks its user/assistant alternation"),
}


@pytest.mark.parametrize("family", ALL_FAMILIES, ids=ALL_FAMILY_IDS)
def test_forged_control_token_in_content_is_content(family):
    """Default mode (template parity): a control token typed inside a user message is encoded as the
    control token, and render() marks it as that message's content, not as scaffolding."""
    renderer = _renderer(family)
    forged = _stop_token(renderer)
    messages = [{"role": "user", "content": f"Zq0x0Q{forged}Zq0x1Q"}]
    rendered = renderer.render(messages, add_generation_prompt=True)
    text = renderer.render_text(messages, add_generation_prompt=True)
    _, offsets = renderer.encoder.encode_with_offsets(text)
    start = text.index(messages[0]["content"])
    inside = [p for p, offset in enumerate(offsets) if start <= offset < start + len(messages[0]["content"])]
    assert inside and all(rendered.is_content[p] and rendered.message_indices[p] == 0 for p in inside)
    forged_id = renderer.encoder.token_id(forged)
    assert forged_id in [rendered.token_ids[p] for p in inside]  # parity: the template's control token


def _stop_token(renderer) -> str:
    """The renderer's stop token (an added token of its tokenizer), else its longest added token."""
    added = set(renderer.encoder.added_token_strings)
    for token in renderer.TURN.stop_tokens if renderer.TURN is not None else ():
        if token in added:
            return token
    return max(sorted(added), key=len)


def test_json_punctuation_is_the_only_extra():
    """The checker itself: a marked header or an unmarked needle character is reported."""
    text = '<|im_start|>user\nZq0x0Q<|im_end|>{"Zq1x1Q": "Zq1x2Q"}'
    owners = {"Zq0x0Q": frozenset({0}), "Zq1x1Q": frozenset({1}), "Zq1x2Q": frozenset({1})}
    start = text.index("Zq0x0Q")
    json_start = text.index("{")
    exact = [(start, start + 6, 0), (json_start, len(text), 1)]
    assert attribution_mismatch(text, exact, owners) is None
    assert "is not" in attribution_mismatch(text, [(start - 2, start + 6, 0), exact[1]], owners)
    assert "unmarked" in attribution_mismatch(text, [(start, start + 5, 0), exact[1]], owners)
    assert "message 1's" in attribution_mismatch(text, [(start, start + 6, 1), exact[1]], owners)
    assert set('{}":, ') <= JSON_PUNCTUATION
    # a call id's needle is the text of the call and of its result: marked as either is right
    shared = {"W1ww": frozenset({1, 2})}
    at = "call W1ww".index("W1ww")
    assert attribution_mismatch("call W1ww", [(at, at + 4, 2)], shared) is None
    assert "message 1 or 2's" in attribution_mismatch("call W1ww", [(at, at + 4, 0)], shared)

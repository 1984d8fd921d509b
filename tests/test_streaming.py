"""The streaming parser (rllm_renderers.turns.streaming) against parse_response.

Property: for every generated family and every sampled turn of the conversation generator, fed in
chunks cut at random points, the concatenated deltas are exactly what parse_response reads from the
whole turn (reasoning, content, and the tool calls of the message, arguments as JSON), nothing is
ever taken back, and finish() returns parse_response itself.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from compiler.stability import without_local_constants
from compiler.turn_sampling import reasoned_turn, sampled_turn
from rllm_renderers.turns.messages import RENDERABLE_CALLS
from rllm_renderers.turns.streaming import Delta, StreamingParser, arguments_text
from tests.engines.scripted_turns import TOOLS
from tests.families import ALL_FAMILIES, ALL_FAMILY_IDS, FAMILIES, assert_turns_checked
from tests.test_turns import cases_for, splits

SETTINGS = settings(
    max_examples=12, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
)

#: Templates none of whose drawn turns is one a model samples (module -> why); every other family
#: must check some.
NO_STREAMED_TURN: dict[str, str] = {}


def message_of(parsed) -> tuple:
    """(reasoning, content, [(name, arguments JSON)]) of a ParsedResponse: the message a client gets."""
    calls = [call for call in parsed.tool_calls if getattr(call.status, "value", call.status) in RENDERABLE_CALLS]
    return parsed.reasoning_content or "", parsed.content, [(call.name or "", arguments_text(call.arguments)) for call in calls]


def joined(deltas: list[Delta]) -> tuple:
    """The message the deltas build, checking each call arrives once, whole, in index order."""
    calls: list[tuple] = []
    for delta in deltas:
        for call in delta.tool_calls:
            assert call.index == len(calls) and call.id and call.name is not None, call
            calls.append((call.name, call.arguments))
    return "".join(d.reasoning for d in deltas), "".join(d.content for d in deltas), calls


def stream_ids(renderer, completion, prompt, tools, cuts) -> tuple[list[Delta], StreamingParser]:
    parser = StreamingParser(renderer, tools=tools, prompt_ids=prompt)
    deltas, start = [], 0
    for end in [*cuts, len(completion)]:
        deltas.append(parser.feed_ids(completion[start:end]))
        start = end
        if parser._finished:  # a stop id ends the turn: what follows is not fed
            break
    last, result = parser.finish()
    return [*deltas, last], parser, result


def sampled_turns(renderer, case):
    for history, assistant, new in splits(case):
        pair = sampled_turn(renderer, history, assistant, case.tools, new) or reasoned_turn(
            renderer, history, assistant, case.tools
        )
        if pair is not None:
            yield pair


@pytest.mark.parametrize("family", ALL_FAMILIES, ids=ALL_FAMILY_IDS)
def test_streamed_deltas_join_to_parse_response(family):
    renderer = family.renderer_class(family.load_tokenizer())
    checked = []

    @SETTINGS
    @given(case=cases_for(family), seed=st.integers(0, 2**32 - 1))
    def check(case, seed):
        rng = random.Random(seed)
        for prompt, completion in sampled_turns(renderer, case):
            cuts = sorted(rng.sample(range(1, len(completion)), min(len(completion) - 1, rng.randint(0, 10))))
            deltas, parser, result = stream_ids(renderer, completion, prompt, case.tools, cuts)
            expected = renderer.parse_response(completion, tools=case.tools, prompt_ids=prompt)
            assert result == expected
            assert joined(deltas) == message_of(expected), (renderer.decode(completion), cuts)
            assert parser.retractions == 0
            if expected.reasoning_content is None:
                assert not any(delta.reasoning for delta in deltas)
            checked.append(1)

    with without_local_constants():
        check()
    assert_turns_checked(family, len(checked), NO_STREAMED_TURN)


def _renderer(module: str):
    family = next(family for family in FAMILIES if family.module == module)
    return family.renderer_class(family.load_tokenizer())


def test_text_that_may_still_become_a_marker_is_held_back():
    renderer = _renderer("qwen3")
    parser = StreamingParser(renderer, prompt_ids=renderer.render_ids([{"role": "user", "content": "hi"}], add_generation_prompt=True))
    steps = ["<think>\nI", " check.\n</th", "ink>\n\nSure <tool_ca", "ll>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"}\"}]}}\n</tool_call>"]
    deltas = [parser.feed_text(step).to_openai() for step in steps]
    assert deltas[0] == {"reasoning_content": "I"}
    assert deltas[1] == {"reasoning_content": " check."}  # "\n</th" may be the close: held
    assert deltas[2] == {"content": "Sure "}  # "<tool_ca" may start a call
    assert deltas[3]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": [1, {"b": "}"}]}'}
    last, result = parser.finish()
    assert not last and result.content == "Sure " and result.reasoning_content == "I check."


def test_a_call_that_ends_malformed_is_never_sent():
    renderer = _renderer("qwen3")
    parser = StreamingParser(renderer)
    text = '<tool_call>\n{"name": "f", "arguments": {"a": 1}\n</tool_call>'  # one brace short
    deltas = [parser.feed_text(character) for character in text]
    last, result = parser.finish()
    assert not any(delta.tool_calls for delta in [*deltas, last])
    assert [call.status.value for call in result.tool_calls] == ["malformed_structure"]
    assert parser.retractions == 0


def test_token_by_token_equals_one_chunk_and_text_feeding():
    renderer = _renderer("qwen2_5")
    message = {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": "Zürich \"Z\""})}},
            {"type": "function", "function": {"name": "write_note", "arguments": json.dumps({"text": "a\nb"})}},
        ],
    }
    pair = sampled_turn(renderer, [{"role": "user", "content": "weather?"}], message, TOOLS)
    assert pair is not None
    prompt, completion = pair
    expected = message_of(renderer.parse_response(completion, tools=TOOLS, prompt_ids=prompt))
    assert [name for name, _ in expected[2]] == ["get_weather", "write_note"], renderer.decode(completion)
    by_token, parser, _ = stream_ids(renderer, completion, prompt, TOOLS, list(range(1, len(completion))))
    assert joined(by_token) == expected and parser.retractions == 0
    text_parser = StreamingParser(renderer, tools=TOOLS, prompt_ids=prompt)
    text = renderer.decode(completion[:-1])  # (without the stop token)
    by_character = [text_parser.feed_text(character) for character in text] + [text_parser.finish()[0]]
    assert joined(by_character) == expected


def test_bad_input_is_refused_by_name():
    renderer = _renderer("qwen3")
    parser = StreamingParser(renderer)
    with pytest.raises(TypeError, match="text must be a str"):
        parser.feed_text(b"bytes")
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        parser.feed_ids([10**9])
    parser.feed_ids(renderer.encoder.encode("hi"))
    with pytest.raises(ValueError, match="feed one kind of input"):
        parser.feed_text("x")
    parser.finish()
    with pytest.raises(ValueError, match="after the turn was finished"):
        parser.feed_ids([1])


@pytest.mark.parametrize(
    "arguments",
    [
        {"search_request": {"query": "ocean", "limit": 3}},  # nested object kept nested (vLLM PR 20824)
        {"trigger": True},  # a boolean, the name kept (vLLM issue 19056)
        {"path": "a/b}", "body": "}}"},  # the closing braces all there (vLLM issue 22885)
        {},  # no arguments is still a call with arguments {} (vLLM issue 21301)
    ],
)
def test_reported_hermes_failures_stream_exactly(arguments):
    renderer = _renderer("qwen3")
    text = '<tool_call>\n{"name": "tool", "arguments": ' + json.dumps(arguments) + "}\n</tool_call>"
    ids = renderer.encoder.encode(text)
    parser = StreamingParser(renderer)
    deltas = [parser.feed_ids([token]) for token in ids] + [parser.finish()[0]]
    calls = [call for delta in deltas for call in delta.tool_calls]
    assert [(call.index, call.name, json.loads(call.arguments)) for call in calls] == [(0, "tool", arguments)]
    assert parser.retractions == 0

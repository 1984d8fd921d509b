"""parse_response under hostile input: long tool-call loops (linear time), ids that are not a
plain list (numpy, torch, array.array), and things that are not ids at all.

Token spans are checked against the definition (the shortest prefix whose decoding covers the
character), computed the slow way, on every corpus tokenizer.
"""

from __future__ import annotations

import array
import random

import pytest

from rllm_renderers.turns.parsing import as_token_ids, decoded_prefix_lengths, token_index_at

from .families import FAMILIES, FAMILY_IDS

BY_MODULE = {family.module: family for family in FAMILIES}


def reference_lengths(decode, ids):
    """len(decode(ids[:k])) for every k, without a trailing incomplete character (quadratic)."""
    return [len(decode(ids[:k]).rstrip("\ufffd")) for k in range(len(ids) + 1)]


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_prefix_lengths_match_decoding_every_prefix(family):
    renderer = family.renderer_class(family.load_tokenizer())
    encoder = renderer.encoder
    generator = random.Random(3)
    texts = ["Hello, world! ", " café ☕ 日本語 ", "🙂🙃 ", "<think>\n", "\n\n  x", "Ω≈ç√∫"]
    special = sorted(encoder.added_token_strings)[:40]
    checked = 0
    for _ in range(40):
        ids: list[int] = []
        for _ in range(generator.randint(1, 8)):
            choice = generator.random()
            if choice < 0.5:
                ids += encoder.encode(generator.choice(texts))
            elif choice < 0.7 and special:
                ids.append(encoder.token_id(generator.choice(special)))
            else:  # arbitrary tokens: byte pieces that end inside a multi-byte character included
                ids += [generator.randrange(encoder._vocab_size) for _ in range(generator.randint(1, 4))]
        assert decoded_prefix_lengths(renderer.decode, ids) == reference_lengths(renderer.decode, ids), ids
        checked += 1
    assert checked == 40


def _tool_loop(renderer, calls: int):
    tool_calls = [{"type": "function", "function": {"name": "step", "arguments": {"i": i}}} for i in range(calls)]
    history = [{"role": "user", "content": "loop"}]
    prompt = renderer.render_ids(history, add_generation_prompt=True)
    full = renderer.render_ids(history + [{"role": "assistant", "content": "", "tool_calls": tool_calls}])
    assert full[: len(prompt)] == prompt
    return prompt, full[len(prompt) :]


def test_parse_response_is_linear_in_tool_calls():
    """1,600 calls: about 0.1 s now; the prefix re-decoding it replaces took about 84 s."""
    family = BY_MODULE["qwen3"]
    renderer = family.renderer_class(family.load_tokenizer())
    prompt, completion = _tool_loop(renderer, 1600)
    parsed = renderer.parse_response(completion, prompt_ids=prompt)
    assert len(parsed.tool_calls) == 1600
    assert all(call.status == "ok" for call in parsed.tool_calls)
    assert [call.arguments for call in parsed.tool_calls[-3:]] == [{"i": 1597}, {"i": 1598}, {"i": 1599}]
    for call in (parsed.tool_calls[0], parsed.tool_calls[799], parsed.tool_calls[-1]):
        start, stop = call.token_span
        assert renderer.decode(completion[start:stop]) == call.raw


def _call_text(syntax, index: int) -> str:
    if syntax.style == "xml":
        parameter = f"{syntax.parameter_start}s{syntax.parameter_value}é☕ {index}{syntax.parameter_end}"
        return f"{syntax.call_start}step{syntax.name_end}{parameter}{syntax.call_end}"
    return f'{syntax.call_start}step{syntax.name_end}{{"i": {index}, "s": "é☕"}}{syntax.call_end}'


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_token_spans_are_the_shortest_covering_prefixes(family):
    renderer = family.renderer_class(family.load_tokenizer())
    syntax = renderer.TOOL_CALLS
    if syntax is None:
        pytest.skip(f"{family.module} renders no tool calls")
    text = "Voilà ☕ 日本" + syntax.content_separator + syntax.block_start + "".join(_call_text(syntax, i) for i in range(4))
    completion = renderer.encoder.encode(text)
    # a prompt that does not end inside a reasoning block (Qwen3.5's generation prompt opens one)
    parsed = renderer.parse_response(completion, prompt_ids=renderer.encoder.encode("Go."))
    assert len(parsed.tool_calls) == 4, parsed
    reference = reference_lengths(renderer.decode, completion)
    decoded = renderer.decode(completion)
    position = 0
    for call in parsed.tool_calls:
        start_char = decoded.index(call.raw, position)
        position = start_char + len(call.raw)
        expected = (
            min(k for k, length in enumerate(reference) if length >= start_char),
            min(k for k, length in enumerate(reference) if length >= position),
        )
        assert call.token_span == expected


def test_token_index_at_past_the_end_is_the_length():
    assert token_index_at([0, 2, 5], 9) == 2
    assert token_index_at([0, 2, 5], 0) == 0
    assert token_index_at([0, 2, 5], 3) == 2


# --- non-list ids ------------------------------------------------------------------------


def _sequences(ids):
    numpy = pytest.importorskip("numpy")
    yield "numpy int64", numpy.array(ids, dtype=numpy.int64)
    yield "numpy int32", numpy.array(ids, dtype=numpy.int32)
    yield "numpy scalars in a list", [numpy.int64(token) for token in ids]
    yield "tuple", tuple(ids)
    yield "array.array", array.array("q", ids)
    try:
        import torch
    except ImportError:
        return
    yield "torch", torch.tensor(ids)


@pytest.mark.parametrize("module", ["qwen3", "gpt_oss"])
def test_parse_response_accepts_any_sequence_of_integers(module):
    family = BY_MODULE[module]
    renderer = family.renderer_class(family.load_tokenizer())
    history = [{"role": "user", "content": "Say hi"}]
    assistant = {"role": "assistant", "content": "Hi there, café ☕!"}
    prompt = renderer.render_ids(history, add_generation_prompt=True)
    completion = renderer.render_ids(history + [assistant])[len(prompt) :]
    expected = renderer.parse_response(completion, prompt_ids=prompt)
    assert "Hi there, café ☕!" in expected.content
    for label, sequence in _sequences(completion):
        parsed = renderer.parse_response(sequence, prompt_ids=prompt)
        assert parsed == expected, label


@pytest.mark.parametrize(
    "bad, message",
    [
        ("hello", "token_ids must be a sequence of integers, got str"),
        (None, "token_ids must be a sequence of integers, got NoneType"),
        ({"a": 1}, "token_ids must be a sequence of integers, got dict"),
        (7, "token_ids must be a sequence of integers, got int"),
        ([1, 2.0, 3], r"token_ids\[1\] must be an integer, got float 2.0"),
        ([1, "2"], r"token_ids\[1\] must be an integer, got str '2'"),
        ([1, [2]], r"token_ids\[1\] must be an integer, got list \[2\]"),
        ([True], r"token_ids\[0\] must be an integer, got bool True"),
    ],
)
def test_parse_response_rejects_what_is_not_ids(bad, message):
    family = BY_MODULE["qwen3"]
    renderer = family.renderer_class(family.load_tokenizer())
    with pytest.raises(ValueError, match=message):
        renderer.parse_response(bad)


def test_as_token_ids_rejects_float_and_2d_arrays():
    numpy = pytest.importorskip("numpy")
    with pytest.raises(ValueError, match=r"token_ids must be a sequence of integers, got an array of float64"):
        as_token_ids(numpy.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"token_ids\[0\] must be an integer, got float"):
        as_token_ids([1.0, 2.0])
    with pytest.raises(ValueError, match=r"token_ids must be a sequence of integers, got a 2-d array"):
        as_token_ids(numpy.array([[1, 2]]))
    with pytest.raises(ValueError, match="got a scalar"):
        as_token_ids(numpy.array(5))
    with pytest.raises(ValueError, match=r"prompt_ids\[0\]"):
        as_token_ids(["x"], "prompt_ids")
    assert as_token_ids(numpy.array([3, 4], dtype=numpy.uint16)) == [3, 4]


def _adapters():
    from rllm_renderers.core.registry import get_renderer

    from .test_registry import QWEN3_TEMPLATE, tokenizer

    tok = tokenizer("qwen3", QWEN3_TEMPLATE, suffix="\n")  # drifted: no generated match
    yield "chat_template", get_renderer("acme/unknown", tok), tok
    try:
        import renderers  # noqa: F401
    except ImportError:
        return
    yield "prime", get_renderer("Qwen/Qwen3-8B", tok, renderer="prime:qwen3"), tok


def test_adapters_take_integer_sequences_and_refuse_the_rest():
    numpy = pytest.importorskip("numpy")
    checked = []
    for name, renderer, tok in _adapters():
        ids = tok.encode("Plain words.", add_special_tokens=False) + renderer.get_stop_token_ids()[:1]
        expected = renderer.parse_response(ids)
        assert "Plain words." in expected.content, name
        assert renderer.parse_response(numpy.array(ids)) == expected, name
        with pytest.raises(ValueError, match=r"token_ids\[1\] must be an integer, got float"):
            renderer.parse_response([ids[0], 2.5])
        checked.append(name)
    assert "chat_template" in checked


def test_content_after_a_closed_list_of_calls():
    """LFM2's shape (a held-out template): ids after the arguments, the list closed by ``block_end``,
    then the content. The parser reads each call, its id, and the content after the block."""
    from rllm_renderers.turns.formats import ToolCallFormat
    from rllm_renderers.turns.parsing import parse_text

    syntax = ToolCallFormat(
        style="json",
        call_start='{"name": "',
        name_end='", "arguments": ',
        call_end=', "id": "',
        block_start="<|tool_call_start|>[",
        call_id_after="call_end",
        call_id_end='"}',
        content_last=True,
        block_end="]<|tool_call_end|>",
    )
    text = (
        '<|tool_call_start|>[{"name": "a", "arguments": {"x": 1}, "id": "abc123xyz"}, '
        '{"name": "b", "arguments": {}, "id": "def456uvw"}]<|tool_call_end|>Checking.'
    )
    parsed = parse_text(text, reasoning=None, tool_calls=syntax, reasoning_prefilled=False)
    assert parsed.content == "Checking."
    assert [(call.name, call.arguments, call.id) for call in parsed.calls] == [
        ("a", {"x": 1}, "abc123xyz"),
        ("b", {}, "def456uvw"),
    ]


def test_a_reasoning_close_inside_a_call_is_no_reasoning():
    """Reka-Edge's shape (a held-out template): the template cuts reasoning out of the content up to
    ``</think>`` (``in_content``), then writes the calls; a ``</think>`` in a call's string value,
    with no reasoning before it, is the call's, not the end of a block the model skipped opening."""
    from rllm_renderers.turns.formats import ReasoningFormat, ToolCallFormat
    from rllm_renderers.turns.parsing import parse_text

    reasoning = ReasoningFormat(open="<think>", close="</think>", after_close="\n\n", in_content=True)
    syntax = ToolCallFormat(style="json", call_start='<tool_call>\n{"name": "', name_end='", "arguments": ', call_end="}\n</tool_call>")
    text = ' <tool_call>\n{"name": "f", "arguments": {"city": "a </think> b"}}\n</tool_call>'
    parsed = parse_text(text, reasoning=reasoning, tool_calls=syntax, reasoning_prefilled=False)
    assert parsed.reasoning is None and parsed.content.strip() == ""
    assert [(call.name, call.arguments) for call in parsed.calls] == [("f", {"city": "a </think> b"})]
    skipped_open = parse_text("Two and two.</think>\n\nIt is 4.", reasoning=reasoning, tool_calls=syntax, reasoning_prefilled=False)
    assert (skipped_open.reasoning, skipped_open.content) == ("Two and two.", "It is 4.")


def test_a_block_end_cut_at_the_turns_stop_is_not_content():
    """llama.cpp's DeepSeek-R1-Distill shape (a held-out template): the block of calls ends with
    ``<｜tool▁calls▁end｜><｜end▁of▁sentence｜>``, and the model's turn stops at the sentence end: what is left
    of the block end is not content written after the calls."""
    from rllm_renderers.turns.formats import ToolCallFormat
    from rllm_renderers.turns.parsing import parse_text

    syntax = ToolCallFormat(
        style="json",
        call_start="<｜tool▁call▁begin｜>function<｜tool▁sep｜>",
        name_end="\n```json\n",
        call_end="\n```<｜tool▁call▁end｜>",
        block_start="<｜tool▁calls▁begin｜>",
        content_last=True,
        block_end="<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜Assistant｜>",
    )
    call = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{"x": 1}\n```<｜tool▁call▁end｜>'
    parsed = parse_text(call + "<｜tool▁calls▁end｜>", reasoning=None, tool_calls=syntax, reasoning_prefilled=False)
    assert parsed.content == "" and [(c.name, c.arguments) for c in parsed.calls] == [("f", {"x": 1})]
    whole = parse_text(call + syntax.block_end + "Done.", reasoning=None, tool_calls=syntax, reasoning_prefilled=False)
    assert whole.content == "Done."

"""The runtime on the inputs a demanding user passes: ids in every container and out of the
vocabulary, a vocabulary that grows after first use, loose arguments, text no tokenizer encodes,
a broken generated index, and completions that are long, non-ASCII or nested thousands deep.

Each test failed before the fix it covers (issues 26 and 28).
"""

from __future__ import annotations

import array
import copy
import gc
import importlib
import sys
import time

import pytest

from rllm_renderers.turns.formats import ToolCallFormat
from rllm_renderers.turns.parsing import TOO_DEEP, parse_text

from .families import FAMILIES, FAMILY_IDS

numpy = pytest.importorskip("numpy")
BY_MODULE = {family.module: family for family in FAMILIES}
USER = {"role": "user", "content": "What is 2+2?"}
REPLY = {"role": "assistant", "content": "4."}
FOLLOW_UP = {"role": "user", "content": "And 3+3?"}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "step", "description": "One step.", "parameters": {"type": "object", "properties": {}}},
    }
]


def renderer_of(module: str, tokenizer=None, **kwargs):
    family = BY_MODULE[module]
    return family.renderer_class(tokenizer if tokenizer is not None else family.load_tokenizer(), **kwargs)


def turn(renderer, history=(USER,), assistant=REPLY):
    """(prompt, completion cut after its stop) as the template renders the assistant turn."""
    prompt = renderer.render_ids(list(history), add_generation_prompt=True)
    full = renderer.render_ids([*history, assistant])
    stops = set(renderer.get_stop_token_ids())
    completion = full[len(prompt) :]
    return prompt, completion[: next(k for k, token in enumerate(completion) if token in stops) + 1]


# --- 1. one conversion for id sequences ---------------------------------------------------


def containers(ids):
    torch = pytest.importorskip("torch")
    yield "list", list(ids)
    yield "tuple", tuple(ids)
    yield "range-free deque", __import__("collections").deque(ids)
    for dtype in (numpy.int32, numpy.int64, numpy.uint32, numpy.uint64):
        yield f"numpy {dtype.__name__}", numpy.array(ids, dtype=dtype)
    yield "numpy scalars", [numpy.int64(token) for token in ids]
    for dtype in (torch.int32, torch.int64):
        yield f"torch {dtype}", torch.tensor(ids, dtype=dtype)
    for code in "lq":
        yield f"array.array {code}", array.array(code, ids)


@pytest.mark.parametrize("module", ["qwen3", "gemma_3"])  # the byte table, and prefix decoding
def test_decode_takes_every_sequence_of_ints(module):
    renderer = renderer_of(module)
    ids = renderer.encoder.encode("Hello, café ☕!")
    expected = renderer.decode(ids)
    assert expected == "Hello, café ☕!"
    for label, sequence in containers(ids):
        assert renderer.decode(sequence) == expected, label  # numpy and torch gave '' before
    small = [token for token in ids if token < 128] or [1, 2]
    for dtype in (numpy.int8, numpy.uint8, numpy.int16):
        assert renderer.decode(numpy.array(small, dtype=dtype)) == renderer.decode(small), dtype


def not_ids():
    torch = pytest.importorskip("torch")
    return [
        ({3, 4}, "got set"),  # accepted before, in arbitrary order
        (frozenset({3}), "got frozenset"),
        ("34", "got str"),
        (b"\x03\x04", "got bytes"),
        (iter([3, 4]), "got list_iterator"),
        (numpy.array([3.0, 4.0]), "got an array of float64"),
        (numpy.array([True, False]), "got an array of bool"),
        (torch.tensor([3.0]), "got an array of torch.float32"),
        (torch.tensor([True]), "got an array of torch.bool"),
        (array.array("d", [3.0]), "got an array of d"),
        (numpy.array([[3, 4]]), "got a 2-d array"),
        (numpy.array(3), "got a scalar"),
        ([3, True], r"\[1\] must be an integer, got bool True"),
        ([3, 4.0], r"\[1\] must be an integer, got float 4.0"),
    ]


def test_what_is_not_ids_is_a_type_error_naming_the_argument():
    renderer = renderer_of("llama_3_1")
    prompt, completion = turn(renderer)
    checked = 0
    for bad, found in not_ids():
        for call, argument in (
            (lambda: renderer.decode(bad), "token_ids"),
            (lambda: renderer.parse_response(bad), "token_ids"),
            (lambda: renderer.parse_response(completion, prompt_ids=bad), "prompt_ids"),
            (lambda: renderer.bridge_to_next_turn(bad, completion, [FOLLOW_UP], messages=[USER]), "previous_prompt_ids"),
            (lambda: renderer.bridge_to_next_turn(prompt, bad, [FOLLOW_UP], messages=[USER]), "previous_completion_ids"),
        ):
            with pytest.raises(TypeError, match=f"{argument}.*{found}"):
                call()
            checked += 1
    assert checked == 5 * len(not_ids())


# --- 2. out-of-vocabulary ids -------------------------------------------------------------


def test_out_of_vocabulary_ids_are_a_value_error_naming_the_position():
    renderer = renderer_of("qwen3")
    size = len(BY_MODULE["qwen3"].load_tokenizer())
    assert renderer.vocab_size == size
    prompt, completion = turn(renderer)
    # ids squeezed through int8 wrap around: 200 becomes -56
    overflowed = numpy.array([completion[0], 200, *completion[1:]], dtype=numpy.int64).astype(numpy.int8)
    position = 1
    cases = [
        ([*completion[:2], -1, *completion[2:]], "previous_completion_ids", 2, -1),
        ([*completion[:1], size, *completion[1:]], "previous_completion_ids", 1, size),
        (overflowed, "previous_completion_ids", position, int(overflowed[position])),
    ]
    for ids, argument, index, value in cases:
        message = rf"{argument}\[{index}\] is {value}, outside the tokenizer's vocabulary \(ids 0 to {size - 1}\)"
        with pytest.raises(ValueError, match=message):
            renderer.bridge_to_next_turn(prompt, ids, [FOLLOW_UP], messages=[USER])
        with pytest.raises(ValueError, match=message.replace(argument, "token_ids")):
            renderer.parse_response(ids)
        with pytest.raises(ValueError, match=message.replace(argument, "token_ids")):
            renderer.decode(ids)
    forged = [*prompt[:3], -5, *prompt[3:]]  # came back in the bridged tokens before
    with pytest.raises(ValueError, match=r"previous_prompt_ids\[3\] is -5"):
        renderer.bridge_to_next_turn(forged, completion, [FOLLOW_UP], messages=[USER])
    with pytest.raises(ValueError, match=r"prompt_ids\[3\] is -5"):
        renderer.parse_response(completion, prompt_ids=forged)


# --- 3. a vocabulary that grows after first use ------------------------------------------


@pytest.mark.parametrize("module", ["qwen3", "gemma_3"])
def test_tokens_added_after_first_use_are_followed(module):
    family = BY_MODULE[module]
    tokenizer = copy.deepcopy(family.load_tokenizer())  # (the shared one stays as it is)
    template = family.template_source()
    renderer = renderer_of(module, tokenizer)
    messages = [{"role": "user", "content": "say <|brand_new|> now"}]

    def oracle():
        return tokenizer.apply_chat_template(messages, chat_template=template, tokenize=True, return_dict=False)

    assert renderer.render_ids(messages) == oracle()
    renderer.parse_response(renderer.encoder.encode("warm the parse facts"))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|brand_new|>"]})
    new_id = tokenizer.convert_tokens_to_ids("<|brand_new|>")
    assert new_id == len(tokenizer) - 1 == renderer.vocab_size - 1
    assert renderer.render_ids(messages) == oracle()  # the new token is split out, as the tokenizer does
    assert new_id in renderer.render_ids(messages)
    assert renderer.decode([new_id]) == "<|brand_new|>"  # '' before
    text = renderer.encoder.encode("a ") + [new_id] + renderer.encoder.encode(" b")
    assert "<|brand_new|>" in renderer.parse_response(text).content  # dropped before


# --- 4. loose inputs ------------------------------------------------------------------------


@pytest.mark.parametrize("tools, found", [("x", "tools must be a list of tool dicts, got str"), (["x"], r"tools\[0\] must be a dict")])
def test_parse_response_refuses_tools_that_are_not_tool_dicts(tools, found):
    renderer = renderer_of("qwen3")
    with pytest.raises(ValueError, match=found):
        renderer.parse_response(renderer.encoder.encode("hi"), tools=tools)


SURROGATE = "bad \ud800 text"


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_a_lone_surrogate_is_a_value_error_naming_message_and_field(family):
    renderer = family.renderer_class(family.load_tokenizer())
    conversations = [
        ([USER, {"role": "user", "content": SURROGATE}], "message 1 field 'content'"),
        ([{"role": "user", "content": [{"type": "text", "text": SURROGATE}]}], r"message 0 field 'content(\[0\]\.text)?'"),
    ]
    checked = 0
    for messages, where in conversations:
        try:
            renderer.render_text(messages, add_generation_prompt=True)
        except ValueError:
            continue  # the template refuses the conversation itself
        for render in (renderer.render_ids, renderer.render):
            with pytest.raises(ValueError, match=f"{where} holds a lone surrogate"):
                render(messages, add_generation_prompt=True)
            checked += 1
    assert checked >= 2


def test_a_lone_surrogate_in_new_messages_is_named_by_the_bridge():
    renderer = renderer_of("llama_3_1")
    prompt, completion = turn(renderer)
    with pytest.raises(ValueError, match=r"new_messages\[0\] field 'content' holds a lone surrogate"):
        renderer.bridge_to_next_turn(prompt, completion, [{"role": "user", "content": SURROGATE}], messages=[USER])


def test_a_bad_encoder_choice_fails_at_resolve_and_construction(monkeypatch):
    from rllm_renderers.core.registry import resolve

    family = BY_MODULE["qwen3"]
    monkeypatch.setenv("RLLM_RENDERERS_ENCODER", "rust")
    with pytest.raises(ValueError, match=r"RLLM_RENDERERS_ENCODER.*one of 'auto', 'hf', 'fastokens', 'tiktoken'; got 'rust'"):
        resolve(family.model_id, family.load_tokenizer())
    with pytest.raises(ValueError, match="RLLM_RENDERERS_ENCODER"):
        family.renderer_class(family.load_tokenizer())


BROKEN_INDEXES = {
    "syntax": "RENDERERS = {\n",
    "shape": "RENDERERS = {'qwen3': ('Qwen3Renderer', 'abc')}\n",  # a ValueError unpacking it
    "raises": "raise RuntimeError('half-written')\n",
    "missing": "OTHER = {}\n",
    "not a dict": "RENDERERS = ['qwen3']\n",
}


@pytest.mark.parametrize("case", sorted(BROKEN_INDEXES))
def test_a_broken_index_is_the_registrys_own_error(case, tmp_path, monkeypatch):
    from rllm_renderers.core import registry

    package = f"broken_index_{case.replace(' ', '_')}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "_index.py").write_text(BROKEN_INDEXES[case])
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        with pytest.raises(registry.GeneratedRendererError, match=rf"{package}\._index .*cannot be read"):
            registry.generated_index(package)
    finally:
        sys.modules.pop(f"{package}._index", None)
        sys.modules.pop(package, None)


# --- 5. parse_response linear and total -----------------------------------------------------


def call_text(syntax, index: int) -> str:
    if syntax.style == "xml":
        parameter = f"{syntax.parameter_start}i{syntax.parameter_value}{index}{syntax.parameter_end}"
        return f"{syntax.call_start}step{syntax.name_end}{parameter}{syntax.call_end}"
    return f'{syntax.call_start}step{syntax.name_end}{{"i": {index}}}{syntax.call_end}'


def parse_seconds(renderer, calls: int) -> float:
    syntax = renderer.TOOL_CALLS
    text = "Voilà." + syntax.content_separator + syntax.block_start + "".join(call_text(syntax, i) for i in range(calls))
    ids = renderer.encoder.encode(text) + renderer.get_stop_token_ids()[:1]
    prompt = renderer.encoder.encode("Go.")
    parsed = renderer.parse_response(ids, prompt_ids=prompt)
    assert len(parsed.tool_calls) == calls and all(call.status == "ok" for call in parsed.tool_calls)
    best = float("inf")
    gc.disable()  # (a collection inside one sample is noise)
    try:
        for _ in range(5):
            start = time.process_time()
            renderer.parse_response(ids, prompt_ids=prompt)
            best = min(best, time.process_time() - start)
    finally:
        gc.enable()
    return best


@pytest.mark.parametrize("module", ["qwen3", "deepseek_v3", "deepseek_v4"])
def test_parse_response_is_linear_in_calls_for_non_ascii_text(module):
    """4x the calls take about 4x the time (10-12x before: each call boundary re-encoded the text
    before it once a character was non-ASCII, DeepSeek-V3's markers always; DeepSeek-V4's XML
    parameters searched the whole text for the separator a call did not use)."""
    renderer = renderer_of(module)
    ratio = parse_seconds(renderer, 1200) / parse_seconds(renderer, 300)
    assert ratio < 6.5, ratio


def deep_call(syntax, depth: int) -> str:
    if syntax.style == "xml_tags":
        element = f"{syntax.parameter_start}a{syntax.parameter_value}"
        return f"{syntax.call_start}step{syntax.name_end}" + element * depth
    if syntax.style == "xml":
        return f"{syntax.call_start}step{syntax.name_end}{syntax.parameter_start}a{syntax.parameter_value}{'[' * depth}{syntax.parameter_end}{syntax.call_end}"
    return f'{syntax.call_start}step{syntax.name_end}{{"a": {"[" * depth}{syntax.call_end}'


@pytest.mark.parametrize("family", [family for family in FAMILIES if family.module != "gemma_3"], ids=lambda f: f.module)
def test_deeply_nested_arguments_never_raise(family):
    renderer = family.renderer_class(family.load_tokenizer())
    syntax = renderer.TOOL_CALLS
    prompt = renderer.render_ids([USER], tools=TOOLS, add_generation_prompt=True)
    # a prompt that ends inside an open reasoning block (Qwen3.5, DeepSeek-V4) gets it closed first
    reasoning_close = renderer.REASONING.close if renderer._reasoning_prefilled(renderer.decode(prompt[-64:])) else ""
    for depth in (50, 900, 5000):
        text = reasoning_close + "Ok." + syntax.content_separator + syntax.block_start + deep_call(syntax, depth)
        ids = renderer.encoder.encode(text) + renderer.get_stop_token_ids()[:1]
        parsed = renderer.parse_response(ids, tools=TOOLS, prompt_ids=prompt)  # RecursionError before
        assert parsed.tool_calls, (depth, parsed)
        call = parsed.tool_calls[0]
        assert call.status == "ok" or call.reason in (None, TOO_DEEP)
        bridged = renderer.bridge_to_next_turn(prompt, ids, [FOLLOW_UP], tools=TOOLS)  # RecursionError before
        assert bridged is None or bridged.token_ids[: len(prompt)] == prompt


def test_a_call_nested_past_the_recursion_limit_says_so():
    """Every call style, the parser alone: json, python, key_value, xml_tags."""
    depth = 5 * sys.getrecursionlimit()
    formats = {
        "json": (ToolCallFormat("json", "<call>", " ", "</call>"), "[" * depth),
        "key_value": (ToolCallFormat("key_value", "call:", "{", "}", string_quote="'"), "a:" + "[" * depth),
        "xml_tags": (ToolCallFormat("xml_tags", "<invoke ", ">", "</invoke>", "<", ">", "</"), "<a>" * depth),
    }
    for style, (syntax, arguments) in formats.items():
        text = f"Ok.{syntax.call_start}step{syntax.name_end}{arguments}{syntax.call_end} after"
        parsed = parse_text(text, reasoning=None, tool_calls=syntax, reasoning_prefilled=False)
        (call,) = parsed.calls
        assert call.status == "malformed_structure" and call.reason == TOO_DEEP, style
        assert parsed.content == "Ok.", style
    python = ToolCallFormat("python", "", "(", ")", block_start="[")
    parsed = parse_text("[step(a=" + "[" * depth + ")]", reasoning=None, tool_calls=python, reasoning_prefilled=False)
    assert all(call.status != "ok" for call in parsed.calls)

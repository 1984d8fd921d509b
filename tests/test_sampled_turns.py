"""What a model samples: the sampled marks of render() and the parse of a sampled turn, under every knob.

Two defects users found (issue 38): gpt-oss marked the ``<|start|>assistant`` header the engine
writes after a parallel call's ``<|call|>`` as sampled (and trained it), and DeepSeek-V3.1 with
``thinking=True`` parsed its reasoning as the answer. The property behind both is checked here on
the checked-in renderers, and by ``verify`` on every family (:mod:`compiler.sampled_turns`).
"""

from __future__ import annotations

import pytest

from compiler.sampled_turns import mask_problem, parsed_runs, sampled_runs
from tests.families import ALL_FAMILIES

FAMILIES = {family.module: family for family in ALL_FAMILIES}
USER = {"role": "user", "content": "Weather in Paris and the time in Rome?"}


def call(name: str, arguments: dict, number: int) -> dict:
    return {"id": f"call{number:05d}x", "type": "function", "function": {"name": name, "arguments": arguments}}


PARALLEL = {
    "role": "assistant",
    "content": "",
    "reasoning_content": "Two tools.",
    "tool_calls": [call("get_weather", {"city": "Paris"}, 1), call("get_time", {"city": "Rome"}, 2)],
}


def renderer_of(module: str, **knobs):
    family = FAMILIES[module]
    return family.renderer_class(family.load_tokenizer(), **knobs)


def test_gpt_oss_samples_no_header_after_a_parallel_call():
    renderer = renderer_of("gpt_oss_harmony")
    rendered = renderer.render([USER, PARALLEL])
    runs = sampled_runs(rendered, 1)
    assert len(runs) == 2, runs  # one per call: the model stops at <|call|> and is prompted again
    between = renderer.decode(rendered.token_ids[runs[0][1] : runs[1][0]])
    assert between == "<|start|>assistant"
    assert renderer.decode(rendered.token_ids[runs[0][1] - 1 : runs[0][1]]) == "<|call|>"
    assert mask_problem(renderer, rendered) is None
    parsed = parsed_runs(renderer, rendered, 1)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Rome"})]
    assert parsed.reasoning_content == "Two tools."
    # and training marks exactly those tokens
    example = renderer.build_supervised_example([USER, PARALLEL])
    trained = [token for token, weight in zip(example.token_ids, example.weights) if weight]
    assert trained == rendered.token_ids[runs[0][0] : runs[0][1]] + rendered.token_ids[runs[1][0] : runs[1][1]]


def test_deepseek_v3_1_thinking_parses_reasoning_apart():
    renderer = renderer_of("deepseek_v3_1", thinking=True)
    tokenizer = FAMILIES["deepseek_v3_1"].load_tokenizer()
    prompt = renderer.render_ids([{"role": "user", "content": "2+2?"}], add_generation_prompt=True)
    assert renderer.decode(prompt).endswith("<｜Assistant｜><think>")
    completion = tokenizer.encode("Two plus two.</think>4<｜end▁of▁sentence｜>", add_special_tokens=False)
    parsed = renderer.parse_response(completion, prompt_ids=prompt)
    assert (parsed.reasoning_content, parsed.content, parsed.status) == ("Two plus two.", "4", "ok")
    # thinking off: the prompt closed the block, all of it is the answer
    plain = renderer_of("deepseek_v3_1")
    prompt = plain.render_ids([{"role": "user", "content": "2+2?"}], add_generation_prompt=True)
    parsed = plain.parse_response(tokenizer.encode("4<｜end▁of▁sentence｜>", add_special_tokens=False), prompt_ids=prompt)
    assert (parsed.reasoning_content, parsed.content) == (None, "4")

"""MiniMax-M3: our template against the shared goldens and the Fireworks renderer; its tool-call parser.

The reference is the Fireworks cookbook renderer `minimax_m3` (run in place from
``$RLLM_ORACLES/fireworks-cookbook``); the tokenizer is the corpus's synthetic one, so token
checks are structural (special tokens split out; no real BPE merges).
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from compiler.analysis import compared_roles, knob_candidates, parse_template
from compiler.verify import verify
from tests.families import FAMILIES, REPO, corpus_path

FAMILY = next(f for f in FAMILIES if f.module == "minimax_m3")
ORACLES = os.environ.get("RLLM_ORACLES", str(REPO.parent / "shared" / "oracles"))
CASES = int(os.environ.get("FIREWORKS_CASES", "150"))


def fireworks_oracle(tokenizer):
    pytest.importorskip("tinker_cookbook", reason="the Fireworks oracle needs tinker-cookbook (the tinker extra)")
    if not os.path.isdir(os.path.join(ORACLES, "fireworks-cookbook")):
        pytest.skip(f"Fireworks oracle not found under {ORACLES} (set RLLM_ORACLES)")
    from compiler.oracles.fireworks import FireworksOracle

    return FireworksOracle("minimax_m3", tokenizer)


def golden_lines():
    folder = corpus_path("golden")
    conversations = {}
    for line in (folder / "conversations.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        conversations[case["id"]] = case
    lines = [json.loads(line) for line in (folder / "minimax_m3.jsonl").read_text(encoding="utf-8").splitlines()]
    return conversations, lines


def test_every_shared_golden_line_matches_on_text():
    conversations, lines = golden_lines()
    tokenizer = FAMILY.load_tokenizer()
    renderers = {}
    mismatched = []
    for line in lines:
        case = copy.deepcopy(conversations[line["case_id"]])
        knobs = line["template_kwargs"]
        key = json.dumps(knobs, sort_keys=True)
        renderer = renderers.setdefault(key, FAMILY.renderer_class(tokenizer, **knobs))
        text = renderer.render_text(case["messages"], tools=case["tools"], add_generation_prompt=case["add_generation_prompt"])
        if text != line["text"]:
            mismatched.append((line["case_id"], line["renderer_variant"]))
    assert len(lines) == 72
    assert mismatched == []


def test_generated_conversations_match_the_fireworks_renderer():
    tokenizer = FAMILY.load_tokenizer()
    oracle = fireworks_oracle(tokenizer)
    ast = parse_template(FAMILY.template_source(), FAMILY.template_file)
    report = verify(
        FAMILY.renderer_class,
        oracle,
        tokenizer=tokenizer,
        cases=CASES,
        seed_value=99,
        knob_candidates=knob_candidates(ast, FAMILY.renderer_class.KNOBS),
        template_roles=compared_roles(ast),
    )
    assert report.ok, report.failure.report()
    assert report.tokens_matched == report.tokens_checked >= CASES
    assert report.rejected_alike < CASES // 10, report.summary()


def test_the_oracle_maps_knobs_to_fireworks_variants():
    tokenizer = FAMILY.load_tokenizer()
    oracle = fireworks_oracle(tokenizer)
    messages = [{"role": "user", "content": "Hi"}]
    prompts = {
        mode: oracle.render_text(messages, add_generation_prompt=True, knobs={"thinking_mode": mode})
        for mode in ("adaptive", "enabled", "disabled")
    }
    assert prompts["adaptive"].endswith("]~b]ai\n")
    assert prompts["enabled"].endswith("]~b]ai\n<mm:think>")
    assert prompts["disabled"].endswith("]~b]ai\n</mm:think>")
    with pytest.raises(ValueError, match="no variant for knobs"):
        oracle.render_text(messages, knobs={"enable_thinking": True})


ARGUMENTS = {
    "query": "weather <b>now</b>",
    "limit": 3,
    "ratio": 0.25,
    "strict": False,
    "skip": None,
    "filters": {"city": "Paris", "tags": ["a", 2, None, {"deep": True}], "none": None},
    "matrix": [[1, 2], []],
}
# what the format can carry: null members are omitted; an empty array renders as nothing
CARRIED = {
    "query": "weather <b>now</b>",
    "limit": 3,
    "ratio": 0.25,
    "strict": False,
    "filters": {"city": "Paris", "tags": ["a", 2, "", {"deep": True}]},
    "matrix": [[1, 2], ""],
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "code": {"type": "string"}}},
        },
    }
]


def completion_of(renderer, assistant, tools=TOOLS):
    history = [{"role": "user", "content": "Find it."}]
    prompt = renderer.render_ids(history, tools=tools, add_generation_prompt=True)
    full = renderer.render_ids(history + [assistant], tools=tools)
    assert full[: len(prompt)] == prompt
    completion = full[len(prompt) :]
    return prompt, completion[: completion.index(renderer.get_stop_token_ids()[0]) + 1]


def test_parser_round_trips_nested_objects_item_arrays_and_omitted_nulls():
    renderer = FAMILY.renderer_class(FAMILY.load_tokenizer())
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": json.dumps(ARGUMENTS)}},
        {"id": "c2", "type": "function", "function": {"name": "search", "arguments": {"code": "123", "n": "123"}}},
    ]
    assistant = {"role": "assistant", "content": "Let me look.", "reasoning_content": "Need data.", "tool_calls": calls}
    prompt, completion = completion_of(renderer, assistant)
    parsed = renderer.parse_response(completion, tools=TOOLS, prompt_ids=prompt)
    assert parsed.reasoning_content == "Need data."
    assert parsed.content == "Let me look."
    assert [call.status.value for call in parsed.tool_calls] == ["ok", "ok"]
    assert [call.name for call in parsed.tool_calls] == ["search", "search"]
    assert parsed.tool_calls[0].arguments == CARRIED
    # a parameter declared as a string stays a string; undeclared text that reads as JSON is JSON
    assert parsed.tool_calls[1].arguments == {"code": "123", "n": 123}
    assert parsed.tool_calls[0].raw.startswith(']<]minimax[>[<invoke name="search">')


def test_parser_reads_a_bare_reasoning_close_as_empty_reasoning_and_reports_broken_calls():
    renderer = FAMILY.renderer_class(FAMILY.load_tokenizer())
    prompt, completion = completion_of(renderer, {"role": "assistant", "content": "Plain answer."}, tools=None)
    parsed = renderer.parse_response(completion, prompt_ids=prompt)
    assert (parsed.reasoning_content, parsed.content, parsed.tool_calls) == ("", "Plain answer.", [])
    truncated = renderer.encoder.encode(
        '</mm:think>]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="search">]<]minimax[>[<query>Par'
    )
    parsed = renderer.parse_response(truncated, tools=TOOLS)
    assert [call.status.value for call in parsed.tool_calls] == ["unclosed_block"]
    wrong = renderer.encoder.encode(
        '</mm:think>]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="search">oops]<]minimax[>[</invoke>\n'
        "]<]minimax[>[</tool_call>[e~["
    )
    assert [call.status.value for call in renderer.parse_response(wrong, tools=TOOLS).tool_calls] == ["malformed_structure"]


def test_parser_reads_what_the_fireworks_renderer_writes():
    tokenizer = FAMILY.load_tokenizer()
    oracle = fireworks_oracle(tokenizer)
    renderer = FAMILY.renderer_class(tokenizer)
    history = [{"role": "user", "content": "Find it."}]
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": json.dumps(ARGUMENTS)}}
    prompt = oracle.render_ids(history, tools=TOOLS, add_generation_prompt=True)
    full = oracle.render_ids(history + [{"role": "assistant", "content": "", "tool_calls": [call]}], tools=TOOLS)
    parsed = renderer.parse_response(full[len(prompt) :], tools=TOOLS, prompt_ids=prompt)
    assert [(c.name, c.arguments, c.status.value) for c in parsed.tool_calls] == [("search", CARRIED, "ok")]


def test_resolve_prefers_the_generated_renderer_over_the_fireworks_one():
    from rllm_renderers import resolve

    resolution = resolve("MiniMaxAI/MiniMax-M3", FAMILY.load_tokenizer(), chat_template_kwargs={"thinking_mode": "enabled"})
    assert (resolution.source, type(resolution.renderer).__name__) == ("generated", "MinimaxM3Renderer")
    assert resolution.renderer.render_text([{"role": "user", "content": "Hi"}], add_generation_prompt=True).endswith(
        "]~b]ai\n<mm:think>"
    )

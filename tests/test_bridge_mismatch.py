"""A caller's mismatch is never an exception out of the bridge (rLLM's gateway turns one into HTTP
500): partial ``messages=``, a prompt another template rendered, a completion cut short give None,
and the reason is logged where the caller can act on it."""

from __future__ import annotations

import logging

import pytest

from tests.test_bridge_inputs import FOLLOW_UP, REPLY, USER, renderer_of, turn_completion

SYSTEM = {"role": "system", "content": "You are terse."}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "lookup", "description": "Look a word up.", "parameters": {"type": "object", "properties": {}}},
    }
]


@pytest.fixture(scope="module")
def qwen3():
    return renderer_of("qwen3")


def test_partial_messages_give_none_with_the_reason_logged(qwen3, caplog):
    history = [SYSTEM, USER, REPLY, FOLLOW_UP]
    prompt, completion = turn_completion(qwen3, history, REPLY)
    fresh = renderer_of("qwen3")
    with caplog.at_level(logging.DEBUG, logger="rllm_renderers"):
        for partial in (history[1:], history[:2], [FOLLOW_UP]):  # the start, the end, one message missing
            assert fresh.bridge_to_next_turn(prompt, completion, [FOLLOW_UP], messages=partial) is None
    assert sum("previous_prompt_ids" in record.getMessage() for record in caplog.records) == 3
    # (the whole history is taken: what the bridge gives for it is the template's, tested elsewhere)


def test_a_prompt_another_template_rendered_gives_none(qwen3, caplog):
    """DeepSeek-V3's prompt (its ids lie inside Qwen3's vocabulary) bridged by Qwen3, ids only."""
    other = renderer_of("deepseek_v3")
    prompt, completion = turn_completion(other, [USER], REPLY)
    with caplog.at_level(logging.DEBUG, logger="rllm_renderers"):
        assert qwen3.bridge_to_next_turn(prompt, completion, [FOLLOW_UP]) is None
    assert any("no bridge" in record.getMessage() for record in caplog.records)


def test_a_completion_cut_short_gives_none_or_the_closed_turn(qwen3):
    """Cut inside a tool call: the turn does not parse into one the template renders, None; cut in
    plain text: the template's close is appended (the contract), and that is exact."""
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"word": "cut"}}}
    turn = {"role": "assistant", "content": "", "tool_calls": [call]}
    prompt, completion = turn_completion(qwen3, [USER], turn, TOOLS)
    cut = completion[: len(completion) // 2]  # inside the call's JSON
    assert qwen3.bridge_to_next_turn(prompt, cut, [{"role": "tool", "tool_call_id": "c1", "content": "x"}], tools=TOOLS) is None
    assert renderer_of("qwen3").bridge_to_next_turn(prompt, cut, [FOLLOW_UP], tools=TOOLS) is None  # (ids only)
    prompt, completion = turn_completion(qwen3, [USER], {"role": "assistant", "content": "Four, as it happens."})
    short = completion[:3]  # no stop: the close is appended
    bridged = qwen3.bridge_to_next_turn(prompt, short, [FOLLOW_UP])
    closed = qwen3._decode(short) + "<|im_end|>"
    if bridged is not None:  # (under "template" the turn must render as sampled, else None)
        text = qwen3._decode(list(bridged.token_ids))
        assert text.startswith(qwen3._decode(prompt) + closed)

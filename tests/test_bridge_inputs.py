"""The bridge on the inputs engines actually pass, and on bad ones.

The conversations here are small and fixed; the differential suite
(tests/test_bridge_differential.py) covers generated ones against apply_chat_template.
"""

from __future__ import annotations

import array
import copy
import pickle
import re

import pytest

from tests.families import FAMILIES

FAMILY = {family.module: family for family in FAMILIES}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "lookup", "description": "Look a word up.", "parameters": {"type": "object", "properties": {}}},
    }
]


def renderer_of(module: str, **kwargs):
    family = FAMILY[module]
    return family.renderer_class(family.load_tokenizer(), **kwargs)


def turn_completion(renderer, history, assistant, tools=None):
    """The assistant turn as the template renders it after the generation prompt, cut after its stop."""
    prompt = renderer.render_ids(history, tools=tools, add_generation_prompt=True)
    full = renderer.render_ids(history + [assistant], tools=tools)
    assert full[: len(prompt)] == prompt
    stops = set(renderer.get_stop_token_ids())
    completion = full[len(prompt) :]
    close = next(k for k, token in enumerate(completion) if token in stops)
    return prompt, completion[: close + 1]


USER = {"role": "user", "content": "What is 2+2?"}
REPLY = {"role": "assistant", "content": "4."}
FOLLOW_UP = {"role": "user", "content": "And 3+3?"}


@pytest.fixture(scope="module")
def llama():
    renderer = renderer_of("llama_3_1")
    prompt, completion = turn_completion(renderer, [USER], REPLY)
    expected = renderer.render_ids([USER, REPLY, FOLLOW_UP], add_generation_prompt=True)
    return renderer, prompt, completion, expected


def test_any_sequence_of_ints_is_accepted(llama):
    import numpy as np
    import torch

    renderer, prompt, completion, expected = llama
    for convert in (list, tuple, np.array, lambda ids: np.array(ids, dtype=np.int32), torch.tensor, lambda ids: array.array("q", ids)):
        bridged = renderer.bridge_to_next_turn(convert(prompt), convert(completion), [FOLLOW_UP], messages=[USER])
        assert bridged is not None and bridged.token_ids == expected, convert
        assert all(type(token) is int for token in bridged.token_ids)


@pytest.mark.parametrize(
    "bad, found",
    [
        ("hello", "must be a sequence of integers, got str"),
        (None, "must be a sequence of integers, got NoneType"),
        (7, "must be a sequence of integers, got int"),
        ({"ids": [1]}, "must be a sequence of integers, got dict"),
        ([1, None, 2], r"\[1\] must be an integer, got NoneType None"),
        ([1, 2.5], r"\[1\] must be an integer, got float 2.5"),
        ([[1, 2]], r"\[0\] must be an integer, got list \[1, 2\]"),
        (pytest.importorskip("numpy").array(5), "got a scalar"),
    ],
)
def test_other_ids_are_a_clear_value_error(llama, bad, found):
    renderer, prompt, completion, _ = llama
    with pytest.raises(ValueError, match=f"previous_prompt_ids.*{found}"):
        renderer.bridge_to_next_turn(bad, completion, [FOLLOW_UP], messages=[USER])
    with pytest.raises(ValueError, match=f"previous_completion_ids.*{found}"):
        renderer.bridge_to_next_turn(prompt, bad, [FOLLOW_UP], messages=[USER])


def test_a_remembered_prompt_in_another_number_type_is_refused(llama):
    """Floats equal to a remembered prompt's ids hash alike: they are refused, never recalled."""
    import numpy as np
    import torch

    renderer, prompt, completion, _ = llama
    renderer.render_ids([USER], add_generation_prompt=True)  # remembered
    for floats in (np.array(prompt, dtype=np.float64), torch.tensor(prompt, dtype=torch.float32), array.array("d", prompt)):
        with pytest.raises(ValueError, match="previous_prompt_ids must be a sequence of integers, got an array of"):
            renderer.bridge_to_next_turn(floats, completion, [FOLLOW_UP])
    with pytest.raises(ValueError, match=r"previous_prompt_ids\[0\] must be an integer, got float"):
        renderer.bridge_to_next_turn([float(token) for token in prompt], completion, [FOLLOW_UP], messages=[USER])


@pytest.mark.parametrize(
    "new, message",
    [
        ([None], r"new_messages\[0\] must be a message dict, got NoneType"),
        (["hi"], r"new_messages\[0\] must be a message dict, got str"),
        ([FOLLOW_UP, {"content": "x"}], r"new_messages\[1\] has no string 'role'"),
        (FOLLOW_UP, "new_messages must be a list of message dicts, got dict"),
        ([{"role": "tool", "content": "x", "tool_calls": [{"function": {}}]}], "new_messages: malformed tool call in message 0"),
    ],
)
def test_bad_new_messages_are_named(llama, new, message):
    renderer, prompt, completion, _ = llama
    with pytest.raises(ValueError, match=message):
        renderer.bridge_to_next_turn(prompt, completion, new, messages=[USER])


def test_a_prompt_without_the_generation_prompt_is_not_bridged():
    renderer = renderer_of("gemma_3")
    prompt, completion = turn_completion(renderer, [USER], REPLY)
    expected = renderer.render_ids([USER, REPLY, FOLLOW_UP], add_generation_prompt=True)
    assert renderer.bridge_to_next_turn(prompt, completion, [FOLLOW_UP], messages=[USER]).token_ids == expected
    bare = renderer.render_ids([USER])  # no "<start_of_turn>model\n": the model would have had no header
    assert renderer.bridge_to_next_turn(bare, completion, [FOLLOW_UP], messages=[USER]) is None
    assert renderer.bridge_to_next_turn(bare, completion, [FOLLOW_UP]) is None


def test_messages_that_do_not_match_the_prompt_give_none_with_the_reason_logged(llama, caplog):
    """A caller's mismatch is never an exception (a gateway would answer 500): None, and the
    reason logged."""
    renderer, prompt, completion, _ = llama
    other = [{"role": "user", "content": "Other."}]
    fresh = renderer_of("llama_3_1")  # knows only what it is told: the prompt's end does not match
    with caplog.at_level("DEBUG", logger="rllm_renderers"):
        assert fresh.bridge_to_next_turn(prompt, completion, [FOLLOW_UP], messages=other) is None
        # a renderer that produced the prompt lends its remembered text only to that same conversation
        assert renderer.bridge_to_next_turn(prompt, completion, [FOLLOW_UP], messages=other) is None
    assert sum("do not end as the template renders `messages`" in record.getMessage() for record in caplog.records) == 2


SYSTEM = {"role": "system", "content": "You are terse."}


@pytest.mark.parametrize("module", ["qwen2_5", "llama_3_1"])
def test_messages_or_tools_that_differ_before_the_prompts_end_give_none(module, caplog):
    """Only the prompt's last tokens are compared with its end as ``messages`` renders it; a history
    (or tools) that differs earlier, a system prompt or a tool list, would have been taken as the
    prompt's and the new tokens rendered after the wrong state. Caught for a renderer that knows the
    prompt and for one that never saw it."""
    renderer = renderer_of(module)
    history = [SYSTEM, USER]
    prompt, completion = turn_completion(renderer, history, REPLY, TOOLS)
    other_system = [{"role": "system", "content": "You are verbose."}, USER]
    more_tools = TOOLS + [{"type": "function", "function": {"name": "send", "description": "Send it.", "parameters": {}}}]
    mismatch = "previous_prompt_ids (are not the template's rendering of|do not end as the template renders) `messages`"
    for bridging in (renderer, renderer_of(module)):
        caplog.clear()
        with caplog.at_level("DEBUG", logger="rllm_renderers"):
            assert bridging.bridge_to_next_turn(prompt, completion, [FOLLOW_UP], tools=TOOLS, messages=other_system) is None
            assert bridging.bridge_to_next_turn(prompt, completion, [FOLLOW_UP], tools=more_tools, messages=history) is None
        assert sum(bool(re.search(mismatch, record.getMessage())) for record in caplog.records) == 2
        expected = renderer.render_ids(history + [REPLY, FOLLOW_UP], tools=TOOLS, add_generation_prompt=True)
        assert bridging.bridge_to_next_turn(prompt, completion, [FOLLOW_UP], tools=TOOLS, messages=history).token_ids == expected


def test_other_tools_bridge_a_remembered_prompt_only_where_they_render_alike():
    """Recalled with tools other than the prompt's: the remembered conversation is rendered with them,
    and goes on only when that is the prompt's own text (DeepSeek-V3's template never writes tools
    outside a tool-call turn; Llama-3.1 writes them into the first user message)."""
    more_tools = TOOLS + [{"type": "function", "function": {"name": "send", "description": "Send it.", "parameters": {}}}]
    for module, alike in (("deepseek_v3", True), ("llama_3_1", False)):
        renderer = renderer_of(module)
        prompt, completion = turn_completion(renderer, [USER], REPLY, TOOLS)
        bridged = renderer.bridge_to_next_turn(prompt, completion, [FOLLOW_UP], tools=more_tools)
        expected = renderer.render_ids([USER, REPLY, FOLLOW_UP], tools=more_tools, add_generation_prompt=True)
        assert (bridged is not None and bridged.token_ids == expected) if alike else bridged is None, module


def test_a_prompt_holding_sampled_tokens_of_another_split_goes_on_from_messages():
    """Under "template" a prompt with a sampled turn the tokenizer would split otherwise ("hel" + "lo")
    is still the rendering of its conversation: its ids decode to that text."""
    renderer = renderer_of("qwen2_5")
    reply = {"role": "assistant", "content": "hello world"}
    prompt, completion = turn_completion(renderer, [USER], reply)
    first = renderer.decode(completion[:1])
    resplit = renderer.encoder.encode(first[:3]) + renderer.encoder.encode(first[3:]) + completion[1:]
    assert resplit != completion and renderer.decode(resplit) == renderer.decode(completion)
    bridged = renderer.bridge_to_next_turn(prompt, resplit, [FOLLOW_UP], messages=[USER])
    assert bridged.token_ids[: len(prompt) + len(resplit)] == prompt + resplit
    history = [USER, reply, FOLLOW_UP]
    following = renderer_of("qwen2_5")  # never saw that prompt: given its conversation, it goes on
    again = following.bridge_to_next_turn(bridged.token_ids, completion, [FOLLOW_UP], messages=history)
    assert again is not None
    assert renderer.decode(again.token_ids) == renderer.render_text(history + [reply, FOLLOW_UP], add_generation_prompt=True)


def test_history_comes_from_the_renderer_the_caller_or_the_prompt_never_a_guess(llama):
    renderer, prompt, completion, expected = llama
    other = renderer_of("llama_3_1")  # never rendered this prompt: it reads the history back from it
    assert other.bridge_to_next_turn(prompt, completion, [FOLLOW_UP]).token_ids == expected
    assert other.bridge_to_next_turn(prompt, completion, [FOLLOW_UP], messages=[USER]).token_ids == expected
    assert renderer.bridge_to_next_turn(prompt, completion, [FOLLOW_UP]).token_ids == expected
    # the prompt was rendered without tools: no conversation with these tools renders to it
    assert renderer.bridge_to_next_turn(prompt, completion, [FOLLOW_UP], tools=TOOLS) is None
    assert renderer_of("llama_3_1").bridge_to_next_turn(prompt, completion, [FOLLOW_UP], tools=TOOLS) is None
    for clone in (pickle.loads(pickle.dumps(renderer)), copy.deepcopy(renderer)):  # (they start empty)
        assert clone.bridge_to_next_turn(prompt, completion, [FOLLOW_UP]).token_ids == expected
        assert clone.bridge_to_next_turn(prompt, completion, [FOLLOW_UP], messages=[USER]).token_ids == expected


def tool_round(index: int, reasoning: bool):
    call = {"id": f"call{index}", "type": "function", "function": {"name": "lookup", "arguments": {"q": str(index)}}}
    assistant = {"role": "assistant", "content": "", "tool_calls": [call]}
    if reasoning:  # (Qwen3 drops an *empty* think block once the turn is not the last one)
        assistant["reasoning_content"] = f"I need to look up {index}."
    return assistant, [{"role": "tool", "tool_call_id": f"call{index}", "content": f"result {index}"}]


@pytest.mark.parametrize("module", ["qwen3", "qwen3_coder", "llama_3_1", "gpt_oss", "deepseek_v3"])
def test_tool_call_turns_bridge_exactly(module):
    """The sampled tool-call turn is rebuilt with content="" (transformers drops content=None)."""
    renderer = renderer_of(module)
    history = [USER]
    prompt = renderer.render_ids(history, tools=TOOLS, add_generation_prompt=True)
    for index in range(3):
        assistant, results = tool_round(index, reasoning=renderer.REASONING is not None)
        _, completion = turn_completion(renderer, history, assistant, TOOLS)
        history = history + [assistant] + results
        expected = renderer.render_ids(history, tools=TOOLS, add_generation_prompt=True)
        bridged = renderer.bridge_to_next_turn(prompt, completion, results, tools=TOOLS)
        assert bridged is not None and bridged.token_ids == expected, (module, index)
        assert bridged.message_indices[-len(expected) + len(prompt) + len(completion) :].count(0) > 0
        prompt = bridged.token_ids


def test_deepseek_v3_follows_the_conversation_state():
    """DeepSeek-V3 writes <｜tool▁outputs▁begin｜> before the first tool result of the whole conversation
    only; the bridge knows which one this is from the real history."""
    renderer = renderer_of("deepseek_v3")
    history = [USER]
    prompt = renderer.render_ids(history, add_generation_prompt=True)
    turns = [
        ({"role": "assistant", "content": "Looking it up."}, [{"role": "tool", "content": "first"}]),
        ({"role": "assistant", "content": "Again."}, [{"role": "tool", "content": "second"}]),
        ({"role": "assistant", "content": "Done: 4."}, [FOLLOW_UP]),
    ]
    for assistant, new in turns:
        _, completion = turn_completion(renderer, history, assistant)
        history = history + [assistant] + new
        expected = renderer.render_ids(history, add_generation_prompt=True)
        bridged = renderer.bridge_to_next_turn(prompt, completion, new)
        assert bridged is not None and bridged.token_ids == expected, new
        prompt = bridged.token_ids
    assert renderer.decode(prompt).count("<｜tool▁outputs▁begin｜>") == 1


def test_retention_policies_on_a_rewritten_turn():
    """Qwen3 drops the sampled turn's reasoning once a user message follows."""
    assistant = {"role": "assistant", "content": "4.", "reasoning_content": "2+2 is 4."}
    for retention in ("template", "verbatim"):
        renderer = renderer_of("qwen3", thinking_retention=retention)
        prompt, completion = turn_completion(renderer, [USER], assistant)
        bridged = renderer.bridge_to_next_turn(prompt, completion, [FOLLOW_UP])
        if retention == "template":
            assert bridged is None  # the template rewrites the turn: the caller re-renders
            continue
        assert bridged.token_ids[: len(prompt) + len(completion)] == prompt + completion
        tail = renderer.decode(bridged.token_ids[len(prompt) + len(completion) :])
        assert tail == "\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"
        assert bridged.message_indices[-1] == -1 and 0 in bridged.message_indices


def test_a_remembered_prompt_of_another_conversation_with_the_same_ids_lends_nothing():
    """Two texts can encode to the same ids (Qwen3 normalizes to NFC: U+2F800 is U+4E3D). Given
    ``messages=``, the bridge must use that conversation's own text, not a remembered one's."""
    from tests.families import FAMILIES

    family = next(family for family in FAMILIES if family.module == "qwen3")
    renderer = family.renderer_class(family.load_tokenizer())
    compat, plain = [{"role": "user", "content": "\U0002f800"}], [{"role": "user", "content": "\u4e3d"}]
    prompt = renderer.render_ids(compat, add_generation_prompt=True)
    assert renderer.render_ids(plain, add_generation_prompt=True) == prompt
    answer = {"role": "assistant", "content": "ok", "reasoning_content": "hmm"}  # kept before a tool result
    follow_up = {"role": "tool", "content": "42"}
    completion = renderer.render_ids(plain + [answer])[len(prompt) :]
    bridged = renderer.bridge_to_next_turn(prompt, completion, [follow_up], messages=plain)
    expected = renderer.render_ids(plain + [answer, follow_up], add_generation_prompt=True)
    assert bridged is not None and bridged.token_ids == expected


def test_a_call_whose_name_does_not_parse_is_not_bridged():
    """Gemma-4 writes a call as ``call:NAME{ARGS}``: ``call:{x{a:"1"}}`` is the tool ``{x``, or a call
    without a name and other arguments; and the template writes the name again in the tool result
    (found through the call's id). The tokens do not say which: the bridge answers None (the caller
    re-renders), never the tool result of a name the model did not write."""
    from tests.families import ALL_FAMILIES

    family = next(family for family in ALL_FAMILIES if family.module == "gemma_4")
    renderer = family.renderer_class(family.load_tokenizer(), enable_thinking=True)
    call = {"id": "call_0", "type": "function", "function": {"name": "{x", "arguments": {"a": "1"}}}
    assistant = {"role": "assistant", "content": "", "reasoning_content": "", "tool_calls": [call]}
    result = {"role": "tool", "tool_call_id": "call_0", "content": "r1"}
    prompt, completion = turn_completion(renderer, [USER], assistant)
    assert renderer.parse_response(completion).tool_calls[0].name is None  # the name does not parse
    full = renderer.render_ids([USER, assistant, result], add_generation_prompt=True)
    assert full[: len(prompt) + len(completion)] == prompt + completion  # (an exact extension exists)
    for history in ([USER], None):
        assert renderer.bridge_to_next_turn(prompt, completion, [result], messages=history) is None

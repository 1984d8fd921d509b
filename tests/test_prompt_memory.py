"""What a renderer remembers of its prompts (rllm_renderers/prompt_memory.py) and the bridge's
result type (BridgedTokens): shared copies that grow in place but never change a prompt the caller
holds, texts kept as earlier text plus a tail, attribution built when read."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from rllm_renderers.bridging.memory import BUCKET_SIZE, History, PromptHistories, PromptText
from rllm_renderers.types import BridgedTokens, RenderedTokens
from tests.families import FAMILIES

HISTORY = History([], None)


# --- texts ----------------------------------------------------------------------------------


def test_a_prompt_text_is_its_head_up_to_the_cut_then_its_tail():
    first = "system|user|"
    second = PromptText(first, 7, "user!|assistant|")  # (the loop resumed at character 7)
    third = PromptText(second, len(second), "tool|")
    assert str(second) == "system|user!|assistant|" and len(second) == len(str(second))
    assert str(third) == "system|user!|assistant|tool|"
    assert third.text_from(len(second)) == "tool|" and third.text_from(3) == "tem|user!|assistant|tool|"
    assert third.endswith("t|tool|") and third.endswith("|tool|") and not third.endswith("x")


def test_a_long_chain_of_texts_joins_without_recursion():
    text: str | PromptText = "start"
    for index in range(5000):  # an episode of 5000 bridged turns
        text = PromptText(text, len(text), f"<{index}>")
    assert str(text).endswith("<4998><4999>") and str(text).startswith("start<0><1>")


# --- remembered prompts ------------------------------------------------------------------------


def test_a_recalled_prompt_is_a_fresh_copy_of_the_renderers_own_ids():
    memory = PromptHistories()
    ids = list(range(100))
    memory.remember(ids, HISTORY)
    ids.append(7)  # the caller changes its list: the memory does not follow
    assert memory.recall(ids) is None
    recalled = memory.recall(list(range(100)))
    assert recalled is not None and recalled.ids() == list(range(100)) and recalled.ids() is not recalled.store


def test_a_prompt_that_extends_the_latest_one_grows_its_store_in_place():
    memory = PromptHistories()
    memory.remember(list(range(10)), HISTORY)
    first = memory.recall(list(range(10)))
    memory.remember(list(range(15)), HISTORY, extends=first)
    second = memory.recall(list(range(15)))
    assert second.store is first.store and second.length == 15  # no copy
    # the shorter prompt is still recalled (with a copy of its own, since the store grew past it)
    again = memory.recall(list(range(10)))
    assert again.ids() == list(range(10)) and again.store is not first.store
    # and a prompt extending it now (a second sample of it) is its own branch
    memory.remember(list(range(10)) + [99], HISTORY, extends=again)
    assert memory.recall(list(range(10)) + [99]).ids() == list(range(10)) + [99]
    assert memory.recall(list(range(15))).ids() == list(range(15))


def test_equal_prompts_are_kept_most_recent_first_and_bounded():
    memory = PromptHistories()
    histories = [History([index], None) for index in range(BUCKET_SIZE + 2)]
    for history in histories:
        memory.remember([1, 2, 3], history)
    assert memory.recall([1, 2, 3]).history is histories[-1]
    assert len(memory._entries[(3, (1, 2, 3))]) == BUCKET_SIZE


def test_the_memory_is_bounded():
    memory = PromptHistories(size=8)
    for index in range(20):
        memory.remember([index, index], HISTORY)
    assert memory.recall([0, 0]) is None and memory.recall([19, 19]) is not None
    assert sum(len(bucket) for bucket in memory._entries.values()) == 8


# --- the bridge's result ---------------------------------------------------------------------


def bridged() -> BridgedTokens:
    calls = []

    def attribution():
        calls.append(1)
        return [0, 0, -1], [True, False, False]

    result = BridgedTokens(
        [5, 6, 7, 8, 9], message_roles=["tool"], message_tool_names=["f"], added=3, added_attribution=attribution
    )
    result.calls = calls
    return result


EAGER = RenderedTokens([5, 6, 7, 8, 9], [-1, -1, 0, 0, -1], [False] * 5, [False, False, True, False, False], ["tool"], ["f"])


def test_bridged_tokens_build_their_attribution_once_when_read():
    result = bridged()
    assert result.calls == []
    assert result.message_indices == EAGER.message_indices and result.is_content == EAGER.is_content
    assert result.sampled_mask == EAGER.sampled_mask and result.calls == [1]
    assert result.tokens_per_message() == [2]


@pytest.mark.parametrize(
    "convert",
    [
        lambda result: result,
        copy.deepcopy,
        lambda result: pickle.loads(pickle.dumps(result)),
        lambda result: dataclasses.replace(result),
        lambda result: RenderedTokens(**dataclasses.asdict(result)),
    ],
)
def test_bridged_tokens_are_equal_to_the_rendered_tokens_they_stand_for(convert):
    result = bridged()
    result.calls = None  # (pickling a closure's list is not the point here)
    result = convert(result)
    assert result == EAGER and EAGER == result


def test_bridged_tokens_take_lists_they_are_given():
    result = bridged()
    result.message_indices = [9] * 5
    assert result.message_indices == [9] * 5 and result.calls == []


# --- episodes through the bridge -------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "look", "parameters": {"type": "object", "properties": {}}}}]


def qwen3():
    family = next(family for family in FAMILIES if family.module == "qwen3")
    return family.renderer_class(family.load_tokenizer())


def tool_turn(renderer, history, index):
    call = {"id": f"c{index}", "type": "function", "function": {"name": "look", "arguments": {"n": index}}}
    assistant = {"role": "assistant", "content": "", "reasoning_content": f"step {index}", "tool_calls": [call]}
    prompt = renderer.render_ids(history, tools=TOOLS, add_generation_prompt=True)
    completion = renderer.render_ids(history + [assistant], tools=TOOLS)[len(prompt) :]
    completion = completion[: completion.index(renderer.get_stop_token_ids()[0]) + 1]
    return assistant, completion, [{"role": "tool", "tool_call_id": f"c{index}", "content": f"result {index}"}]


def test_two_samples_of_one_prompt_bridge_apart():
    """GRPO samples a prompt several times: each bridge from it is exact, whichever came first."""
    renderer = qwen3()
    history = [{"role": "user", "content": "go"}]
    prompt = renderer.render_ids(history, tools=TOOLS, add_generation_prompt=True)
    branches = [tool_turn(renderer, history, index) for index in (1, 2)]
    results = [renderer.bridge_to_next_turn(prompt, completion, new, tools=TOOLS) for _, completion, new in branches]
    for (assistant, completion, new), result in zip(branches, results):
        expected = renderer.render_ids(history + [assistant] + new, tools=TOOLS, add_generation_prompt=True)
        assert result is not None and result.token_ids == expected
    # each branch goes on from its own prompt
    for (assistant, _, new), result in zip(branches, results):
        longer = history + [assistant] + new
        next_assistant, completion, next_new = tool_turn(renderer, longer, 3)
        following = renderer.bridge_to_next_turn(result.token_ids, completion, next_new, tools=TOOLS)
        expected = renderer.render_ids(longer + [next_assistant] + next_new, tools=TOOLS, add_generation_prompt=True)
        assert following is not None and following.token_ids == expected


def test_a_result_the_caller_changed_is_not_recalled():
    renderer = qwen3()
    history = [{"role": "user", "content": "go"}]
    prompt = renderer.render_ids(history, tools=TOOLS, add_generation_prompt=True)
    assistant, completion, new = tool_turn(renderer, history, 1)
    result = renderer.bridge_to_next_turn(prompt, completion, new, tools=TOOLS)
    pristine = list(result.token_ids)
    result.token_ids[3] = 0  # the engine reuses the list
    longer = history + [assistant] + new
    next_assistant, next_completion, next_new = tool_turn(renderer, longer, 2)
    assert renderer.bridge_to_next_turn(result.token_ids, next_completion, next_new, tools=TOOLS) is None
    following = renderer.bridge_to_next_turn(pristine, next_completion, next_new, tools=TOOLS)
    expected = renderer.render_ids(longer + [next_assistant] + next_new, tools=TOOLS, add_generation_prompt=True)
    assert following is not None and following.token_ids == expected


def test_sessions_that_share_prompt_ids_never_get_each_others_extension():
    """Two sessions whose conversations render to the same prompt ids: one user typed the control
    tokens that spell the other session's turns (the default mode lets them through). DeepSeek-V3
    opens the tool-output block only at the first tool result of a conversation, so the same
    sampled turn and tool result extend the two prompts differently. Ids alone cannot say which
    session is asking: None; with ``messages=``, each gets its own extension."""
    family = next(family for family in FAMILIES if family.module == "deepseek_v3")
    renderer = family.renderer_class(family.load_tokenizer())
    first = [  # (transformers 5 drops content None, and with content this template writes no calls)
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking."},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "Thanks. Look once more?"},
    ]
    text = renderer.render_text(first, add_generation_prompt=True)
    opening, generation_prompt = "<｜User｜>", "<｜Assistant｜>"
    spelled = text[text.index(opening) + len(opening) : -len(generation_prompt)]
    second = [{"role": "user", "content": spelled}]  # one user message holding the other's turns
    prompt = renderer.render_ids(first, add_generation_prompt=True)
    assert renderer.render_ids(second, add_generation_prompt=True) == prompt  # (both remembered now)
    reply = {"role": "assistant", "content": "Let me check."}
    completion = renderer.render_ids(first + [reply])[len(prompt) :]
    completion = completion[: completion.index(renderer.get_stop_token_ids()[0]) + 1]
    new = [{"role": "tool", "tool_call_id": "c1", "content": "rain"}]
    expected = [renderer.render_ids(history + [reply] + new, add_generation_prompt=True) for history in (first, second)]
    assert expected[0] != expected[1] and all(ids[: len(prompt)] == prompt for ids in expected)
    assert renderer.bridge_to_next_turn(prompt, completion, new) is None
    for history, ids in zip((first, second), expected):
        assert renderer.bridge_to_next_turn(prompt, completion, new, messages=history).token_ids == ids
    # a renderer that remembers only one of them goes on from it
    alone = family.renderer_class(family.load_tokenizer())
    alone.render_ids(first, add_generation_prompt=True)
    assert alone.bridge_to_next_turn(prompt, completion, new).token_ids == expected[0]


def test_equal_histories_remembered_twice_are_one():
    memory = PromptHistories()
    memory.remember([1, 2, 3], History([{"role": "user", "content": "a"}], None))
    memory.remember([1, 2, 3], History([{"role": "user", "content": "a"}], None))
    assert memory.recall([1, 2, 3]).others == ()
    memory.remember([1, 2, 3], History([{"role": "user", "content": "b"}], None))
    recalled = memory.recall([1, 2, 3])
    assert recalled.history.messages[0]["content"] == "b" and [h.messages[0]["content"] for h in recalled.others] == ["a"]

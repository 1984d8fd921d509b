"""build_supervised_example and the per-turn split: each policy, the close-token rule, bad input."""

from __future__ import annotations

import pytest

from tests.families import FAMILIES
from tests.test_supervised_references import runs

BY_MODULE = {family.module: family for family in FAMILIES}
REAL = [family for family in FAMILIES if not family.synthetic and family.module != "minimax_m3"]

TWO_TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello there!", "reasoning_content": "A greeting."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "It is 4.", "reasoning_content": "Two and two."},
]


def renderer_for(module: str):
    family = BY_MODULE[module]
    return family.renderer_class(family.load_tokenizer())


def trained_runs(example) -> list[tuple[int, int]]:
    """Half-open [start, end) runs of trained tokens."""
    return runs(example.trained_mask)


@pytest.mark.parametrize("family", REAL, ids=[family.module for family in REAL])
def test_last_assistant_trains_exactly_what_the_model_samples_after_its_prompt(family):
    """The trained tokens are what follows the generation prompt of the conversation before the last
    turn, through the turn's stop token, and nothing after it: checked against two independent
    renders (the prompt the model was sampled from, and the full conversation)."""
    renderer = family.renderer_class(family.load_tokenizer())
    checked = 0
    for messages in (TWO_TURNS[:3], TWO_TURNS):
        example = renderer.build_supervised_example(messages, train_on="last_assistant")
        assert example.token_ids == renderer.render_ids(messages)
        prompt = renderer.render_ids(messages[:-1], add_generation_prompt=True)
        if example.token_ids[: len(prompt)] != prompt:
            continue  # the template renders a history turn differently from a sampled one (QwQ, R1-distill)
        ((start, end),) = trained_runs(example)
        assert start == len(prompt), "training must start where the generation prompt ends"
        assert example.token_ids[end - 1] in renderer.get_stop_token_ids(), "the close token is trained"
        # what follows the close is the template's, and nothing of it is trained
        assert not any(example.weights[end:])
        assert example.trained_messages == (len(messages) - 1,)
        checked += 1
    assert checked == 2


def test_all_assistant_trains_rewritten_history_as_rewritten():
    """Qwen3 drops the reasoning of turns before the last user message: the single example trains
    the first turn without it, the per-turn split with it."""
    renderer = renderer_for("qwen3")
    whole = renderer.build_supervised_example(TWO_TURNS, train_on="all_assistant")
    first, second = trained_runs(whole)
    assert "A greeting." not in renderer.decode(whole.token_ids[first[0] : first[1]])
    assert "Two and two." in renderer.decode(whole.token_ids[second[0] : second[1]])
    assert whole.trained_messages == (2, 4)

    per_turn = renderer.build_supervised_examples(TWO_TURNS, split="per_turn")
    assert [example.trained_messages for example in per_turn] == [(2,), (4,)]
    ((start, end),) = trained_runs(per_turn[0])
    assert "A greeting." in renderer.decode(per_turn[0].token_ids[start:end])
    # the last turn's own example is the single example's tokens, trained on that turn alone
    assert per_turn[1].token_ids == whole.token_ids
    assert trained_runs(per_turn[1]) == [second]
    # each turn after the prompt it was sampled from: the render of the messages before it, with the generation prompt
    for example in per_turn:
        (index,), ((start, _),) = example.trained_messages, trained_runs(example)
        assert example.token_ids[:start] == renderer.render_ids(TWO_TURNS[:index], add_generation_prompt=True)
    # the history is rewritten, so "auto" splits
    assert [example.trained_messages for example in renderer.build_supervised_examples(TWO_TURNS)] == [(2,), (4,)]


def trained_texts(renderer, example) -> list[str]:
    return [renderer.decode(example.token_ids[start:end]) for start, end in trained_runs(example)]


@pytest.mark.parametrize("mode", ["thinking", "chat"])
def test_a_turn_whose_reasoning_was_dropped_trains_what_a_chat_turn_trains(mode):
    """DeepSeek-V4 writes a turn before the last user message as ``<｜Assistant｜></think>content``
    (its reasoning dropped). That ``</think>`` is the chat mode's generation prompt, not sampled:
    right after ``<｜Assistant｜>`` the model never samples, in either mode (thinking mode prompts
    ``<｜Assistant｜><think>``). So the turn trains as the same turn does in chat mode."""
    family = BY_MODULE["deepseek_v4"]
    renderer = family.renderer_class(family.load_tokenizer(), thinking_mode=mode)
    example = renderer.build_supervised_example(TWO_TURNS, train_on="all_assistant")
    assert "<｜Assistant｜></think>Hello there!" in renderer.decode(example.token_ids)
    last = "Two and two.</think>It is 4." if mode == "thinking" else "It is 4."
    assert trained_texts(renderer, example) == [
        "Hello there!<｜end▁of▁sentence｜>",
        f"{last}<｜end▁of▁sentence｜>",
    ]


def test_the_close_of_a_tool_run_written_in_the_next_turn_is_not_trained():
    """MiniMax-M3 closes a run of tool results (``[e~[\n``) when the next message begins, so those
    characters are the next assistant message's: they end the tool turn, before the generation
    prompt ``]~b]ai\n``, and are not trained."""
    renderer = renderer_for("minimax_m3")
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
    ]
    example = renderer.build_supervised_example(messages, train_on="last_assistant")
    (start, _end), = trained_runs(example)
    assert trained_texts(renderer, example) == ["</mm:think>Sunny.[e~["]
    assert renderer.decode(example.token_ids[:start]).endswith("<response>sunny</response>[e~[\n]~b]ai\n")


def test_auto_keeps_one_example_where_the_history_is_not_rewritten():
    renderer = renderer_for("qwen2_5")
    plain = [{key: value for key, value in message.items() if key != "reasoning_content"} for message in TWO_TURNS]
    (example,) = renderer.build_supervised_examples(plain)
    assert example.trained_messages == (2, 4)
    assert len(trained_runs(example)) == 2
    assert len(renderer.build_supervised_examples(plain, split="per_turn")) == 2
    (never,) = renderer.build_supervised_examples(TWO_TURNS, split="never")
    # Qwen2.5 does not render reasoning: the same tokens and weights with it
    assert (never.token_ids, never.weights) == (example.token_ids, example.weights)


def test_all_assistant_and_last_assistant_differ_only_in_the_earlier_turns():
    renderer = renderer_for("llama_3_1")
    last = renderer.build_supervised_example(TWO_TURNS, train_on="last_assistant")
    every = renderer.build_supervised_example(TWO_TURNS, train_on="all_assistant")
    assert last.token_ids == every.token_ids
    only_every = [k for k in range(len(last.weights)) if every.weights[k] and not last.weights[k]]
    assert only_every and {every.rendered.message_indices[k] for k in only_every} == {2}
    assert all(every.weights[k] for k in range(len(last.weights)) if last.weights[k])


def test_all_trains_every_token():
    renderer = renderer_for("gemma_3")
    example = renderer.build_supervised_example(TWO_TURNS, train_on="all")
    assert example.weights == [1.0] * len(example.token_ids) and example.token_ids
    # also a conversation without an assistant message
    assert renderer.build_supervised_example(TWO_TURNS[:2], train_on="all").num_trained > 0


def test_tool_calls_and_the_close_are_trained_and_tool_results_are_not():
    renderer = renderer_for("qwen3")
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
    ]
    example = renderer.build_supervised_example(messages, train_on="all_assistant")
    texts = [renderer.decode(example.token_ids[a:b]) for a, b in trained_runs(example)]
    assert len(texts) == 2 and '"get_weather"' in texts[0] and texts[0].endswith("<|im_end|>")
    assert texts[1].endswith("Sunny.<|im_end|>")
    tool_tokens = [k for k, index in enumerate(example.rendered.message_indices) if index == 2]
    assert tool_tokens and not any(example.weights[k] for k in tool_tokens)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda r: r.build_supervised_example(TWO_TURNS, train_on="assistant"), "train_on must be one of"),
        (lambda r: r.build_supervised_example(TWO_TURNS[:2]), "no assistant message"),
        (lambda r: r.build_supervised_example(TWO_TURNS[:2], train_on="all_assistant"), "no assistant message"),
        (lambda r: r.build_supervised_examples(TWO_TURNS[:2], split="per_turn"), "no assistant message"),
        (lambda r: r.build_supervised_examples(TWO_TURNS, split="sometimes"), "split must be one of"),
        (lambda r: r.build_supervised_example("hello"), "messages must be a list"),
        (lambda r: r.build_supervised_example([]), "empty conversation"),
    ],
)
def test_bad_input_is_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call(renderer_for("qwen2_5"))


def test_a_renderer_without_turn_facts_refuses():
    family = BY_MODULE["qwen2_5"]
    unlearned = type("Unlearned", (family.renderer_class,), {"TURN": None})(family.load_tokenizer())
    with pytest.raises(ValueError, match="has not learned how an assistant turn ends"):
        unlearned.build_supervised_example(TWO_TURNS)


def test_an_assistant_message_the_template_does_not_write_is_an_error():
    """A chosen message without a sampled token in the render (here a render stripped of its sampled
    flags) is an error naming the message, not an example that trains nothing."""
    renderer = renderer_for("qwen2_5")
    example = renderer.build_supervised_example(TWO_TURNS, train_on="last_assistant")
    broken = type(renderer)(renderer.tokenizer)
    broken.render = lambda *a, **k: type(example.rendered)(
        token_ids=example.rendered.token_ids,
        message_indices=example.rendered.message_indices,
        sampled_mask=[False] * len(example.token_ids),
        is_content=example.rendered.is_content,
        message_roles=example.rendered.message_roles,
    )
    with pytest.raises(ValueError, match="writes no token the model samples for assistant message 4"):
        broken.build_supervised_example(TWO_TURNS)

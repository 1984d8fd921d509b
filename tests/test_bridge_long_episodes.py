"""Long agentic episodes on the ids-only path (rLLM's gateway in cumulative token mode).

The server renders the first prompt; from then on the renderer bridges with ids alone, from its
memory of the prompts it bridged. Every tenth turn the renderer is a new one (a new gateway
process, or a session after a reset): it has never seen the prompt, which the server rendered,
and reads the conversation back from the prompt (rllm_renderers/bridging/recovery.py) before it
bridges, on prompts of up to a hundred messages. Counted per turn: a **miss** (None where the
template keeps the history: its render of the whole conversation extends the previous prompt and
completion) and a **wrong** bridge (tokens other than that render). Both must be 0, and so every
turn bridges.
"""

from __future__ import annotations

import pytest

from tests.families import FAMILIES

FAMILY = {family.module: family for family in FAMILIES}
TURNS = 50
FRESH_EVERY = 10
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]


def tool_round(index: int) -> list[dict]:
    """An assistant turn that reasons and calls a tool, and the tool's result."""
    call = {"id": f"call_{index}", "type": "function", "function": {"name": "read_file", "arguments": {"path": f"src/m{index}.py"}}}
    return [
        {"role": "assistant", "content": "", "reasoning_content": f"I should read module {index}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{index}", "content": f"def f{index}():\n    return {index} * 2\n"},
    ]


def chat_round(index: int) -> list[dict]:
    """An assistant answer and the user's next question."""
    return [
        {"role": "assistant", "content": f"Answer {index}: {index} squared is {index * index}."},
        {"role": "user", "content": f"And {index + 1} squared?"},
    ]


EPISODES = {  # family -> (first messages, one round, tools)
    "qwen3": ([{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Read the modules."}], tool_round, TOOLS),
    "deepseek_v3": ([{"role": "user", "content": "What is 0 squared?"}], chat_round, None),
    "llama_3_1": ([{"role": "system", "content": "Be terse."}, {"role": "user", "content": "What is 0 squared?"}], chat_round, None),
}


def sampled(server, history: list[dict], assistant: dict, tools) -> list[int]:
    """The assistant turn as the model samples it: the template's render of it, cut after its stop."""
    prompt = server.render_ids(history, tools=tools, add_generation_prompt=True)
    full = server.render_ids(history + [assistant], tools=tools)
    stops = set(server.get_stop_token_ids())
    end = next(index for index in range(len(prompt), len(full)) if full[index] in stops)
    return full[len(prompt) : end + 1]


@pytest.mark.parametrize("module", sorted(EPISODES))
def test_a_fifty_turn_episode_bridges_every_turn_the_template_keeps(module):
    family = FAMILY[module]
    tokenizer = family.load_tokenizer()
    server = family.renderer_class(tokenizer)  # (renders what the server renders: parity is tested elsewhere)
    first, one_round, tools = EPISODES[module]
    history = list(first)
    prompt = server.render_ids(history, tools=tools, add_generation_prompt=True)
    counts = {"turns": 0, "bridged": 0, "missed": 0, "wrong": 0, "read back": 0}
    renderer = None
    for index in range(TURNS):
        if index % FRESH_EVERY == 0:  # a renderer that never saw this prompt: it reads it back
            renderer = family.renderer_class(tokenizer)
            counts["read back"] += 1
        assistant, *new = one_round(index)
        completion = sampled(server, history, assistant, tools)
        bridged = renderer.bridge_to_next_turn(prompt, completion, new, tools=tools)
        history += [assistant, *new]
        full = server.render_ids(history, tools=tools, add_generation_prompt=True)
        kept = prompt + completion
        counts["turns"] += 1
        if bridged is None:
            counts["missed"] += full[: len(kept)] == kept
            prompt = full  # the engine re-renders through the server
        else:
            counts["bridged"] += 1
            counts["wrong"] += list(bridged.token_ids) != full
            prompt = list(bridged.token_ids)
    assert len(history) > 100 and counts["read back"] == TURNS // FRESH_EVERY, counts
    assert counts["wrong"] == 0 and counts["missed"] == 0, counts
    assert counts["bridged"] == TURNS, counts

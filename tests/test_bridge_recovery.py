"""The bridge from a prompt the renderer did not render reads the history back from the prompt
(rllm_renderers.bridging.recovery); what the prompt cannot show must not make it wrong."""

from __future__ import annotations

from rllm_renderers.bridging.memory import PromptHistories
from tests.test_fact_proof import compile_file, renderer_of

#: Bielik style: an empty system message is written as nothing, but the loop runs over
#: messages[1:] and looks messages up by its own index, so that message shifts what a tool result
#: finds before it.
HIDDEN_SYSTEM_SHIFTS_INDICES = (
    "{%- if messages[0].role == 'system' %}{% set start = 1 %}{% if messages[0].content %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}{% else %}{% set start = 0 %}{% endif %}"
    "{%- for m in messages[start:] %}"
    "{%- if m.role == 'user' %}<|im_start|>user\n{{ m.content }}<|im_end|>\n"
    "{%- elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}{% for c in m.tool_calls or [] %}"
    "<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}<|im_end|>\n"
    "{%- elif m.role == 'tool' %}{% if messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user\n{% endif %}"
    "<tool_response>{{ m.content }}</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{%- endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def call(number: int, city: str) -> dict:
    return {"id": f"call{number}", "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}


def test_a_hidden_empty_system_message_is_a_reading_too(tmp_path):
    renderer_class, compiled = compile_file(tmp_path, "hidden_system", HIDDEN_SYSTEM_SHIFTS_INDICES)
    history = [{"role": "system", "content": ""}, {"role": "user", "content": "Weather?"}]
    turn = {"role": "assistant", "content": "", "tool_calls": [call(1, "Paris"), call(2, "Rome")]}
    new = [{"role": "tool", "tool_call_id": "call1", "content": "sunny"}, {"role": "tool", "tool_call_id": "call2", "content": "rain"}]
    server = renderer_of(renderer_class, compiled)  # (the inference server's render)
    prompt = server.render_ids(history, add_generation_prompt=True)
    full = server.render_ids(history + [turn] + new, add_generation_prompt=True)
    completion = full[len(prompt) : full.index(server.get_stop_token_ids()[0], len(prompt)) + 1]
    assert server.render_ids(history[1:], add_generation_prompt=True) == prompt  # the prompt cannot tell
    assert server.render_ids(history[1:] + [turn] + new, add_generation_prompt=True) != full  # yet it matters
    stranger = renderer_of(renderer_class, compiled)
    stranger.prompt_histories = PromptHistories()
    assert stranger.bridge_to_next_turn(prompt, completion, new) is None  # never the tokens without the system

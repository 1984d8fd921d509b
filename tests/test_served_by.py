"""``served_by="vllm"``: the renderer renders what vLLM renders (its message normalizations,
rllm_renderers/core/serving.py), checked against ``apply_chat_template`` on the messages as vLLM
hands them to the template (written out here by hand, from vLLM's ``chat_utils.py``)."""

from __future__ import annotations

import pytest

from tests.families import FAMILIES

FAMILY = {family.module: family for family in FAMILIES}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
#: as an OpenAI client sends it: compact JSON arguments, content None, content parts
SENT = [
    {"role": "user", "content": [{"type": "text", "text": "Weather in"}, {"type": "text", "text": "Paris?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": "21 C"}]},
]
#: as vLLM hands it to a template that reads content as a string (_parse_chat_message_content,
#: _postprocess_messages): parts joined with "\n", None as "", arguments parsed
AS_VLLM_RENDERS = [
    {"role": "user", "content": "Weather in\nParis?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny\n21 C"},
]


@pytest.fixture(scope="module")
def qwen3():
    family = FAMILY["qwen3"]
    return family, family.load_tokenizer()


def test_vllm_profile_renders_what_vllm_renders(qwen3):
    family, tokenizer = qwen3
    renderer = family.renderer_class(tokenizer, served_by="vllm")
    expected = tokenizer.apply_chat_template(
        AS_VLLM_RENDERS, tools=TOOLS, chat_template=family.template_source(), add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert renderer.render_ids(SENT, tools=TOOLS, add_generation_prompt=True) == list(expected)
    # (the default renders as transformers does: content None is no content, which this template refuses,
    # and with content "" the compact arguments are kept as sent and the parts joined without "\n")
    default = family.renderer_class(tokenizer)
    with pytest.raises(ValueError, match="has no attribute 'content'"):
        default.render_ids(SENT, tools=TOOLS, add_generation_prompt=True)
    with_content = [SENT[0], {**SENT[1], "content": ""}, SENT[2]]
    assert default.render_ids(with_content, tools=TOOLS, add_generation_prompt=True) != list(expected)


def test_the_ids_only_bridge_on_vllm_prompts_writes_new_messages_as_vllm_does(qwen3):
    """The gateway's new tool result arrives as content parts: vLLM joins them with "\\n"."""
    family, tokenizer = qwen3
    template = family.template_source()

    def vllm_ids(messages):
        return list(
            tokenizer.apply_chat_template(
                messages, tools=TOOLS, chat_template=template, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )

    prompt = vllm_ids(AS_VLLM_RENDERS[:1])
    full = vllm_ids(AS_VLLM_RENDERS)
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    completion = full[len(prompt) : full.index(stop, len(prompt)) + 1]
    renderer = family.renderer_class(tokenizer, served_by="vllm")  # never saw the prompt: reads it back
    bridged = renderer.bridge_to_next_turn(prompt, completion, SENT[2:], tools=TOOLS)
    assert bridged is not None and bridged.token_ids == full


def test_served_by_names_the_servers_it_knows():
    family = FAMILY["qwen3"]
    with pytest.raises(ValueError, match="served_by must be None or one of"):
        family.renderer_class(None, served_by="sglang-ish")

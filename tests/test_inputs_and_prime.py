"""Input errors name the message and the field; OpenAI content parts; results in prime-rl's types.

- Every field of the wrong type is a ValueError naming the message index and the field, in every
  family, and no error leaks the runtime's internal class names.
- List content (OpenAI text parts) is joined for a template that reads content as a string
  (learned at compile time: ``CONTENT_FORMAT``) and passed as parts to one that loops over them.
- Built as prime-rl builds a custom renderer, a generated class returns PrimeIntellect's own
  ``RenderedTokens`` / ``ParsedResponse`` / ``ParsedToolCall``; ``reasoning_complete`` follows prime.
"""

from __future__ import annotations

import pytest

from rllm_renderers.jinja import runtime as jinja

from .families import CORPUS, FAMILIES, FAMILY_IDS, corpus_path

BY_MODULE = {family.module: family for family in FAMILIES}
INTERNAL_NAMES = ("TemplateList", "TemplateDict", "TemplateStr", "Undefined", "Namespace", "_Missing")


def renderer_for(module: str, **knobs):
    family = BY_MODULE[module]
    return family.renderer_class(family.load_tokenizer(), **knobs)


# --- errors name the message and the field -----------------------------------------------------

BAD_VALUES = [123, 1.5, True, {"a": 1}, ["x", 2], object()]
FIELDS = ["role", "content", "name", "tool_call_id", "reasoning_content", "tool_calls"]


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_every_bad_field_is_named_with_its_message_index(family):
    renderer = family.renderer_class(None)
    named = 0
    for field in FIELDS:
        for value in BAD_VALUES:
            messages = [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
                {"role": "user", "content": "Again"},
            ]
            messages[1] = {**messages[1], field: value}
            try:
                renderer.render_text(messages)
            except ValueError as exc:
                text = str(exc)
                assert "message 1" in text, (field, value, text)
                assert not any(name in text for name in INTERNAL_NAMES), (field, value, text)
                named += 1
            else:  # only a list of content parts may render, and only where it is all text
                assert field == "content" and isinstance(value, list), (field, value)
    assert named >= len(FIELDS) * len(BAD_VALUES) - 1


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
@pytest.mark.parametrize(
    "tools, message",
    [("x", "tools must be a list of tool dicts, got str"), ({"a": 1}, "got dict"), ([1], r"tools\[0\] must be a dict, got int")],
)
def test_tools_that_are_not_a_list_of_dicts_are_named(family, tools, message):
    with pytest.raises(ValueError, match=message):
        family.renderer_class(None).render_text([{"role": "user", "content": "Hi"}], tools=tools)


def test_a_template_failure_names_the_message_it_was_rendering():
    base = BY_MODULE["qwen3"].renderer_class

    class Failing(base):
        def render_template(self, out, messages, tools, documents, add_generation_prompt):
            out.mark_message(messages[0])
            out.append("x")
            out.mark_message(messages[1])
            messages[1]["content"].startswith  # noqa: B018 - an AttributeError on a dict, as a template bug would
            raise AttributeError("'dict' object has no attribute 'startswith'")

    # Not a refusal Jinja would make, so it keeps its type (verification must see it as a bug),
    # but it says which message was being rendered.
    with pytest.raises(AttributeError) as raised:
        Failing(None).render_text([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    assert not isinstance(raised.value, jinja.TemplateError)
    assert any("while rendering message 1 (role 'user')" in note for note in raised.value.__notes__)


# --- content parts --------------------------------------------------------------------------------


def test_content_format_is_learned_per_template():
    from compiler.analysis import parse_template
    from compiler.content_format import detect_content_format

    def fmt(source: str) -> str:
        return detect_content_format(parse_template(source, "t.jinja"))

    assert fmt("{% for m in messages %}{{ m.content }}{% endfor %}") == "string"
    assert fmt("{% for m in messages %}{{ m['content'] | trim }}{% endfor %}") == "string"
    assert fmt("{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}") == "parts"
    assert fmt("{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}") == "parts"
    assert fmt("{% for m in messages %}{% set c = m.content %}{% for p in c %}{{ p }}{% endfor %}{% endfor %}") == "parts"
    macro = "{% macro show(c) %}{% for p in c %}{{ p.text }}{% endfor %}{% endmacro %}"
    assert fmt(macro + "{% for m in messages %}{{ show(m.content) }}{% endfor %}") == "parts"
    assert fmt(macro + "{% for m in messages %}{{ show(c=m.content) }}{% endfor %}") == "parts"
    assert fmt("{% for m in messages %}{% for t in m.tool_calls %}{{ t }}{% endfor %}{% endfor %}") == "string"


def test_checked_in_classes_record_their_content_format():
    assert {family.module: family.renderer_class.CONTENT_FORMAT for family in FAMILIES} == {
        "qwen3": "string",
        "qwen2_5": "string",
        "qwen3_5": "parts",
        "qwen3_coder": "string",
        "deepseek_v3": "string",
        "llama_3_1": "string",
        "llama_3_2": "string",
        "gemma_3": "parts",
        "gpt_oss": "string",
        # our own templates (templates_overrides/): both accept OpenAI content parts
        "gpt_oss_harmony": "parts",
        "minimax_m3": "parts",
        "deepseek_v4": "string",
    }


@pytest.mark.parametrize("module", [f.module for f in FAMILIES if f.renderer_class.CONTENT_FORMAT == "string"])
def test_text_parts_are_joined_for_a_string_template(module):
    renderer = renderer_for(module)
    parts = [{"type": "text", "text": "What is "}, {"type": "text", "text": "2 + 2?"}]
    as_parts = [{"role": "user", "content": parts}]
    as_string = [{"role": "user", "content": "What is 2 + 2?"}]
    assert renderer.render_ids(as_parts, add_generation_prompt=True) == renderer.render_ids(
        as_string, add_generation_prompt=True
    )
    image = [*parts, {"type": "image_url", "image_url": {"url": "data:,"}}]
    with pytest.raises(ValueError, match=r"message 0 field 'content\[2\]' is a 'image_url' part.*text only"):
        renderer.render_ids([{"role": "user", "content": image}])


@pytest.mark.parametrize("module", [f.module for f in FAMILIES if f.renderer_class.CONTENT_FORMAT == "parts"])
def test_parts_templates_get_the_parts_as_the_oracle_does(module):
    family = BY_MODULE[module]
    tokenizer = family.load_tokenizer()
    renderer = family.renderer_class(tokenizer)
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
    ]
    expected = tokenizer.apply_chat_template(
        messages, chat_template=family.template_source(), add_generation_prompt=True, tokenize=False
    )
    assert renderer.render_text(messages, add_generation_prompt=True) == expected


# --- prime-rl's own types ---------------------------------------------------------------------------


def _prime_built(module: str):
    pytest.importorskip("renderers", reason="renderers (the prime extra) is not installed")
    family = BY_MODULE[module]
    cls = family.renderer_class
    return cls(family.load_tokenizer(), cls.config_class())


@pytest.mark.parametrize("module", ["qwen3", "llama_3_1", "gpt_oss"])
def test_built_like_prime_rl_it_returns_prime_types(module):
    import renderers
    from renderers import base as prime

    renderer = _prime_built(module)
    assert isinstance(renderer, renderers.Renderer)
    history = [{"role": "user", "content": "Weather in Paris?"}]
    tools = [{"type": "function", "function": {"name": "weather", "description": "Weather now.", "parameters": {"type": "object", "properties": {}}}}]
    call = {"type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}
    rendered = renderer.render(history, tools=tools, add_generation_prompt=True)
    assert type(rendered) is prime.RenderedTokens and rendered.token_ids
    prompt = rendered.token_ids
    full = renderer.render_ids(history + [{"role": "assistant", "content": "", "tool_calls": [call]}], tools=tools)
    completion = full[len(prompt) :]
    parsed = renderer.parse_response(completion, tools=tools, prompt_ids=prompt)
    assert type(parsed) is prime.ParsedResponse
    assert parsed.tool_calls and all(type(c) is prime.ParsedToolCall for c in parsed.tool_calls)
    assert parsed.tool_calls[0].name == "weather" and parsed.tool_calls[0].status == prime.ToolCallParseStatus.OK
    assert parsed.reasoning_complete is True
    stop = renderer.get_stop_token_ids()[0]
    cut = completion[: completion.index(stop) + 1] if stop in completion else completion
    bridged = renderer.bridge_to_next_turn(prompt, cut, [{"role": "tool", "content": "sunny"}], tools=tools)
    assert bridged is None or type(bridged) is prime.RenderedTokens


def test_a_bridge_built_like_prime_rl_is_a_prime_rendered_tokens():
    from renderers import base as prime

    renderer = _prime_built("llama_3_1")
    history = [{"role": "user", "content": "Hi"}]
    prompt = renderer.render_ids(history, add_generation_prompt=True)
    completion = renderer.render_ids(history + [{"role": "assistant", "content": "Hello."}])[len(prompt) :]
    bridged = renderer.bridge_to_next_turn(prompt, completion, [{"role": "user", "content": "Again"}])
    assert type(bridged) is prime.RenderedTokens
    assert bridged.token_ids[: len(prompt) + len(completion)] == prompt + completion


def test_plain_construction_keeps_the_projects_types():
    from rllm_renderers.types import ParsedResponse, RenderedTokens

    family = BY_MODULE["qwen3"]
    renderer = family.renderer_class(family.load_tokenizer())
    assert type(renderer.render([{"role": "user", "content": "x"}])) is RenderedTokens
    assert type(renderer.parse_response([])) is ParsedResponse


def test_reasoning_complete_follows_prime():
    llama = renderer_for("llama_3_1")
    assert llama.REASONING is None
    assert llama.parse_response(llama.encoder.encode("Plain answer.")).reasoning_complete is True
    qwen = renderer_for("qwen3")
    open_ids = qwen.encoder.encode("<think>\nstill thinking")
    assert qwen.parse_response(open_ids).reasoning_complete is False
    closed = qwen.encoder.encode("<think>\nthought\n</think>\n\nDone.")
    assert qwen.parse_response(closed).reasoning_complete is True

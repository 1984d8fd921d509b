"""PrimeIntellect's RendererConfig -> our generated renderer (rllm_renderers/adapters/prime_config.py),
the factory scripts/prime_suite.sh runs their test suite through."""

from __future__ import annotations

import copy

import pytest

from tests.families import FAMILIES, load_corpus_tokenizer

pytest.importorskip("renderers", reason="the prime extra (renderers) is not installed")

from renderers import configs  # noqa: E402

from rllm_renderers.adapters.prime_config import PRIME_FAMILIES, make_renderer  # noqa: E402
from rllm_renderers.core.registry import generated_index  # noqa: E402

HELLO = [{"role": "user", "content": "Hello!"}]


def family(module: str):
    return next(f for f in FAMILIES if f.module == module)


def with_template(module: str):
    """The family's corpus tokenizer carrying the family's own template (as the suite loads it)."""
    tokenizer = copy.copy(family(module).load_tokenizer())
    tokenizer.chat_template = family(module).template_source()
    return tokenizer


def test_every_family_names_generated_renderers():
    known = {entry.family for entry in generated_index()}
    assert all(modules and set(modules) <= known for modules in PRIME_FAMILIES.values())


def test_the_tokenizers_template_picks_the_renderer_within_a_family():
    for module in ("llama_3_1", "llama_3_2"):
        renderer = make_renderer(with_template(module), configs.Llama3RendererConfig())
        assert type(renderer).__name__ == family(module).class_name


def test_knob_fields_reach_the_template_and_results_are_prime_types():
    from renderers.base import RenderedTokens

    config = configs.Qwen3RendererConfig(enable_thinking=False)
    renderer = make_renderer(with_template("qwen3"), config)
    assert renderer.config is config
    assert renderer.knob_values == {"enable_thinking": False}
    assert renderer.render_text(HELLO, add_generation_prompt=True).endswith("<think>\n\n</think>\n\n")
    assert isinstance(renderer.render(HELLO, add_generation_prompt=True), RenderedTokens)


def test_gpt_oss_is_harmony_with_its_conversation_start_date():
    config = configs.GptOssRendererConfig(reasoning_effort="high", conversation_start_date="2025-01-15")
    renderer = make_renderer(with_template("gpt_oss"), config)
    assert type(renderer).__name__ == "GptOssHarmonyRenderer"
    text = renderer.render_text(HELLO, add_generation_prompt=True)
    assert "Current date: 2025-01-15\n\nReasoning: high" in text


def test_deepseek_v4_without_a_template_gets_the_familys_only_renderer():
    tokenizer = load_corpus_tokenizer("dsv4")
    assert getattr(tokenizer, "chat_template", None) is None
    renderer = make_renderer(tokenizer, configs.DeepSeekV4RendererConfig())
    assert type(renderer).__name__ == "DeepseekV4Renderer"


def test_thinking_retention_all_is_verbatim():
    tokenizer = with_template("qwen3")
    assert make_renderer(tokenizer, configs.Qwen3RendererConfig()).thinking_retention == "template"
    assert make_renderer(tokenizer, configs.Qwen3RendererConfig(thinking_retention="tool_cycle")).thinking_retention == "template"
    assert make_renderer(tokenizer, configs.Qwen3RendererConfig(thinking_retention="all")).thinking_retention == "verbatim"


def test_what_cannot_be_honoured_is_declined_with_the_reason():
    tokenizer = with_template("gpt_oss")
    with pytest.raises(NotImplementedError, match="use_system_prompt=False"):
        make_renderer(tokenizer, configs.GptOssRendererConfig(use_system_prompt=False))
    with pytest.raises(NotImplementedError, match="'glm-5.1' family"):
        make_renderer(tokenizer, configs.GLM51RendererConfig())
    # the tokenizer's template is Qwen3's: not a renderer of PrimeIntellect's qwen3.5 family
    with pytest.raises(NotImplementedError, match="qwen3's, not one of 'qwen3.5'"):
        make_renderer(with_template("qwen3"), configs.Qwen35RendererConfig())
    unknown = copy.copy(family("qwen3").load_tokenizer())
    unknown.chat_template = "{{ messages[0].content }}"
    with pytest.raises(NotImplementedError, match="no generated renderer was compiled from this chat template"):
        make_renderer(unknown, configs.Qwen3RendererConfig())


def test_default_is_whatever_the_template_compiles_to_with_its_template_kwargs():
    config = configs.DefaultRendererConfig(enable_thinking=False)
    renderer = make_renderer(with_template("qwen3"), config)
    assert (type(renderer).__name__, renderer.knob_values) == ("Qwen3Renderer", {"enable_thinking": False})
    with pytest.raises(NotImplementedError, match="no_such_kwarg"):
        make_renderer(with_template("qwen3"), configs.DefaultRendererConfig(no_such_kwarg=1))

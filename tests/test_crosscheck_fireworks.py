"""Corpus templates against the Fireworks renderers of the same families: where they agree.

Each test renders the same generated conversations with the corpus template (transformers) and
with the Fireworks renderer (fed as ../shared/corpus/golden/README.md says), and pins the class
of conversations on which the two agree exactly, with how many there were, and that outside it
they do differ (so a change on either side shows up here). Why they differ is in the report of
issue 8 and in each test's docstring.
"""

from __future__ import annotations

import os

import pytest

from tests.families import REPO, corpus_path

ORACLES = os.environ.get("RLLM_ORACLES", str(REPO.parent / "shared" / "oracles"))
CASES = int(os.environ.get("CROSSCHECK_CASES", "120"))


def compare(template_file: str, renderer: str, tokenizer, knobs=()):
    pytest.importorskip("tinker_cookbook", reason="the Fireworks renderers need tinker-cookbook (the tinker extra)")
    if not os.path.isdir(os.path.join(ORACLES, "fireworks-cookbook")):
        pytest.skip(f"Fireworks oracle not found under {ORACLES} (set RLLM_ORACLES)")
    from compiler.oracles.crosscheck import cross_check
    from compiler.oracles.fireworks import FireworksOracle

    source = corpus_path("templates", template_file).read_text(encoding="utf-8")
    return cross_check(source, template_file, FireworksOracle(renderer, tokenizer), tokenizer, cases=CASES, seed_value=3, knobs=knobs)


def synthetic(name: str):
    from rllm_renderers.encoding.loading import load_tokenizer

    return load_tokenizer(corpus_path("tokenizers", "synthetic", name))


def agreement(result, predicate):
    inside = [outcome for case, outcome in result.outcomes if predicate(case)]
    outside = [outcome for case, outcome in result.outcomes if not predicate(case)]
    return inside, outside


def no_tools(case) -> bool:
    return not case.tools and not any(m.get("tool_calls") or m["role"] == "tool" for m in case.messages)


def reasoning_after_the_last_user(case) -> bool:
    roles = [m["role"] for m in case.messages]
    last_user = max((i for i, role in enumerate(roles) if role == "user"), default=-1)
    return any(m.get("reasoning_content") is not None for m in case.messages[last_user + 1 :])


def test_gemma4_template_and_renderer_agree_without_tool_calls_or_a_reasoned_last_turn():
    """Two classes part them. After tool results the template closes the model turn and writes
    the next assistant message's text outside any turn (`<turn|>` twice, its reasoning dropped);
    the renderer keeps one model turn (as the golden README documents): the template deviates,
    its output after a tool round is not a well-formed turn. And the reasoning of an assistant
    turn after the last user message: the renderer writes it as a thought channel, the template
    drops it; that is the renderer's choice for training on the reasoning, not a template bug."""
    result = compare("google__gemma-4-31B-it.jinja", "gemma4", synthetic("gemma4"), knobs=(("enable_thinking", (True, False)),))
    inside, outside = agreement(
        result,
        lambda case: not any(m.get("tool_calls") or m["role"] == "tool" for m in case.messages)
        and not reasoning_after_the_last_user(case),
    )
    assert len(inside) >= CASES // 10 and set(inside) == {"identical"}, result.table()
    assert "different" in outside


def prompts_after_a_user_turn(case) -> bool:
    return case.add_generation_prompt and case.messages[-1]["role"] == "user" and no_tools(case)


def test_glm47_template_and_glm5_renderer_agree_on_prompts_after_a_user_turn_without_tools():
    """An assistant turn after the last user message without reasoning is `</think>text` in the
    GLM-4.7 template and `<think></think>text` in glm5 (GLM-5's own rule); closed conversations also
    differ by the stop sentinel build_supervised_example appends (`<|user|>` / `<|observation|>`, a
    training artifact of the renderer); declared tools differ because the renderer is given the bare
    function specs (the cookbook's tools path) where the template prints the whole OpenAI tool."""
    result = compare("zai-org__GLM-4.7-Flash.jinja", "glm5", synthetic("glm5"))
    inside, outside = agreement(result, prompts_after_a_user_turn)
    assert len(inside) >= 2 and set(inside) == {"identical"}, result.table()
    assert "different" in outside


def test_glm46_template_is_not_the_glm5_protocol():
    """GLM-4.6 writes a newline after every role tag and `\\n<think></think>` for history turns;
    GLM-5 does neither: a protocol change between model versions, no one's bug."""
    result = compare("zai-org__GLM-4.6.jinja", "glm5", synthetic("glm5"))
    assert [outcome for _, outcome in result.outcomes].count("identical") == 0, result.table()


def test_kimi_k2_thinking_template_and_kimi_k26_renderer_agree_on_conversations_without_reasoning_or_tools():
    """Without a generation prompt. Differences: the generation prompt (kimi_k26 prefills `<think>`,
    the K2-Thinking template lets the model open it), tool declarations (the template prints the
    OpenAI tools as JSON, kimi_k26 a TypeScript namespace with this tokenizer) and reasoning (the
    K2-Thinking template keeps it only after the last assistant answer, i.e. inside an unfinished
    tool loop; kimi_k26 keeps it for every turn after the last user message): K2.6 is a later
    protocol, not a bug of either."""
    result = compare("moonshotai__Kimi-K2-Thinking.jinja", "kimi_k26", synthetic("kimi_k27_code"))
    inside, outside = agreement(
        result,
        lambda case: not case.add_generation_prompt
        and no_tools(case)
        and not any(m.get("reasoning_content") is not None for m in case.messages),
    )
    assert len(inside) >= 2 and set(inside) == {"identical"}, result.table()
    assert "different" in outside
    prompts = [outcome for case, outcome in result.outcomes if case.add_generation_prompt]
    assert prompts and "identical" not in prompts  # the `<think>` prefill


def test_minimax_m2_template_and_renderer_agree_on_tool_rounds_with_their_own_system_prompt():
    """The renderer's default system prompt is "You are MiniMax-M2, a helpful AI assistant built by
    MiniMax. Knowledge cutoff: 2025-06." where the template's is "You are a helpful assistant.", and
    minimax_m2 has no tool declarations (the cookbook drops `tools` for it): both are the renderer's
    deviations from the template."""
    result = compare("MiniMaxAI__MiniMax-M2.jinja", "minimax_m2", minimax_m2_tokenizer())
    identical = [case for case, outcome in result.outcomes if outcome == "identical"]
    assert identical and all(not case.tools and case.messages[0]["role"] == "system" and case.messages[0]["content"] for case in identical)
    assert "different" in [outcome for _, outcome in result.outcomes]


def minimax_m2_tokenizer():
    pytest.importorskip("tokenizers")
    from compiler.oracles.crosscheck import synthetic_tokenizer

    specials = ["]~!b[", "]~b]", "[e~[", "<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>"]
    return synthetic_tokenizer(specials, bos="]~!b[", eos="[e~[")

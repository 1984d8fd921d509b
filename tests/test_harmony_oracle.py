"""gpt-oss: the HF chat template against OpenAI's harmony encoder (``--oracle harmony``).

openai-harmony renders offline here: its o200k vocabulary is derived from the corpus's exact
gpt-oss tokenizer. The tests pin where the template and harmony agree, and each class of
difference with a minimal conversation; whose bug each one is, is said in its ``why``
(OpenAI's harmony guide, openai-cookbook ``articles/openai-harmony.md``, is the spec).
"""

from __future__ import annotations

import json

import pytest

from compiler.oracle import OracleRejected, TemplateOracle
from tests.families import FAMILIES, corpus_path

FAMILY = next(f for f in FAMILIES if f.module == "gpt_oss")
CASES = 150


@pytest.fixture(scope="module")
def oracles():
    pytest.importorskip("openai_harmony", reason="the harmony oracle needs openai-harmony (the harmony extra)")
    from compiler.oracles import load_oracle

    tokenizer = FAMILY.load_tokenizer()
    template = TemplateOracle(FAMILY.template_source(), tokenizer=tokenizer)
    return template, load_oracle("harmony", tokenizer), tokenizer


def call(name="get_weather", arguments=None, call_id="c1"):
    arguments = {"city": "Paris"} if arguments is None else arguments
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather now.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City"}}, "required": ["city"]},
        },
    }
]
USER = {"role": "user", "content": "Weather in Paris?"}

# (name, messages, tools, add_generation_prompt, in the template's text, in harmony's text, whose bug and why)
DIFFERENCES = [
    (
        "tool result JSON-quoted",
        [USER, {"role": "assistant", "content": "", "tool_calls": [call()]}, {"role": "tool", "tool_call_id": "c1", "content": "sunny\nwarm"}],
        TOOLS,
        True,
        'commentary<|message|>"sunny\\nwarm"<|end|>',
        "commentary<|message|>sunny\nwarm<|end|>",
        "template: `message.content|tojson` quotes and escapes the tool output; harmony (and the guide) pass it raw",
    ),
    (
        "tool-call content type",
        [USER, {"role": "assistant", "content": "", "tool_calls": [call()]}],
        TOOLS,
        False,
        "<|channel|>commentary json<|message|>",
        "<|channel|>commentary <|constrain|>json<|message|>",
        "template: the model writes (and the guide shows) ` <|constrain|>json`; the template writes ` json`",
    ),
    (
        "instructions without tools",
        [{"role": "system", "content": "Be brief."}, USER],
        None,
        True,
        "# Instructions\n\nBe brief.\n\n<|end|>",
        "# Instructions\n\nBe brief.<|end|>",
        "template: it always ends the instructions with a blank line; harmony only before `# Tools`",
    ),
    (
        "parallel tool calls",
        [USER, {"role": "assistant", "content": "", "tool_calls": [call(), call("get_weather", {"city": "Rome"}, "c2")]}],
        TOOLS,
        False,
        None,
        '<|message|>{"city": "Rome"}<|call|>',
        "template: it renders only tool_calls[0] of a message (its comment: 'We assume max 1 tool call')",
    ),
    (
        "reasoning of the answer in a closed conversation",
        [USER, {"role": "assistant", "content": "Sunny.", "reasoning_content": "Look it up."}],
        None,
        False,
        "<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant<|channel|>final<|message|>Sunny.<|return|>",
        "Weather in Paris?<|end|><|start|>assistant<|channel|>final<|message|>Sunny.<|return|>",
        "not the template's: harmony's render_conversation_for_training drops (auto_drop_analysis, its default) "
        "every analysis message before the first final one, even the trained answer's own; the template keeps it",
    ),
    (
        "tool declaration without a description or parameters",
        [USER],
        [{"type": "function", "function": {"name": "ping", "description": "", "parameters": {"type": "object", "properties": {}}}}],
        True,
        "// \ntype ping = () => any;",
        "type ping = (_: {\n}) => any;",
        "template: harmony writes no empty description comment and `(_: {})` for an object schema without properties",
    ),
]


@pytest.mark.parametrize("case", DIFFERENCES, ids=[case[0] for case in DIFFERENCES])
def test_each_class_of_difference_is_where_it_is_documented(oracles, case):
    template, harmony, _ = oracles
    _, messages, tools, prompt, in_template, in_harmony, why = case
    expected = template.render_text(messages, tools=tools, add_generation_prompt=prompt)
    actual = harmony.render_text(messages, tools=tools, add_generation_prompt=prompt)
    if in_template is not None:
        assert in_template in expected
    assert in_harmony in actual
    if why is not None:
        assert expected != actual


def test_content_beside_reasoning_and_tool_calls_is_refused_by_the_template_only(oracles):
    template, harmony, _ = oracles
    messages = [USER, {"role": "assistant", "content": "Checking.", "reasoning_content": "Need data.", "tool_calls": [call()]}]
    with pytest.raises(OracleRejected, match="Cannot pass both content and thinking"):
        template.render_text(messages, tools=TOOLS)
    # harmony: the text is a commentary preamble, as the guide describes
    assert "<|channel|>commentary<|message|>Checking.<|end|>" in harmony.render_text(messages, tools=TOOLS)


def test_template_and_harmony_agree_on_chats_without_system_tools_or_reasoning(oracles):
    template, harmony, tokenizer = oracles
    from compiler.oracles.crosscheck import cross_check

    result = cross_check(
        FAMILY.template_source(), FAMILY.template_file, harmony, tokenizer, cases=CASES, seed_value=3,
        knobs=(("reasoning_effort", ("low", "medium", "high")),),
    )

    def plain(case):
        messages = case.messages
        return (
            not case.tools
            and messages[0]["role"] != "system"
            and not any(m.get("tool_calls") or m["role"] == "tool" or m.get("reasoning_content") is not None for m in messages)
        )

    inside = [outcome for case, outcome in result.outcomes if plain(case)]
    assert len(inside) >= 5 and set(inside) == {"identical"}, result.table()
    tool_rounds = [outcome for case, outcome in result.outcomes if any(m["role"] == "tool" for m in case.messages)]
    assert tool_rounds and "identical" not in tool_rounds  # the quoted tool results at least


def test_harmony_ids_are_the_tokenizer_encoding_of_its_text(oracles):
    _, harmony, tokenizer = oracles
    messages = [{"role": "system", "content": "Be brief."}, USER]
    ids = harmony.render_ids(messages, tools=TOOLS, add_generation_prompt=True)
    assert tokenizer.decode(ids) == harmony.render_text(messages, tools=TOOLS, add_generation_prompt=True)
    assert ids == tokenizer.encode(harmony.render_text(messages, tools=TOOLS, add_generation_prompt=True), add_special_tokens=False)


HARMONY_FAMILY = next(f for f in FAMILIES if f.module == "gpt_oss_harmony")


def test_the_harmony_override_renders_what_harmony_renders(oracles):
    """Our gpt-oss-harmony template against openai-harmony: the same text on every generated
    conversation; the same token ids except where harmony encodes a special-token string as plain
    text (in message text, or text ending in `>` just before one of its markers) while the HF
    tokenizer encodes the whole text and so splits the special token out."""
    from compiler.analysis import compared_roles, knob_candidates, parse_template
    from compiler.verify import verify

    _, harmony, tokenizer = oracles
    source = HARMONY_FAMILY.template_source()
    ast = parse_template(source, HARMONY_FAMILY.template_file)
    report = verify(
        HARMONY_FAMILY.renderer_class,
        harmony,
        tokenizer=tokenizer,
        cases=CASES,
        seed_value=11,
        knob_candidates=knob_candidates(ast, HARMONY_FAMILY.renderer_class.KNOBS),
        template_roles=compared_roles(ast),
        keep_going=True,
    )
    assert report.text_checked >= CASES
    text_failures = [f for f in report.disagreements if not f.reason.startswith("token ids")]
    assert text_failures == [], text_failures[0].report()
    special_ids = set(tokenizer.all_special_ids) | {tokenizer.convert_tokens_to_ids(t) for t in tokenizer.get_added_vocab()}
    renderer_classes = {}
    for failure in report.disagreements:
        case = failure.case
        renderer = renderer_classes.setdefault(
            json.dumps(case.knobs, sort_keys=True), HARMONY_FAMILY.renderer_class(tokenizer, **case.knobs)
        )
        messages = renderer.normalize_messages(case.messages)
        arguments = dict(tools=case.tools, add_generation_prompt=case.add_generation_prompt)
        expected = harmony.render_ids(messages, knobs=case.knobs, **arguments)
        actual = renderer.render_ids(messages, **arguments)
        first = next(i for i, (a, b) in enumerate(zip(expected, actual)) if a != b)
        # the renderer has a special token where harmony spelled the same string as text (BPE may
        # already split one token earlier)
        assert any(token in special_ids for token in actual[first : first + 2]), failure.report()
        assert expected[first] not in special_ids, failure.report()
    assert report.tokens_matched >= CASES // 4


def test_resolve_follows_harmony_by_default_and_gives_the_template_renderer_by_name():
    """vLLM and SGLang render gpt-oss prompts with harmony, so the model samples harmony: resolve()
    picks the harmony renderer for the gpt-oss tokenizer (and for the model id alone); the
    renderer exact to the HF template is still there by name."""
    import copy

    from rllm_renderers import resolve

    tokenizer = copy.copy(FAMILY.load_tokenizer())
    tokenizer.chat_template = FAMILY.template_source()  # matched by the HF template's sha256
    for default in (resolve("any/gpt-oss-finetune", tokenizer), resolve("openai/gpt-oss-20b", None)):
        assert (default.source, default.name, type(default.renderer).__name__) == (
            "generated",
            "gpt_oss_harmony",
            "GptOssHarmonyRenderer",
        )
    template = resolve("openai/gpt-oss-20b", tokenizer, renderer="gpt_oss")
    assert (template.source, type(template.renderer).__name__) == ("generated", "GptOssRenderer")


def test_the_harmony_renderer_takes_harmonys_conversation_start_date(oracles):
    """harmony's SystemContent.with_conversation_start_date, as a knob (default: today)."""
    _, harmony, tokenizer = oracles
    messages = [{"role": "system", "content": "Be brief."}, USER]
    renderer = HARMONY_FAMILY.renderer_class(tokenizer, conversation_start_date="2025-01-15")
    text = renderer.render_text(messages, tools=TOOLS, add_generation_prompt=True)
    assert "\nCurrent date: 2025-01-15\n" in text
    knobs = {"conversation_start_date": "2025-01-15"}
    assert text == harmony.render_text(messages, tools=TOOLS, add_generation_prompt=True, knobs=knobs)
    assert renderer.render_ids(messages, tools=TOOLS, add_generation_prompt=True) == harmony.render_ids(
        messages, tools=TOOLS, add_generation_prompt=True, knobs=knobs
    )
    with pytest.raises(Exception, match="conversation_start_date must be a string"):
        HARMONY_FAMILY.renderer_class(tokenizer, conversation_start_date=20250115).render_text(messages)

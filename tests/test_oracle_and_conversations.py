"""Tests for compiler.oracle (the transformers reference) and compiler.conversations (the case strategy)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import jinja2
import pytest
import transformers
from hypothesis import HealthCheck, find, given, settings

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # let `pytest tests/...` import the compiler package without installing it
    sys.path.insert(0, str(REPO))

from compiler.conversations import (  # noqa: E402
    TRICKY_FRAGMENTS,
    Case,
    ConversationFeatures,
    conversation_cases,
    fixed_edge_cases,
)
from compiler.oracle import ORACLE_VERSION, OracleRejected, TemplateOracle  # noqa: E402

CORPUS = Path(os.environ.get("RLLM_CORPUS", REPO.parent / "shared" / "corpus"))
QWEN3_FEATURES = ConversationFeatures(knobs=(("enable_thinking", (True, False)),), max_messages=8)
GEMMA_ALTERNATE = "Conversation roles must alternate user/assistant/user/assistant/..."


def _corpus_path(*parts: str) -> Path:
    path = CORPUS.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"test corpus not found: {path} (set RLLM_CORPUS to the corpus folder)")
    return path


def _template(file_name: str) -> str:
    return _corpus_path("templates", file_name).read_text(encoding="utf-8")


def _tokenizer(name: str):
    return transformers.AutoTokenizer.from_pretrained(str(_corpus_path("tokenizers", name)))


@pytest.fixture(scope="module")
def qwen3():
    """(template source, tokenizer, tokenizer oracle, text-only oracle) for Qwen3-8B."""
    source = _template("Qwen__Qwen3-8B.jinja")
    tokenizer = _tokenizer("qwen3")
    return (
        source,
        tokenizer,
        TemplateOracle(source, tokenizer=tokenizer),
        TemplateOracle(source, special_tokens=dict(tokenizer.special_tokens_map)),
    )


def _outcome(render, *args, **kwargs):
    """("ok", result) or ("rejected", message); raw exceptions and OracleRejected compare alike."""
    try:
        return ("ok", render(*args, **kwargs))
    except OracleRejected as exc:
        return ("rejected", exc.message)
    except Exception as exc:  # what apply_chat_template raises directly
        return ("rejected", str(exc))


def _check_against_apply_chat_template(qwen3, case: Case) -> None:
    source, tokenizer, oracle, text_only = qwen3
    call = dict(tools=case.tools, add_generation_prompt=case.add_generation_prompt)
    direct = dict(call, chat_template=source, **case.knobs)
    want_text = _outcome(tokenizer.apply_chat_template, case.messages, tokenize=False, **direct)
    want_ids = _outcome(tokenizer.apply_chat_template, case.messages, tokenize=True, return_dict=False, **direct)

    assert _outcome(oracle.render_text, case.messages, knobs=case.knobs, **call) == want_text, case.describe()
    assert _outcome(text_only.render_text, case.messages, knobs=case.knobs, **call) == want_text, case.describe()
    assert _outcome(oracle.render_ids, case.messages, knobs=case.knobs, **call) == want_ids, case.describe()
    if want_ids[0] == "ok":
        assert isinstance(want_ids[1], list) and all(isinstance(i, int) for i in want_ids[1])


# ---------------------------------------------------------------- oracle


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=conversation_cases(QWEN3_FEATURES))
def test_qwen3_oracle_matches_apply_chat_template(qwen3, case):
    _check_against_apply_chat_template(qwen3, case)


def test_qwen3_oracle_on_fixed_edge_cases(qwen3):
    cases = fixed_edge_cases(QWEN3_FEATURES) + fixed_edge_cases(
        ConversationFeatures(arguments_form="string", knobs=QWEN3_FEATURES.knobs)
    )
    for case in cases:
        _check_against_apply_chat_template(qwen3, case)
    # Tool cases really render (they are not just rejected on both sides)...
    _, _, oracle, _ = qwen3
    none_content, two_calls = [case for case in cases if case.tools][:2]
    assert '<tool_call>\n{"name": "get_time"' in oracle.render_text(two_calls.messages, tools=two_calls.tools)
    # ...except one: transformers drops `content: None`, and Qwen3's `'</think>' in message.content` then fails.
    with pytest.raises(OracleRejected, match="'dict object' has no attribute 'content'"):
        oracle.render_text(none_content.messages, tools=none_content.tools)


def test_gemma3_rejection_carries_the_template_message():
    source = _template("google__gemma-3-27b-it.jinja")
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    for oracle in (
        TemplateOracle(source, special_tokens={"bos_token": "<bos>"}),
        TemplateOracle(source, tokenizer=_tokenizer("gemma3")),
    ):
        with pytest.raises(OracleRejected) as info:
            oracle.render_text(messages)
        assert info.value.message == str(info.value) == GEMMA_ALTERNATE
        assert info.value.exc_type_name == "TemplateError"
        assert isinstance(info.value.__cause__, jinja2.TemplateError)
    assert oracle.render_text(messages[:1], add_generation_prompt=True) == (
        "<bos><start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\n"
    )


def test_other_template_errors_are_rejections_too():
    undefined = TemplateOracle("{{ nothing.attr }}")
    with pytest.raises(OracleRejected) as info:
        undefined.render_text([{"role": "user", "content": "x"}])
    assert info.value.exc_type_name == "UndefinedError"
    assert info.value.message == "'nothing' is undefined"

    bad_add = TemplateOracle("{{ 1 + messages[0].content }}")
    with pytest.raises(OracleRejected) as info:
        bad_add.render_text([{"role": "user", "content": "x"}])
    assert info.value.exc_type_name == "TypeError"


def test_empty_conversation_is_rejected_alike(qwen3):
    _, _, oracle, text_only = qwen3
    messages = []
    with pytest.raises(OracleRejected) as with_tokenizer:
        oracle.render_text(messages)
    with pytest.raises(OracleRejected) as without:
        text_only.render_text(messages)
    assert with_tokenizer.value.message == without.value.message
    assert with_tokenizer.value.exc_type_name == without.value.exc_type_name == "ValueError"


def test_preprocessing_quirks_in_text_only_mode():
    # Top-level None values are dropped from each message, nested ones are kept.
    keys = TemplateOracle("{{ 'content' in messages[0] }} {{ messages[0].x.y is none }}")
    assert keys.render_text([{"role": "assistant", "content": None, "x": {"y": None}}]) == "False True"
    # Reasoning is aliased: the first non-None of reasoning_content/thinking/reasoning fills both
    # reasoning_content and thinking (gpt-oss templates read `thinking`).
    alias = TemplateOracle("{{ messages[0].reasoning_content }}|{{ messages[0].thinking }}")
    assert alias.render_text([{"role": "assistant", "content": "", "reasoning": "r"}]) == "r|r"
    assert alias.render_text([{"role": "assistant", "content": "", "reasoning_content": ""}]) == "|"
    # Knobs override special tokens of the same name; unset knobs are simply undefined.
    bos = TemplateOracle("{{ bos_token }}{{ enable_thinking is defined }}", special_tokens={"bos_token": "<s>"})
    assert bos.render_text([{"role": "user", "content": ""}]) == "<s>False"
    assert bos.render_text([{"role": "user", "content": ""}], knobs={"bos_token": "X"}) == "XFalse"
    # tojson keeps non-ASCII text as is (transformers overrides Jinja's HTML-escaping filter).
    tojson = TemplateOracle("{{ messages[0].content | tojson }}")
    assert tojson.render_text([{"role": "user", "content": "<é>"}]) == '"<é>"'


def test_special_tokens_come_from_the_tokenizer_and_can_be_overridden(qwen3):
    _, tokenizer, _, _ = qwen3
    messages = [{"role": "user", "content": ""}]
    assert TemplateOracle("{{ eos_token }}", tokenizer=tokenizer).render_text(messages) == "<|im_end|>"
    override = TemplateOracle("{{ eos_token }}", tokenizer=tokenizer, special_tokens={"eos_token": "E"})
    assert override.special_tokens["eos_token"] == "E"
    assert override.render_text(messages) == "E"


def test_misuse_is_reported_not_rejected(qwen3):
    _, _, oracle, text_only = qwen3
    with pytest.raises(jinja2.TemplateSyntaxError):
        TemplateOracle("{% if %}")
    with pytest.raises(ValueError, match="needs a tokenizer"):
        text_only.render_ids([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="apply_chat_template parameters"):
        oracle.render_text([{"role": "user", "content": "x"}], knobs={"tokenize": True})
    assert ORACLE_VERSION == transformers.__version__


# ---------------------------------------------------------------- conversations


def _flags(case: Case) -> set[str]:
    """The features a case exercises (see test_strategy_covers_its_features)."""
    flags = set()
    roles = [m["role"] for m in case.messages]
    strings = []

    def walk(value):
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(key)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(case.messages)
    walk(case.tools)
    for i, message in enumerate(case.messages):
        calls = message.get("tool_calls") or []
        if calls:
            flags.add("tool_calls")
            if len(calls) > 1:
                flags.add("several_tool_calls")
            if message.get("content", None) is None:
                flags.add("assistant_content_none_or_missing")
            for call in calls:
                arguments = call["function"]["arguments"]
                flags.add(f"arguments_{type(arguments).__name__}")
                if isinstance(arguments, dict) and any(isinstance(v, (dict, list)) for v in arguments.values()):
                    flags.add("nested_arguments")
        if message.get("reasoning_content") is not None:
            flags.add("reasoning")
        if message.get("content") == "":
            flags.add("empty_content")
        if message["role"] == "tool" and "name" in message:
            flags.add("tool_name_on_result")
        if i and message["role"] == "tool" and roles[i - 1] == "tool":
            flags.add("consecutive_tool_results")
        if i and message["role"] == roles[i - 1] == "user":
            flags.add("consecutive_users")
        if i and message["role"] == "system":
            flags.add("system_in_middle")
    if roles[0] == "assistant":
        flags.add("assistant_first")
    flags.add(f"ends_on_{roles[-1]}")
    if any(fragment in s for s in strings for fragment in ("<think>", "<tool_call>", "{{", "{%", "<|im_end|>")):
        flags.add("markup_text")
    if any(s.strip() == "" and s for s in strings):
        flags.add("whitespace_only")
    if any(any(ord(c) > 0x2E80 for c in s) for s in strings):
        flags.add("cjk_or_emoji")
    if case.tools:
        flags.add("tools")
    if case.knobs:
        flags.add("knob_set")
    if case.add_generation_prompt:
        flags.add("generation_prompt")
    if len(case.messages) >= 8:
        flags.add("long")
    return flags


def test_strategy_covers_its_features():
    seen: set[str] = set()
    for form in ("dict", "string"):
        features = ConversationFeatures(knobs=(("enable_thinking", (True, False)),), arguments_form=form)

        @settings(max_examples=200, database=None, deadline=None)
        @given(case=conversation_cases(features))
        def collect(case):
            assert 1 <= len(case.messages) <= features.max_messages
            json.loads(case.describe())
            seen.update(_flags(case))

        collect()
    # Rare ones (odd structures are ~10% of cases, split five ways) may need a targeted search.
    for flag in sorted({"consecutive_users", "system_in_middle", "assistant_first"} - seen):
        patient = settings(database=None, max_examples=3000)
        find(conversation_cases(), lambda c, f=flag: f in _flags(c), settings=patient)
        seen.add(flag)  # find raises NoSuchExample otherwise
    expected = {
        "tool_calls", "several_tool_calls", "assistant_content_none_or_missing", "arguments_dict", "arguments_str",
        "nested_arguments", "reasoning", "empty_content", "tool_name_on_result", "consecutive_tool_results",
        "consecutive_users", "system_in_middle", "assistant_first", "ends_on_user", "ends_on_tool",
        "ends_on_assistant", "markup_text", "whitespace_only", "cjk_or_emoji", "tools", "knob_set",
        "generation_prompt", "long",
    }  # fmt: skip
    assert expected <= seen, f"never drawn: {sorted(expected - seen)}"


NARROW = ConversationFeatures(
    roles=("user", "assistant"), tool_calls=False, reasoning=False, tools=False, max_messages=3
)


@settings(max_examples=100, database=None, deadline=None)
@given(case=conversation_cases(NARROW))
def test_strategy_respects_disabled_features(case):
    assert 1 <= len(case.messages) <= 3
    assert case.tools is None and case.knobs == {}
    for message in case.messages:
        assert message["role"] in ("user", "assistant")
        assert "tool_calls" not in message and "reasoning_content" not in message


def test_shrinking_gives_small_readable_cases():
    quick = settings(database=None, max_examples=2000)
    # Narrower features keep the search short; the point is what shrinking makes of a tool round trip.
    features = ConversationFeatures(reasoning=False, tools=False, max_messages=6, knobs=(("k", (1, 2)),))
    smallest = find(conversation_cases(features), lambda c: "consecutive_tool_results" in _flags(c), settings=quick)
    assert len(smallest.messages) <= 4, smallest.describe()  # user, assistant with two calls, two results
    assert smallest.knobs == {} and not smallest.add_generation_prompt
    assert all(m.get("content") in ("", None) for m in smallest.messages), smallest.describe()
    markup = find(conversation_cases(), lambda c: "<think>" in c.messages[0].get("content", ""), settings=quick)
    assert markup.messages == [{"role": "user", "content": "<think>"}], markup.describe()


def test_fixed_edge_cases_follow_the_features():
    default = fixed_edge_cases()
    assert default[0].messages == [{"role": "user", "content": "Hello"}]
    assert any(len(m.get("tool_calls", [])) > 1 for case in default for m in case.messages)
    assert any(case.messages[-1]["role"] == "tool" for case in default)
    assert fixed_edge_cases() == default  # deterministic

    strings = fixed_edge_cases(ConversationFeatures(arguments_form="string"))
    calls = [call for case in strings for m in case.messages for call in m.get("tool_calls", [])]
    assert calls and all(isinstance(call["function"]["arguments"], str) for call in calls)

    narrow = fixed_edge_cases(ConversationFeatures(roles=("user", "assistant"), knobs=(("k", (1, 2)),)))
    assert all(m["role"] in ("user", "assistant") for case in narrow for m in case.messages)
    assert [case.knobs for case in narrow if case.knobs] == [{"k": 1}, {"k": 2}]
    assert all(TRICKY_FRAGMENTS)  # the fragment pool has no empty entries (they would not add anything)

"""Verifying against a reference that is not the template: the oracle registry, the keep-going
report that names the features of the differing conversations, and the conversation features."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.analysis import compared_roles, knob_candidates, parse_template
from compiler.case_features import case_features
from compiler.conversations import Case
from compiler.errors import CompileError
from compiler.oracle import TemplateOracle
from compiler.oracles import OracleUnavailable, load_oracle
from compiler.pipeline import compile_source, load_renderer_class
from compiler.source import resolve_source
from compiler.verify import verify

TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}
TINY = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message.role == 'system' %}<sys>{{ message.content }}"
    "{% elif message.role == 'user' %}<u>{{ message.content }}{{ eos_token }}"
    "{% elif message.role == 'assistant' %}<a>{{ message.content }}{{ eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
)


def compiled_class(tmp_path: Path, source: str) -> type:
    template = tmp_path / "tiny.jinja"
    template.write_text(source, encoding="utf-8")
    compiled = compile_source(resolve_source("test/tiny", template=template, allow_hub=False), special_tokens=TOKENS)
    return load_renderer_class(compiled.code, compiled.spec.module, compiled.spec.class_name)


def test_keep_going_checks_every_case_and_names_the_feature_that_differs(tmp_path):
    renderer_class = compiled_class(tmp_path, TINY)
    # a reference that writes system messages differently, and agrees on everything else
    reference = TemplateOracle(TINY.replace("<sys>", "<system>"), special_tokens=TOKENS)
    ast = parse_template(TINY, "tiny.jinja")
    arguments = dict(
        cases=60, seed_value=3, knob_candidates=knob_candidates(ast, ()), template_roles=compared_roles(ast)
    )
    report = verify(renderer_class, reference, keep_going=True, **arguments)
    assert not report.ok
    assert report.disagreements and report.text_matched > 0  # it went on after the first difference
    assert report.text_checked == report.text_matched + len(report.disagreements)
    assert all("role system" in case_features(failure.case) for failure in report.disagreements)
    table = report.disagreement_report().splitlines()
    assert table[0].startswith(f"differing cases: {len(report.disagreements)}/{report.text_checked}")
    assert table[1].startswith("  role system: in ")  # the most telling feature first
    assert "smallest failing conversation:" in table
    # without keep_going the first difference stops the run, shrunk
    stopped = verify(renderer_class, reference, **arguments)
    assert not stopped.ok and not stopped.disagreements and stopped.text_checked < report.text_checked


def test_case_features_name_roles_tool_shapes_order_and_knobs():
    call = lambda call_id: {
        "id": call_id,
        "type": "function",
        "function": {"name": "f", "arguments": '{"k": 1}'},
    }  # noqa: E731
    messages = [
        {"role": "developer", "content": "x"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "b", "content": ""},
        {"role": "tool", "tool_call_id": "a", "content": ""},
    ]
    features = case_features(Case(messages, knobs={"thinking_mode": "chat"}))
    assert {
        "role developer",
        "parallel tool calls",
        "tool results out of call order",
        "assistant content None",
        "tool-call argument of type int",
        'knob thinking_mode="chat"',
        "ends with tool",
    } <= features
    in_order = case_features(Case(messages[:3] + messages[4:] + messages[3:4]))
    assert "tool results out of call order" not in in_order
    unanswered = case_features(Case(messages[:4] + [{"role": "tool", "tool_call_id": "zz", "content": ""}]))
    assert "tool result answering no call" in unanswered


def test_knob_candidates_include_the_items_a_template_tests_membership_in():
    ast = parse_template("{% if mode not in ['fast', 'slow'] %}{{ raise_exception('bad') }}{% endif %}{{ mode }}", "t")
    assert knob_candidates(ast, ("mode",))["mode"][:2] == ("fast", "slow")


def test_unknown_oracle_names_and_missing_oracle_code_are_clear_errors(monkeypatch, tmp_path):
    with pytest.raises(CompileError, match="unknown oracle 'nope'; the oracles are: deepseek-encoder:v4"):
        load_oracle("nope")
    monkeypatch.setenv("RLLM_ORACLES", str(tmp_path))
    with pytest.raises(OracleUnavailable, match=f"oracle code not found at {tmp_path}"):
        load_oracle("deepseek-encoder:v4")

"""``compiler diff`` on real revisions: the corpus's revision pairs and hand edits of a real template.

Each case asserts the summary lines a reviewer must see (the cause, stated first), the exit code the
report announces, that no limit of the tool is reported as a change, and that the report stays
under 100 lines. The hand edits are made from the corpus's Qwen3-8B template by the substitutions
in :data:`HAND_EDITS` (nothing of the corpus is copied here); Qwen3-8B is compiled once for all of
them. The comparisons draw few fuzz cases (:data:`FUZZ_CASES`): the probes carry the assertions.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from compiler.behaviour_diff import compare, load_side
from compiler.cli import main
from compiler.diff_report import report
from tests.families import CORPUS

TEMPLATES = CORPUS / "templates"
QWEN3 = "Qwen__Qwen3-8B.jinja"
FUZZ_CASES = 10
MAX_LINES = 100

pytestmark = pytest.mark.skipif(not TEMPLATES.is_dir(), reason=f"test corpus not found: {TEMPLATES}")


@functools.lru_cache(maxsize=None)
def corpus_side(name: str):
    return load_side(str(TEMPLATES / name), model=None, corpus=CORPUS, tokenizer=None)


def edited_side(tmp_path: Path, source: str):
    folder = tmp_path / "edited"
    folder.mkdir()
    (folder / QWEN3).write_text(source, encoding="utf-8")  # the same name: the same model and tokenizer
    return load_side(str(folder / QWEN3), model=None, corpus=CORPUS, tokenizer=None)


def summary_of(printed: str) -> list[str]:
    if "\nSummary\n" not in printed:
        return []
    return [line[2:] for line in printed.split("\nSummary\n")[1].split("\n\n")[0].splitlines() if line.startswith("- ")]


def checked_report(old, new) -> tuple[list[str], str]:
    diff = compare(old, new, cases=FUZZ_CASES)
    printed = report(diff, markdown=False)
    lines = printed.splitlines()
    assert len(lines) < MAX_LINES, printed
    assert ("(exit 1)" in lines[2]) == diff.changed, lines[2]  # the verdict, right under the title
    summary = summary_of(printed)
    assert not [line for line in summary if "not checked" in line or "refused" in line], summary
    if diff.changed:  # the cause leads: the summary is the first section
        assert lines[4] == "Summary", printed
    return summary, printed


def has(summary: list[str], pattern: str) -> bool:
    return any(re.search(pattern, line) for line in summary)


# --- revisions in the corpus ---------------------------------------------------------------

PAIRS = {
    "qwen3-to-qwen3.5": (
        QWEN3,
        "Qwen__Qwen3.5-4B.jinja",
        [
            r"^! the generation prompt now ends with `<think>\\n`",
            r"^! tool-call syntax \(TOOL_CALLS\): style 'json' -> 'xml'",
            r"^! knobs \(KNOBS\): knob added: add_vision_id",
        ],
    ),
    "llama-3.1-to-3.2": (
        "meta-llama__Llama-3.1-8B-Instruct.jinja",
        "meta-llama__Llama-3.2-3B-Instruct.jinja",
        [r"^! the date now defaults to today \(strftime_now\)", r"stop tokens removed: '<\|eom_id\|>'", r"knob removed: builtin_tools"],
    ),
    "deepseek-v3-to-v3.1": (
        "deepseek-ai__DeepSeek-V3.jinja",
        "deepseek-ai__DeepSeek-V3.1.jinja",
        [r"^! the generation prompt now ends with `</think>`", r"^! knobs \(KNOBS\): knob added: thinking"],
    ),
    "glm-4.6-to-4.7-flash": (
        "zai-org__GLM-4.6.jinja",
        "zai-org__GLM-4.7-Flash.jinja",
        [r"^! the generation prompt now ends with `<think>`", r"^tool results: "],
    ),
    "laguna-xs.2-to-xs-2.1": (
        "poolside__Laguna-XS.2.jinja",
        "poolside__Laguna-XS-2.1.jinja",
        [r"^the default system prompt \(no system message given\) is gone: `<system>\\n\\nYou are a helpful"],
    ),
}


@pytest.mark.parametrize("pair", list(PAIRS))
def test_a_corpus_revision_is_summarised_by_its_cause(pair: str):
    old, new, expected = PAIRS[pair]
    summary, printed = checked_report(corpus_side(old), corpus_side(new))
    assert "behaviour changed" in printed
    for pattern in expected:
        assert has(summary, pattern), (pattern, summary)
    if pair == "laguna-xs.2-to-xs-2.1":  # the only change: the summary says nothing else
        assert len(summary) == 1, summary


# --- hand edits of Qwen3-8B ---------------------------------------------------------------

TOOL_CALL_WRITTEN = (
    "{{- '<tool_call>\\n{\"name\": \"' }}\n                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}"
)
ARGUMENTS_WRITTEN = (
    "{%- if tool_call.arguments is string %}\n                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n                    {{- tool_call.arguments | tojson }}\n                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}"
)
KEYS_REORDERED = (
    "{{- '<tool_call>\\n{\"arguments\": ' }}\n"
    "                {%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}\n"
    "                {{- ', \"name\": \"' + tool_call.name + '\"}\\n</tool_call>' }}"
)

#: name: (substitutions made in the corpus template, summary patterns, exit code)
HAND_EDITS = {
    "end-of-turn token changed": (
        [("<|im_end|>", "<|endoftext|>")],
        [r"^! turn format \(TURN\): close '<\|im_end\|>' -> '<\|endoftext\|>'"],
        1,
    ),
    "think prefill dropped": (
        [("{{- '<think>\\n\\n</think>\\n\\n' }}", "")],
        [r"^! the generation prompt with enable_thinking=False no longer ends with `<think>\\n\\n</think>\\n\\n`"],
        1,
    ),
    "tool-result wrapper changed": (
        [("'\\n<tool_response>\\n'", "'\\n<tool_result>\\n'"), ("'\\n</tool_response>'", "'\\n</tool_result>'")],
        [r"^tool results: .*<tool_response>.* -> .*<tool_result>"],
        1,
    ),
    "tool-call JSON keys reordered": (
        [(TOOL_CALL_WRITTEN + "\n                " + ARGUMENTS_WRITTEN, KEYS_REORDERED)],
        [r"^! tool-call syntax \(TOOL_CALLS\): ", r"^assistant turns with tool calls: .*\"arguments\""],
        1,
    ),
    "comment only": ([("{%- if tools %}", "{#- reviewed: nothing changes -#}\n{%- if tools %}")], [], 0),
}


@pytest.mark.parametrize("edit", list(HAND_EDITS))
def test_a_hand_edit_is_summarised_by_its_cause(tmp_path: Path, edit: str):
    substitutions, expected, exit_code = HAND_EDITS[edit]
    source = (TEMPLATES / QWEN3).read_text(encoding="utf-8")
    for before, after in substitutions:
        assert before in source, f"{edit}: the corpus template no longer holds {before!r}"
        source = source.replace(before, after)
    summary, printed = checked_report(corpus_side(QWEN3), edited_side(tmp_path, source))
    assert f"(exit {exit_code})" in printed.splitlines()[2], printed
    for pattern in expected:
        assert has(summary, pattern), (pattern, summary)
    if exit_code == 0:
        assert summary == [] and "no behaviour change" in printed
    if edit == "think prefill dropped":  # the knob's probe renders the generation prompt
        assert "enable_thinking=False, history and generation prompt" in printed.split("\nChecked\n")[0]


def test_errors_name_the_argument_and_never_suggest_an_option_diff_lacks(tmp_path: Path, capsys):
    template = str(TEMPLATES / QWEN3)
    assert main(["diff", str(tmp_path / "missing.jinja"), template]) == 2
    assert "missing.jinja: no such file" in capsys.readouterr().err
    assert main(["diff", "no/such-model", template, "--corpus", str(CORPUS)]) == 2
    error = capsys.readouterr().err
    assert "no template for 'no/such-model'" in error and "--template" not in error


def test_python_m_compiler_diff_refuses_a_missing_file_before_importing_the_compiler():
    """(what keeps that error under a second: nothing heavy is imported for it)"""
    from tests.isolation import fresh_python

    code = (
        "import runpy, sys\n"
        "sys.argv = ['compiler', 'diff', 'nowhere/missing.jinja', 'Qwen/Qwen3-8B']\n"
        "try:\n    runpy.run_module('compiler', run_name='__main__')\n"
        "except SystemExit as exc:\n    assert exc.code == 2, exc.code\n"
        "heavy = [m for m in ('compiler.pipeline', 'transformers', 'hypothesis', 'jinja2') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = fresh_python(code)
    assert result.returncode == 0, result.stderr
    assert "error: nowhere/missing.jinja: no such file" in result.stderr


# --- the rules' wording, without compiling --------------------------------------------------


def test_rules_say_the_change_in_the_templates_terms():
    from compiler.analysis import parse_template
    from compiler.behaviour_diff import tested_knob_values
    from compiler.diff_rules import default_system_rule, generation_prompt_rule, part_rules

    rule = generation_prompt_rule("<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n", "enable_thinking=True")
    assert rule.flagged and rule.text == (
        "the generation prompt with enable_thinking=True now ends with `<think>\\n` (was `<|im_start|>assistant\\n`)"
    )
    assert generation_prompt_rule("<a>", "<a>", "") is None and generation_prompt_rule(None, "<a>") is None
    assert default_system_rule("<s>Be kind.</s>", "").text.startswith("the default system prompt")
    user, tool = {"role": "user", "content": "Hi"}, {"role": "tool", "content": "sunny"}
    close_changed = [([user, tool], {0: "u: Hi<|im_end|>\n", 1: "t: sunny<|im_end|>\n", "between": "<|im_end|>"},
                      {0: "u: Hi<|eot|>\n", 1: "t: sunny<|eot|>\n", "between": "<|eot|>"})]
    (merged,) = part_rules(close_changed)  # one close changed everywhere: one line
    assert merged.text == "user messages, tool results, text between messages: `<|im_end|>` -> `<|eot|>`"
    wrapper = part_rules([([user, tool], {1: "<tool_response>sunny</tool_response>"}, {1: "<result>sunny</result>"})])
    assert [rule.text.split(":")[0] for rule in wrapper] == ["tool results"] and "<result>" in wrapper[0].text
    source = "{% if mode == 1 %}a{% elif mode == 'x' %}b{% endif %}{% if flag is false %}c{% endif %}{{ day }}"
    values = tested_knob_values(parse_template(source, "t"), ("mode", "flag", "day"))
    assert values == {"mode": (1, "x"), "flag": (True, False), "day": ()}  # no 'custom value', no []

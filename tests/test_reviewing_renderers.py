"""What a reviewer of a regenerated renderer relies on: stable diffs, self-contained modules that
regenerate to the same bytes in any order, ``compiler list`` and ``compiler diff``."""

from __future__ import annotations

import ast
import difflib
import json
import os
from pathlib import Path

import pytest

from compiler import pipeline
from compiler.coverage import columns
from compiler.cli import main
from compiler.source import resolve_source
from tests.families import CORPUS
from tests.test_generated_code import foreign_imports

REPO = Path(__file__).resolve().parents[1]

# gpt-oss style: reasoning goes to an analysis message ended by <|end|>, the answer ends with <|return|>
HARMONYISH = (
    "{%- for m in messages -%}\n"
    "{%- if m.role == 'assistant' -%}\n"
    "<|start|>assistant{% if m.reasoning_content %}<|channel|>analysis<|message|>{{ m.reasoning_content }}"
    "<|end|><|start|>assistant{% endif %}<|channel|>final<|message|>{{ m.content }}<|return|>\n"
    "{%- else -%}\n"
    "<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}\n"
)


def changed_lines(old: str, new: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def only_sha_lines(lines: list[str]) -> bool:
    return bool(lines) and all("sha256" in line.lower() for line in lines)


def compiled_code(tmp_path: Path, name: str, source: str, model: str = "test/edit") -> str:
    folder = tmp_path / name
    folder.mkdir()
    template = folder / "edit.jinja"  # the same file name on both sides: the header names it
    template.write_text(source, encoding="utf-8")
    return pipeline.compile_source(resolve_source(model, template=template, allow_hub=False)).code


# --- stable diffs -------------------------------------------------------------------------


def test_a_comment_added_to_a_corpus_template_changes_only_the_sha_lines(tmp_path: Path):
    path = CORPUS / "templates" / "zai-org__GLM-4.6.jinja"
    if not path.is_file():
        pytest.skip(f"test corpus not found: {path}")
    source = path.read_text(encoding="utf-8")
    before = compiled_code(tmp_path, "before", source, "zai-org/GLM-4.6")
    after = compiled_code(tmp_path, "after", "{# reviewed: a comment only #}\n" + source, "zai-org/GLM-4.6")
    lines = changed_lines(before, after)
    assert only_sha_lines(lines) and len(lines) == 4, lines  # the header's and TEMPLATE_SHA256, before and after
    assert "# L" not in after and "# {% if tools %}" in after  # comments quote the statement, not its line


def test_a_no_op_whitespace_control_edit_changes_only_the_sha_lines(tmp_path: Path):
    source = HARMONYISH.replace("{%- if add_generation_prompt -%}", "{% if add_generation_prompt -%}")
    assert source != HARMONYISH
    lines = changed_lines(compiled_code(tmp_path, "before", HARMONYISH), compiled_code(tmp_path, "after", source))
    assert only_sha_lines(lines), lines


def test_a_fault_still_names_its_template_line_without_line_comments(tmp_path: Path, capsys):
    template = tmp_path / "loops.jinja"
    template.write_text("{# first line #}\nx\n{%- for i in range(10**9) %}x{% endfor %}", encoding="utf-8")
    code = main(
        [
            "generate",
            "--model",
            "test/loops",
            "--template",
            str(template),
            "--out",
            str(tmp_path / "out"),
            "--cases",
            "3",
            "--offline",
        ]
    )
    line = capsys.readouterr().err.strip()
    assert code == 1 and line.startswith("error: loops.jinja:3: at {% for i in range(10**9) %}"), line


# --- regeneration from scratch, in any order ---------------------------------------------------

QUICK_MODELS = ("Qwen/Qwen2.5-7B-Instruct", "google/gemma-3-27b-it")


def regenerate(models: list[str], out: Path, cases: int) -> dict[str, bytes]:
    for model in models:
        assert (
            main(
                [
                    "generate",
                    "--model",
                    model,
                    "--corpus",
                    str(CORPUS),
                    "--out",
                    str(out),
                    "--cases",
                    str(cases),
                    "--offline",
                ]
            )
            == 0
        )
    return {path.name: path.read_bytes() for path in sorted(out.glob("*.py"))}


def checked_in_models() -> list[str]:
    from compiler.index import module_entry

    paths = sorted(path for path in (REPO / "generated").glob("*.py") if not path.name.startswith("_"))
    return [module_entry(path).model_ids[0] for path in paths]


@pytest.mark.parametrize(
    "models",
    [
        pytest.param(QUICK_MODELS, id="quick"),
        pytest.param(
            None,
            id="all",
            marks=pytest.mark.skipif(
                os.environ.get("RLLM_FULL_REGENERATION") != "1", reason="minutes: set RLLM_FULL_REGENERATION=1 (CI)"
            ),
        ),
    ],
)
def test_regenerating_from_scratch_in_either_order_gives_the_checked_in_bytes(tmp_path: Path, capsys, models):
    if not (CORPUS / "templates").is_dir():
        pytest.skip(f"test corpus not found: {CORPUS}")
    models = list(models or checked_in_models())
    forward = regenerate(models, tmp_path / "forward", cases=3)
    backward = regenerate(models[::-1], tmp_path / "backward", cases=3)
    capsys.readouterr()
    assert forward == backward
    for name, code in forward.items():
        assert foreign_imports(ast.parse(code)) == [], name
        if name != "_index.py":
            assert code == (REPO / "generated" / name).read_bytes(), f"{name}: regenerate it (see README)"


def generated_harmonyish(tmp_path: Path) -> tuple[Path, Path]:
    """(the output folder, the template) of HARMONYISH generated as ``test/edit``."""
    template = tmp_path / "edit.jinja"
    template.write_text(HARMONYISH, encoding="utf-8")
    out = tmp_path / "out"
    arguments = ["--model", "test/edit", "--template", str(template), "--out", str(out), "--cases", "5", "--offline"]
    assert main(["generate", *arguments]) == 0
    return out, template


# --- compiler list -----------------------------------------------------------------------


def listed(capsys, *arguments: str) -> str:
    assert main(["list", *arguments]) == 0
    return capsys.readouterr().out


def test_list_fits_120_columns_and_says_none_and_stale(capsys):
    printed = listed(capsys, "--corpus", str(CORPUS))
    lines = printed.splitlines()
    assert max(map(columns, lines)) <= 120, max(lines, key=columns)  # terminal columns: "｜" takes two
    assert lines[0].split()[:3] == ["module", "models", "status"] and "knobs" in lines[0]
    qwen3 = next(line for line in lines if line.startswith("qwen3 "))
    assert " current " in qwen3 and "enable_thinking" in qwen3
    qwen2_5 = next(line for line in lines if line.startswith("qwen2_5 "))
    assert " none " in qwen2_5  # no reasoning: "none", never a bare "-"
    wide = listed(capsys, "--corpus", str(CORPUS), "--width", "250").splitlines()
    assert wide[0].split() == lines[0].split() and max(len(line) for line in wide) > 120  # nothing shortened


def test_list_json_and_markdown_carry_every_fact(capsys):
    records = json.loads(listed(capsys, "--corpus", str(CORPUS), "--format", "json"))
    by_model = {record["model"]: record for record in records}
    assert (
        by_model["Qwen/Qwen3-8B"]["knobs"] == ["enable_thinking"] and by_model["Qwen/Qwen3-8B"]["status"] == "current"
    )
    assert len(by_model["Qwen/Qwen3-8B"]["sha256"]) == 64 and "parent" not in by_model["Qwen/Qwen3-8B"]
    markdown = listed(capsys, "--corpus", str(CORPUS), "--format", "markdown").splitlines()
    assert markdown[0].startswith("| model | module | sha256 |") and len(markdown) == len(records) + 3


def test_list_marks_stale_escapes_control_characters_and_tells_none_from_not_learned(
    tmp_path: Path, capsys, monkeypatch
):
    from compiler.coverage import format_table, reasoning_summary, visible

    assert visible("<think>\n") == "<think>\\n"
    out, template = generated_harmonyish(tmp_path)
    overrides = tmp_path / "overrides" / "test"
    overrides.mkdir(parents=True)
    (overrides / "edit.jinja").write_text(HARMONYISH + "{# edited #}", encoding="utf-8")
    capsys.readouterr()
    from compiler import source as source_module

    monkeypatch.setattr(source_module, "OVERRIDES_DIR", tmp_path / "overrides")  # the template as edited since
    (record,) = json.loads(listed(capsys, "--dir", str(out), "--format", "json"))
    assert record["status"] == "stale"
    assert record["tool calls"] == "none" and record["reasoning"].startswith("<|channel|>analysis")
    renderer_class = pipeline.load_generated_file(out / "edit.py")
    unlearned = type("Unlearned", (renderer_class,), {"UNLEARNED": {"reasoning": "why"}})
    assert reasoning_summary(unlearned) == "not learned"
    table = format_table([{**record, "turn": "'<|end|>\n'", "knobs": ["a" * 200]}])
    assert all(len(line) <= 120 and "\n" not in line for line in table.splitlines()) and "\\n" in table


# --- compiler diff -----------------------------------------------------------------------


def diff(tmp_path: Path, capsys, old: str, new: str, *options: str) -> tuple[int, str]:
    paths = []
    for name, source in (("old", old), ("new", new)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "edit.jinja").write_text(source, encoding="utf-8")
        paths.append(str(folder / "edit.jinja"))
    code = main(["diff", *paths, "--model", "test/edit", "--cases", "20", *options])
    return code, capsys.readouterr().out


def test_diff_flags_a_stop_token_that_ends_turns_early_and_exits_1(tmp_path: Path, capsys):
    # the final answer now ends with <|end|>, which also ends the analysis message inside the turn
    code, printed = diff(tmp_path, capsys, HARMONYISH, HARMONYISH.replace("<|return|>", "<|end|>"))
    assert code == 1, printed
    assert "**behaviour changed**" in printed and "(exit 1)" in printed
    summary = printed.split("## Summary")[1].split("## Evidence")[0]
    assert "! turn format (TURN): close '<|return|>' -> '<|end|>'" in summary
    assert "stop tokens added: '<|end|>'" in summary
    assert "! stop '<|end|>' also occurs inside a rendered assistant turn (reasoning and answer)" in summary
    evidence = printed.split("## Evidence")[1].split("## Checked")[0]
    assert "- <|start|>assistant<|channel|>final<|message|>It·is·sunny.<|return|>" in evidence  # marked lines
    assert "+ <|start|>assistant<|channel|>final<|message|>It·is·sunny.<|end|>" in evidence  # visible whitespace
    assert "of 20 generated conversations change their text" in printed and "smallest changed conversation" in printed
    assert "- ripple: none" in printed


def test_diff_of_a_comment_only_edit_reports_no_behaviour_change_and_exits_0(tmp_path: Path, capsys):
    code, printed = diff(tmp_path, capsys, HARMONYISH, "{# reviewed #}\n" + HARMONYISH, "--format", "terminal")
    assert code == 0, printed
    assert "no behaviour change (exit 0)" in printed and "Summary" not in printed and "Evidence" not in printed
    assert "0 of 20 generated conversations change their text" in printed
    assert "read-back and bridge unchanged: answer, reasoning and answer" in printed


def test_diff_of_a_generated_file_against_its_template_and_errors_exit_2(tmp_path: Path, capsys):
    out, template = generated_harmonyish(tmp_path)
    capsys.readouterr()
    assert main(["diff", str(out / "edit.py"), str(template), "--model", "test/edit", "--cases", "10"]) == 0
    assert "no behaviour change" in capsys.readouterr().out
    assert main(["diff", str(tmp_path / "missing.jinja"), str(template)]) == 2
    assert "error:" in capsys.readouterr().err


# --- names and dead code ---------------------------------------------------------------------

DISPATCH = (
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<u>{{ m.content }}"
    "{% elif m.role == 'assistant' and m.tool_calls %}<call>{{ m.tool_calls[0].function.name }}"
    "{% elif m.role == 'assistant' %}<a>{{ m.content }}"
    "{% elif m.role == 'system' and not loop.first %}<s>{{ m.content }}"
    "{% endif %}{% endfor %}"
)


def method_names(source: str) -> list[str]:
    from compiler.analysis import parse_template
    from compiler.translator import TemplateNames, translate

    program = translate(parse_template(source, "t"), "t", TemplateNames(knobs={}, special_tokens={}), source)
    return [method.name for method in program.methods]


def test_branch_methods_are_named_from_their_condition_and_keep_their_names_when_branches_move():
    names = method_names(DISPATCH)
    assert names == ["render_user", "render_assistant_with_tool_calls", "render_assistant", "render_system_not_first"]
    moved = DISPATCH.replace(
        "{% if m.role == 'user' %}", "{% if m.role == 'tool' %}<t>{{ m.content }}{% elif m.role == 'user' %}"
    )
    assert method_names(moved) == ["render_tool", *names]
    # two dispatches over one role in one loop: a header (fixed text only) and the body
    twice = (
        "{% for m in messages %}{% if m.role == 'user' %}<u>{% elif m.role == 'assistant' %}<a>{% endif %}"
        "{% if m.role == 'user' %}{{ m.content }}{% elif m.role == 'assistant' %}[{{ m.content }}]{% endif %}{% endfor %}"
    )
    assert method_names(twice) == ["render_user_header", "render_assistant_header", "render_user", "render_assistant"]


def test_no_code_after_a_raise_and_no_store_nothing_reads(tmp_path: Path):
    source = (
        "{% for m in messages %}{% set seen = false %}{% for part in m.content %}{% if part == 'x' %}"
        "{% set seen = true %}{% endif %}{% endfor %}{% if m.role == 'bad' %}{{ raise_exception('bad role') }}after"
        "{% endif %}{{ m.role }}{{ seen }}{% endfor %}"
    )  # the inner set is local to its loop in Jinja: nothing reads it; the text after the raise never runs
    from tests.test_generated_code import problems_in

    code = compiled_code(tmp_path, "dead", source)
    assert problems_in(code) == [], code
    assert "'seen' set here is local to this loop or macro, and nothing reads it" in code
    assert 'append("after")' not in code and "seen_2" not in code


THINKING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_diff_flags_a_generation_prompt_that_now_holds_the_reasoning_open_marker(tmp_path: Path, capsys):
    new = THINKING.replace("<|im_start|>assistant\n{% endif %}", "<|im_start|>assistant\n<think>{% endif %}")
    code, printed = diff(tmp_path, capsys, THINKING, new, "--format", "terminal")
    assert code == 1, printed
    assert "! the generation prompt now ends with `<think>` (was `<|im_start|>assistant\\n`)" in printed
    assert "! the generation prompt now holds the reasoning open marker: the model no longer samples it" in printed
    assert "\nchat, generation prompt\n" in printed.split("Evidence")[1]

"""The compiler CLI: generate writes only verified code, atomically; errors name what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler import pipeline
from compiler.cli import main
from compiler.errors import VerificationError
from compiler.source import resolve_source
from compiler.verify import Failure, VerificationReport
from compiler.conversations import Case

TINY = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message.role == 'user' %}<u>{{ message.content }}{{ eos_token }}"
    "{% elif message.role == 'assistant' %}<a>{{ message.content }}{{ eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
)
TOKENS = ["--special-token", "bos_token=<s>", "--special-token", "eos_token=</s>", "--offline"]


def test_generate_writes_a_verified_module(tmp_path: Path, capsys):
    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    code = main(["generate", "--model", "test/tiny-chat", "--template", str(template), "--out", str(out), "--cases", "30", *TOKENS])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert (out / "tiny.py").is_file()
    assert "verified: text: " in printed and str(out / "tiny.py") in printed
    assert sorted(path.name for path in out.iterdir()) == ["_index.py", "tiny.py"]  # no temporary left behind
    index = (out / "_index.py").read_text(encoding="utf-8")
    assert "'tiny': (" in index.replace('"', "'") and "test/tiny-chat" in index


def test_untranslatable_template_writes_nothing_and_names_the_construct(tmp_path: Path, capsys):
    template = tmp_path / "bad.jinja"
    template.write_text("{% for m in messages %}\n{% include 'other.jinja' %}{% endfor %}", "utf-8")
    out = tmp_path / "out"
    code = main(["generate", "--model", "test/bad", "--template", str(template), "--out", str(out), *TOKENS])
    error = capsys.readouterr().err
    assert code == 1
    assert "bad.jinja:2:" in error and "{% include %}" in error
    assert not out.exists() or not any(out.iterdir())


def test_a_verification_mismatch_writes_nothing(tmp_path: Path, monkeypatch):
    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    failing = VerificationReport(text_checked=1, failure=Failure(Case(messages=[{"role": "user", "content": "x"}]), "text differs", "-a\n+b"))
    monkeypatch.setattr(pipeline, "verify_compiled", lambda *args, **kwargs: failing)
    source = resolve_source("test/tiny", template=template, allow_hub=False)
    out = tmp_path / "out"
    with pytest.raises(VerificationError, match="smallest failing conversation"):
        pipeline.generate(source, out, cases=5, seed=0, special_tokens={"bos_token": "<s>", "eos_token": "</s>"})
    assert not (out / "tiny.py").exists()


def test_unknown_model_without_any_source_is_a_clear_error(capsys):
    code = main(["generate", "--model", "nobody/no-such-model", "--offline"])
    assert code == 1
    assert "no template for 'nobody/no-such-model'" in capsys.readouterr().err


# --- bad input: one `error:` line naming the file, never a traceback ------------------------------


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


def test_a_template_syntax_error_names_the_file_and_line(tmp_path: Path, capsys):
    template = tmp_path / "broken.jinja"
    template.write_text("{% for m in messages %}\n{{ m.content }\n{% endfor %}", encoding="utf-8")
    code = main(["generate", "--model", "test/broken", "--template", str(template), "--out", str(tmp_path / "out"), *TOKENS])
    assert code == 1
    line = _one_error_line(capsys)
    assert "broken.jinja:2:" in line and "does not parse" in line
    assert not (tmp_path / "out").exists()


def test_a_binary_template_file_is_named(tmp_path: Path, capsys):
    template = tmp_path / "blob.jinja"
    template.write_bytes(bytes(range(128, 256)) * 3)
    code = main(["generate", "--model", "test/blob", "--template", str(template), "--out", str(tmp_path / "out"), *TOKENS])
    assert code == 1
    line = _one_error_line(capsys)
    assert str(template) in line and "not UTF-8 text" in line


@pytest.mark.parametrize("inside", [False, True])
def test_out_pointing_at_a_file_is_named(tmp_path: Path, capsys, inside: bool):
    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("x", encoding="utf-8")
    out = blocker / "sub" if inside else blocker
    code = main(["generate", "--model", "test/tiny-chat", "--template", str(template), "--out", str(out), *TOKENS])
    assert code == 1
    line = _one_error_line(capsys)
    assert f"--out {out}" in line and "a file, not a folder" in line
    assert blocker.read_text(encoding="utf-8") == "x"


@pytest.mark.parametrize("cases", ["0", "-5", "many"])
def test_cases_must_be_a_positive_number(tmp_path: Path, capsys, cases: str):
    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exited:
        main(["generate", "--model", "test/tiny-chat", "--template", str(template), "--out", str(out), "--cases", cases, *TOKENS])
    assert exited.value.code == 2
    assert "argument --cases" in capsys.readouterr().err
    assert not out.exists()


def test_check_fails_on_a_stale_index_and_repairs_it(tmp_path: Path, capsys):
    (tmp_path / "_index.py").write_text("RENDERERS = {'gone': ('GoneRenderer', '0' * 64, ())}\n", encoding="utf-8")
    assert main(["check", "--dir", str(tmp_path), "--corpus", str(tmp_path)]) == 1
    assert "REPAIRED _index.py" in capsys.readouterr().out
    assert main(["check", "--dir", str(tmp_path), "--corpus", str(tmp_path)]) == 0  # the index now lists the folder


def test_a_folder_without_a_tokenizer_is_named(tmp_path: Path, capsys):
    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    empty = tmp_path / "no_tokenizer"
    empty.mkdir()
    code = main(["generate", "--model", "test/tiny-chat", "--template", str(template), "--tokenizer", str(empty), "--out", str(tmp_path / "out"), *TOKENS])
    assert code == 1
    line = _one_error_line(capsys)
    assert f"cannot load a tokenizer from {empty}" in line


def test_check_of_a_missing_folder_is_named(tmp_path: Path, capsys):
    assert main(["check", "--dir", str(tmp_path / "missing")]) == 1
    assert "is not a folder of generated renderers" in _one_error_line(capsys)


@pytest.mark.parametrize("name", ["bad-name!", "Qwen3", "_private", "3x"])
def test_name_must_be_a_module_name(tmp_path: Path, capsys, name: str):
    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        main(["generate", "--model", "test/tiny-chat", "--template", str(template), "--out", str(tmp_path / "out"), "--name", name, *TOKENS])
    assert exited.value.code == 2
    assert "argument --name" in capsys.readouterr().err


def test_a_foreign_python_file_in_the_output_folder_is_named(tmp_path: Path, capsys):
    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.py").write_text("x = 1\n", encoding="utf-8")
    code = main(["generate", "--model", "test/tiny-chat", "--template", str(template), "--out", str(out), "--cases", "5", *TOKENS])
    assert code == 1
    line = _one_error_line(capsys)
    assert "notes.py should define exactly one renderer class" in line
    assert sorted(path.name for path in out.iterdir()) == ["notes.py"]  # nothing written


def test_generate_needs_no_tokenizer_for_a_template_reading_special_tokens(tmp_path: Path, capsys):
    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    code = main(["generate", "--template", str(template), "--out", str(out), "--cases", "20"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "[parity: structural]" in printed.out and "warning" not in printed.err
    renderer_class = pipeline.load_generated_file(out / "tiny.py")
    assert renderer_class.SPECIAL_TOKENS == {"bos_token": None, "eos_token": None}
    renderer = renderer_class(special_tokens={"bos_token": "<s>", "eos_token": "</s>"})
    assert renderer.render_text([{"role": "user", "content": "hi"}]) == "<s><u>hi</s>"
    assert renderer.TURN.close == "</s>" and renderer.get_stop_strings() == ["</s>"]


HIDDEN_ASSISTANT = (
    "{% for m in messages %}{% if m.role == 'user' %}<u>{{ m.content }}</u>\n"
    "{% elif m.role == 'assistant' %}<a>(redacted)</a>\n{% endif %}{% endfor %}"
)


def test_generate_warns_once_and_succeeds_when_turn_facts_cannot_be_learned(tmp_path: Path, capsys):
    template = tmp_path / "hidden.jinja"
    template.write_text(HIDDEN_ASSISTANT, encoding="utf-8")
    out = tmp_path / "out"
    code = main(["generate", "--template", str(template), "--out", str(out), "--cases", "20"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    warnings = [line for line in printed.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and len(printed.err.strip().splitlines()) == 1
    assert "turn: the template does not render a plain assistant message" in warnings[0]
    assert "UNLEARNED = " in (out / "hidden.py").read_text(encoding="utf-8")


def test_list_prints_one_row_per_model(tmp_path: Path, capsys):
    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["generate", "--model", "test/tiny-chat", "--template", str(template), "--out", str(out), "--cases", "5"]) == 0
    capsys.readouterr()
    assert main(["list", "--dir", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["module", "models", "status", "parity", "turn", "reasoning", "tool", "calls", "knobs"]
    row = lines[2].split()
    assert row[:4] == ["tiny", "1", "no", "source"] and row[-1] == "none"  # the template is not in the corpus
    assert "'<{eos_token}>'" in lines[2]  # the close is the tokenizer's eos_token, read when built
    assert lines[-1] == "1 models in 1 modules"
    assert main(["list", "--dir", str(out), "--format", "markdown"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2].startswith("| test/tiny-chat | tiny | ") and rows[2].endswith(" | none | template |")

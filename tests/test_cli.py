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
    assert [path.name for path in out.iterdir()] == ["tiny.py"]  # no temporary left behind


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
    assert lines[0].split() == ["model", "module", "sha256", "parity", "turn", "reasoning", "tool", "calls", "retention"]
    row = lines[2].split()
    assert row[:2] == ["test/tiny-chat", "tiny"] and row[-1] == "template"
    assert "'<{eos_token}>'" in lines[2]  # the close is the tokenizer's eos_token, read when built
    assert lines[-1] == "1 models in 1 modules"

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
    template.write_text("{% for m in messages recursive %}\n{{ m.content }}{{ loop(m.children) }}{% endfor %}", "utf-8")
    out = tmp_path / "out"
    code = main(["generate", "--model", "test/bad", "--template", str(template), "--out", str(out), *TOKENS])
    error = capsys.readouterr().err
    assert code == 1
    assert "bad.jinja:1:" in error and "recursive" in error
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

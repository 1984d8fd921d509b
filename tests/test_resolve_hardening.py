"""resolve(): wrong argument types fail up front, a matching generated renderer that cannot be
used is an error (not a silent change of tokens), and resolution imports one generated module."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

from rllm_renderers.core import registry
from rllm_renderers.core.registry import GeneratedRendererError, ResolutionError, resolve

from .test_registry import HELLO, QWEN3_SHA, QWEN3_TEMPLATE, REPO, tokenizer

# --- argument checks -----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["Qwen/Qwen3-8B", 151643, b"bytes", {"vocab": 1}])
def test_a_tokenizer_that_is_not_a_tokenizer_is_rejected_up_front(bad):
    with pytest.raises(TypeError, match=rf"tokenizer must be a tokenizer object .* got {type(bad).__name__}"):
        resolve("Qwen/Qwen3-8B", bad)


@pytest.mark.parametrize("bad", [[("enable_thinking", False)], "enable_thinking=False", 1])
def test_chat_template_kwargs_must_be_a_dict(bad):
    with pytest.raises(TypeError, match=f"chat_template_kwargs must be a dict of template variables.*got {type(bad).__name__}"):
        resolve("Qwen/Qwen3-8B", None, chat_template_kwargs=bad)


def test_chat_template_kwargs_keys_must_be_names():
    with pytest.raises(TypeError, match="keys must be variable names, got 1"):
        resolve("Qwen/Qwen3-8B", None, chat_template_kwargs={1: True})


def test_model_and_renderer_types():
    with pytest.raises(TypeError, match="model must be a model id string"):
        resolve(None, None)
    with pytest.raises(TypeError, match="renderer must be a string"):
        resolve("Qwen/Qwen3-8B", None, renderer=3)


def test_unknown_kwargs_do_not_pass_silently_through_the_chat_template_fallback():
    tok = tokenizer("qwen3", QWEN3_TEMPLATE, suffix="\n")  # drifted: no generated match, the fallback
    with pytest.raises(ValueError, match="unknown chat_template_kwargs 'enable_thinkin'.*never reads it"):
        resolve("acme/unknown", tok, chat_template_kwargs={"enable_thinkin": False})
    with pytest.raises(ValueError, match="'tokenize' is an argument of apply_chat_template"):
        resolve("acme/unknown", tok, chat_template_kwargs={"tokenize": False})
    # what the template reads still passes
    assert resolve("acme/unknown", tok, chat_template_kwargs={"enable_thinking": False}).source == "chat_template"


# --- strict generated resolution ----------------------------------------------------------------

BROKEN_MODULES = {
    "import_fails": 'raise RuntimeError("boom at import")\n',
    "build_fails": textwrap.dedent(
        """
        from rllm_renderers.generated.qwen3 import Qwen3Renderer


        class BuildFailsRenderer(Qwen3Renderer):
            def __init__(self, *args, **kwargs):
                raise RuntimeError("boom at build")
        """
    ),
    "stale": textwrap.dedent(
        """
        from rllm_renderers.generated.qwen3 import Qwen3Renderer


        class StaleRenderer(Qwen3Renderer):
            TEMPLATE_SHA256 = "0" * 64
        """
    ),
}
CLASS_NAMES = {"import_fails": "ImportFailsRenderer", "build_fails": "BuildFailsRenderer", "stale": "StaleRenderer"}


@pytest.fixture
def broken_package(tmp_path, monkeypatch):
    """A generated package whose only renderer matches Qwen3's template but is broken in a given way."""

    real = registry.generated_index

    def make(kind: str) -> None:
        package = tmp_path / f"broken_{kind}"
        package.mkdir()
        (package / "__init__.py").write_text("", encoding="utf-8")
        (package / "_index.py").write_text(
            f"RENDERERS = {{{kind!r}: ({CLASS_NAMES[kind]!r}, {QWEN3_SHA!r}, ('Qwen/Qwen3-8B',))}}\n", encoding="utf-8"
        )
        (package / f"{kind}.py").write_text(BROKEN_MODULES[kind], encoding="utf-8")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setattr(registry, "generated_index", lambda package=None: real(f"broken_{kind}"))

    yield make
    real.cache_clear()


@pytest.mark.parametrize(
    "kind, message",
    [
        ("import_fails", "cannot be imported: RuntimeError: boom at import"),
        ("build_fails", "could not be built for this tokenizer: boom at build"),
        ("stale", "the generated index is stale"),
    ],
)
def test_a_matching_generated_renderer_that_fails_raises(broken_package, kind, message, caplog):
    broken_package(kind)
    tok = tokenizer("qwen3", QWEN3_TEMPLATE)
    with pytest.raises(GeneratedRendererError, match=message) as raised:
        resolve("Qwen/Qwen3-8B", tok)
    assert "allow_fallback=True" in str(raised.value)
    assert isinstance(raised.value, ResolutionError)
    # explicitly allowed: downgrade, loudly
    with caplog.at_level(logging.ERROR, logger="rllm_renderers.core.registry"):
        resolution = resolve("Qwen/Qwen3-8B", tok, allow_fallback=True)
    assert resolution.source != "generated"
    assert any(r.levelno == logging.ERROR and "DOWNGRADE" in r.getMessage() for r in caplog.records)


def test_an_unknown_knob_stays_the_callers_error_even_with_allow_fallback():
    with pytest.raises(ValueError, match="unknown template knob 'no_such_knob'"):
        resolve("Qwen/Qwen3-8B", None, chat_template_kwargs={"no_such_knob": 1}, allow_fallback=True)


def test_resolution_imports_only_the_generated_module_it_uses():
    code = textwrap.dedent(
        """
        import sys, rllm_renderers
        r = rllm_renderers.resolve('Qwen/Qwen3-8B', None)
        assert r.renderer.render_text([{'role': 'user', 'content': 'x'}])
        print(sorted(m for m in sys.modules if m.startswith('rllm_renderers.generated.')))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['rllm_renderers.generated._index', 'rllm_renderers.generated.qwen3']"


def test_the_checked_in_index_is_current():
    from pathlib import Path

    from compiler.emit import BLACK_MODE
    from compiler.index import index_is_current

    assert index_is_current(Path(REPO) / "generated", BLACK_MODE), "run python -m compiler generate/check"


def test_index_lists_every_generated_class_with_its_constants():
    from rllm_renderers.core.registry import generated_index

    for entry in generated_index():
        cls = entry.cls
        assert (cls.__name__, cls.TEMPLATE_SHA256, tuple(cls.MODEL_IDS)) == (entry.class_name, entry.sha256, entry.model_ids)
    assert resolve("Qwen/Qwen3-8B", tokenizer("qwen3", QWEN3_TEMPLATE)).renderer.render_ids(HELLO)

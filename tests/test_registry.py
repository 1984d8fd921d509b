"""resolve(): precedence, drift guard, overrides, knobs, optional extras, no network, laziness;
and what rollout workers need from generated renderers (pickling, threads, prime-rl loading).

Tokenizers come from the shared corpus (``RLLM_CORPUS``); without it most tests skip.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import pickle
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rllm_renderers.core.registry import Resolution, ResolutionError, generated_index, get_renderer, resolve  # noqa: E402
from tests.isolation import fresh_python, no_extras, no_network  # noqa: E402,F401 (fixtures)

CORPUS = Path(os.environ.get("RLLM_CORPUS", REPO.parent / "shared" / "corpus"))
QWEN3_TEMPLATE = "Qwen__Qwen3-8B.jinja"
QWEN3_SHA = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"
HELLO = [{"role": "user", "content": "Hello!"}]


@functools.lru_cache(maxsize=None)
def corpus_tokenizer(folder: str):
    path = CORPUS / "tokenizers" / folder
    if not (path / "tokenizer.json").exists():
        pytest.skip(f"test corpus not found: {path} (set RLLM_CORPUS to the shared corpus folder)")
    from rllm_renderers.encoding.loading import load_tokenizer

    return load_tokenizer(path)


def tokenizer(folder: str, template: str | None = None, *, suffix: str = ""):
    """A fresh copy of a corpus tokenizer carrying ``template`` (+ ``suffix``) as its chat template."""
    copied = copy.copy(corpus_tokenizer(folder))
    copied.chat_template = None
    if template is not None:
        copied.chat_template = (CORPUS / "templates" / template).read_text(encoding="utf-8") + suffix
    return copied


def needs(module: str):
    return pytest.importorskip(module, reason=f"{module} (an optional extra) is not installed")


# --- the generated index -------------------------------------------------------------------


def test_generated_index_is_scanned_and_cached():
    entries = generated_index()
    assert generated_index() is entries
    by_family = {entry.family: entry for entry in entries}
    assert {"qwen3", "llama_3_1", "deepseek_v3", "gpt_oss"} <= set(by_family)
    qwen3 = by_family["qwen3"]
    assert qwen3.import_path == "rllm_renderers.generated.qwen3:Qwen3Renderer"
    assert qwen3.sha256 == QWEN3_SHA and "Qwen/Qwen3-8B" in qwen3.model_ids


# --- precedence --------------------------------------------------------------------------------


def test_generated_by_template_content_whatever_the_model_name():
    for model in ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", "someone/my-qwen3-finetune"):
        resolution = resolve(model, tokenizer("qwen3", QWEN3_TEMPLATE))
        assert (resolution.source, resolution.name) == ("generated", "qwen3")
        assert type(resolution.renderer).__name__ == "Qwen3Renderer"


def test_generated_by_model_id_without_a_template():
    resolution = resolve("deepseek-ai/DeepSeek-V3", tokenizer("dsv3"))
    assert (resolution.source, resolution.name) == ("generated", "deepseek_v3")
    assert get_renderer("deepseek-ai/DeepSeek-V3", tokenizer("dsv3")).render_ids(HELLO)


def test_tokenizer_none_is_text_only_generated():
    resolution = resolve("Qwen/Qwen3-8B", None)
    assert isinstance(resolution, Resolution) and resolution.source == "generated"
    assert "<|im_start|>user\nHello!<|im_end|>" in resolution.renderer.render_text(HELLO)


def test_tokenizer_none_for_an_unknown_model_is_a_clear_error():
    with pytest.raises(ResolutionError, match="only generated renderers qualify"):
        resolve("acme/unknown-model", None)
    with pytest.raises(ResolutionError, match="need a tokenizer"):
        resolve("Qwen/Qwen3-8B", None, renderer="tinker:qwen3")


def test_drifted_template_falls_through_with_a_warning(caplog):
    drifted = tokenizer("qwen3", QWEN3_TEMPLATE, suffix="{#- a local edit -#}")
    with caplog.at_level(logging.WARNING, logger="rllm_renderers.core.registry"):
        resolution = resolve("Qwen/Qwen3-8B", drifted)
    assert resolution.source != "generated"
    warning = next(r.getMessage() for r in caplog.records if "drift" in r.getMessage())
    assert QWEN3_SHA in warning
    from rllm_renderers.adapters.chat_template import template_sha256

    assert template_sha256(drifted.chat_template) in warning


def test_model_only_prime_knows_resolves_to_prime():
    # (a model renderers maps to a family the project has resolves to the generated renderer:
    # tests/test_engine_entry_points.py)
    needs("renderers")
    resolution = resolve("PrimeIntellect/Qwen3-0.6B", tokenizer("qwen3"))
    assert (resolution.source, resolution.name) == ("prime", "prime-qwen3")
    resolution = resolve("deepseek-ai/DeepSeek-R1", tokenizer("dsv3"))
    assert (resolution.source, resolution.name) == ("prime", "deepseek-r1")
    # their renderer for this exact model, though the tokenizer is the one qwen3_5 was verified with
    resolution = resolve("Qwen/Qwen3.6-35B-A3B", tokenizer("qwen35"))
    assert (resolution.source, resolution.name) == ("prime", "qwen3.6")


def test_drifted_template_of_a_prime_model_resolves_to_prime():
    needs("renderers")
    drifted = tokenizer("qwen3", QWEN3_TEMPLATE, suffix="\n")
    assert resolve("Qwen/Qwen3-8B", drifted).source == "prime"


def test_model_only_tinker_knows_resolves_to_tinker():
    needs("tinker_cookbook")
    # (every corpus model has a generated renderer; Llama 3.3 is known to tinker only)
    resolution = resolve("meta-llama/Llama-3.3-70B-Instruct", tokenizer("llama31"))
    assert (resolution.source, resolution.name) == ("tinker", "llama3")
    assert type(resolution.renderer).__name__ == "TinkerAdapter"


def test_tinker_match_with_kwargs_falls_through(caplog):
    needs("tinker_cookbook")
    with caplog.at_level(logging.WARNING):
        resolution = resolve(
            "meta-llama/Llama-3.3-70B-Instruct",
            tokenizer("llama31", "meta-llama__Llama-3.1-8B-Instruct.jinja", suffix="\n"),
            chat_template_kwargs={"date_string": "26 Jul 2024"},  # a variable the Llama template reads
        )
    assert resolution.source == "chat_template"
    assert any("takes no chat_template_kwargs" in r.getMessage() for r in caplog.records)


def test_unknown_model_falls_back_to_the_chat_template_loudly(caplog):
    with caplog.at_level(logging.WARNING, logger="rllm_renderers.core.registry"):
        resolution = resolve("acme/unknown-model", tokenizer("qwen3", QWEN3_TEMPLATE, suffix="\n"))
    assert (resolution.source, resolution.name) == ("chat_template", "chat_template")
    assert any(r.levelno == logging.WARNING and "FALLBACK" in r.getMessage() for r in caplog.records)
    expected = tokenizer("qwen3", QWEN3_TEMPLATE, suffix="\n").apply_chat_template(
        HELLO, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert resolution.renderer.render_ids(HELLO, add_generation_prompt=True) == list(expected)


def test_no_template_and_no_match_is_a_clear_error():
    with pytest.raises(ResolutionError, match="no chat_template"):
        resolve("acme/unknown-model", tokenizer("qwen3"))


# --- explicit overrides --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "override, folder, source, name",
    [
        ("qwen3", "qwen3", "generated", "qwen3"),
        ("generated:llama_3_1", "llama31", "generated", "llama_3_1"),
        ("Llama32Renderer", "llama31", "generated", "llama_3_2"),
        ("rllm_renderers.generated.deepseek_v3:DeepseekV3Renderer", "dsv3", "generated", "deepseek_v3"),
        ("chat_template", "qwen3", "chat_template", "chat_template"),
    ],
)
def test_explicit_override_wins(override, folder, source, name, caplog):
    # The tokenizer ships Qwen3's template (a generated match): the override still wins.
    resolution = resolve("Qwen/Qwen3-8B", tokenizer(folder, QWEN3_TEMPLATE), renderer=override)
    assert (resolution.source, resolution.name) == (source, name)
    assert resolution.renderer.render_ids(HELLO, add_generation_prompt=True)


@pytest.mark.parametrize(
    "override, folder, extra, source, name",
    [
        ("prime:qwen3", "qwen3", "renderers", "prime", "qwen3"),
        ("deepseek-r1", "dsv3", "renderers", "prime", "deepseek-r1"),
        ("tinker:qwen3", "qwen3", "tinker_cookbook", "tinker", "qwen3"),
        ("qwen3_disable_thinking", "qwen3", "tinker_cookbook", "tinker", "qwen3_disable_thinking"),
        ("llama3", "llama31", "tinker_cookbook", "tinker", "llama3"),
    ],
)
def test_explicit_override_of_an_extra_wins(override, folder, extra, source, name):
    needs(extra)
    resolution = resolve("Qwen/Qwen3-8B", tokenizer(folder, QWEN3_TEMPLATE), renderer=override)
    assert (resolution.source, resolution.name) == (source, name)
    assert resolution.renderer.render_ids(HELLO, add_generation_prompt=True)


def test_forcing_a_generated_renderer_over_a_drifted_template_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="rllm_renderers.core.registry"):
        resolution = resolve("Qwen/Qwen3-8B", tokenizer("qwen3", QWEN3_TEMPLATE, suffix="\n"), renderer="qwen3")
    assert resolution.source == "generated"
    assert any("forced" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("override", ["no-such-renderer", "generated:no_such_family"])
def test_unknown_override_is_an_error(override):
    with pytest.raises(ResolutionError):
        resolve("Qwen/Qwen3-8B", tokenizer("qwen3"), renderer=override)


# --- knobs ------------------------------------------------------------------------------------


def test_chat_template_kwargs_become_generated_knobs():
    renderer = get_renderer("Qwen/Qwen3-8B", tokenizer("qwen3"), chat_template_kwargs={"enable_thinking": False})
    assert renderer.knob_values == {"enable_thinking": False}
    assert renderer.render_text(HELLO, add_generation_prompt=True).endswith("<think>\n\n</think>\n\n")
    with pytest.raises(ValueError, match="unknown template knob"):
        resolve("Qwen/Qwen3-8B", tokenizer("qwen3"), chat_template_kwargs={"no_such_knob": 1})


def test_chat_template_kwargs_for_prime():
    needs("renderers")
    # (a model of a family renderers has and the project lacks: Qwen3.6)
    model = "Qwen/Qwen3.6-35B-A3B"
    renderer = get_renderer(model, tokenizer("qwen35"), chat_template_kwargs={"enable_thinking": False})
    assert renderer.config.enable_thinking is False
    with pytest.raises(ValueError, match="Unsupported chat_template_kwargs"):
        resolve(model, tokenizer("qwen35"), chat_template_kwargs={"no_such_knob": 1})


def test_chat_template_kwargs_for_the_chat_template_adapter():
    tok = tokenizer("qwen3", QWEN3_TEMPLATE, suffix="\n")
    renderer = get_renderer("acme/unknown", tok, chat_template_kwargs={"enable_thinking": False})
    text = tok.decode(renderer.render_ids(HELLO, add_generation_prompt=True))
    assert text.endswith("<think>\n\n</think>\n\n")


# --- optional extras and the network ----------------------------------------------------------


def test_resolution_works_without_either_extra(no_extras):
    assert resolve("Qwen/Qwen3-8B", tokenizer("qwen3", QWEN3_TEMPLATE)).source == "generated"
    assert resolve("Qwen/Qwen3-8B", None).source == "generated"
    # A model that prime and tinker know falls through to the chat template without them.
    resolution = resolve("Qwen/Qwen3-4B", tokenizer("qwen3", QWEN3_TEMPLATE, suffix="\n"))
    assert resolution.source == "chat_template"
    with pytest.raises(ResolutionError):
        resolve("Qwen/Qwen3-8B", tokenizer("qwen3"), renderer="prime:qwen3")


def test_unknown_model_never_touches_the_network(no_network, monkeypatch):
    try:
        import renderers.base
    except ImportError:
        pass
    else:  # the Hub probe of renderers' auto-resolution must not even be reached
        monkeypatch.setattr(renderers.base, "_model_has_vision_config", lambda *a: pytest.fail("Hub probe"))
        monkeypatch.setattr(renderers.base, "_resolve_auto_config", lambda *a, **k: pytest.fail("auto config"))
    resolution = resolve("nobody/never-published-model", tokenizer("qwen3", QWEN3_TEMPLATE, suffix="\n"))
    assert resolution.source == "chat_template"
    for model in ("Qwen/Qwen3-4B", "deepseek-ai/DeepSeek-V3.1", "Qwen/Qwen3-8B"):
        resolve(model, tokenizer("qwen3" if "Qwen" in model else "dsv3")).renderer.render_ids(HELLO)


def test_prime_gpt_oss_vocabulary_is_derived_offline(no_network, tmp_path, monkeypatch):
    needs("renderers")
    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", "")  # "unset", and restored after the test
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    resolution = resolve("openai/gpt-oss-20b", tokenizer("gptoss"), renderer="prime:gpt-oss")
    assert os.environ["TIKTOKEN_ENCODINGS_BASE"] == str(tmp_path / "rllm_renderers" / "tiktoken")
    assert resolution.renderer.render_ids(HELLO, add_generation_prompt=True)


def test_import_is_lazy():
    """`import rllm_renderers` (and resolving a generated renderer) loads no heavy library."""
    code = (
        "import sys, rllm_renderers\n"
        "heavy = ('jinja2', 'transformers', 'torch', 'tinker', 'tinker_cookbook', 'renderers')\n"
        "assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]\n"
        "r = rllm_renderers.resolve('Qwen/Qwen3-8B', None)\n"
        "assert r.source == 'generated' and r.renderer.render_text([{'role': 'user', 'content': 'x'}])\n"
        "assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]\n"
        "from rllm_renderers.core.factory import create_renderer\n"  # the engines' factory, exported lazily too
        "assert 'create_renderer' in rllm_renderers.__all__ and rllm_renderers.create_renderer is create_renderer\n"
        "assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]\n"
    )
    result = fresh_python(code)
    assert result.returncode == 0, result.stderr


# --- what rollout workers need ------------------------------------------------------------------

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Name three primes."},
    {"role": "assistant", "content": "2, 3, 5."},
    {"role": "user", "content": "And the next one?"},
]


@pytest.mark.parametrize("model, folder", [("Qwen/Qwen3-8B", "qwen3"), ("meta-llama/Llama-3.1-8B-Instruct", "llama31")])
def test_generated_renderer_pickles(model, folder):
    renderer = get_renderer(
        model, tokenizer(folder), chat_template_kwargs={} if folder == "llama31" else {"enable_thinking": True}
    )
    expected = renderer.render_ids(CONVERSATION, add_generation_prompt=True)
    clone = pickle.loads(pickle.dumps(renderer))
    assert type(clone) is type(renderer) and clone.knob_values == renderer.knob_values
    assert clone.render_ids(CONVERSATION, add_generation_prompt=True) == expected


def test_generated_renderer_is_thread_safe():
    renderer = get_renderer("Qwen/Qwen3-8B", tokenizer("qwen3"))
    conversations = [CONVERSATION[: k + 1] for k in range(len(CONVERSATION))]
    expected = [renderer.render(c, add_generation_prompt=True) for c in conversations]
    fresh = get_renderer("Qwen/Qwen3-8B", tokenizer("qwen3"))  # threads race to build its caches
    results: dict[int, list] = {}
    barrier = threading.Barrier(4)

    def work(worker: int) -> None:
        barrier.wait()
        results[worker] = [fresh.render(c, add_generation_prompt=True) for _ in range(5) for c in conversations]

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for worker in range(4):
        assert results[worker] == expected * 5


def test_adapters_pickle():
    tok = tokenizer("qwen3", QWEN3_TEMPLATE, suffix="\n")
    adapters = [get_renderer("acme/unknown", tok)]
    if _importable("tinker_cookbook"):
        adapters.append(get_renderer("Qwen/Qwen3-8B", tok, renderer="tinker:qwen3"))
    if _importable("renderers"):
        adapters.append(get_renderer("Qwen/Qwen3-8B", tok, renderer="prime:qwen3"))
    for adapter in adapters:
        clone = pickle.loads(pickle.dumps(adapter))
        assert clone.render_ids(CONVERSATION, add_generation_prompt=True) == adapter.render_ids(
            CONVERSATION, add_generation_prompt=True
        )


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_generated_renderer_is_a_prime_renderer():
    renderers = needs("renderers")
    for entry in generated_index():
        tok = (
            None
            if entry.family not in ("qwen3", "llama_3_1")
            else tokenizer("qwen3" if entry.family == "qwen3" else "llama31")
        )
        assert isinstance(entry.cls(tok), renderers.Renderer), entry.import_path


def test_prime_rl_loads_generated_renderers_by_import_path():
    needs("renderers")
    from renderers import CustomRendererConfig, create_renderer, load_target

    assert load_target("rllm_renderers.generated.qwen3:Qwen3Renderer").__name__ == "Qwen3Renderer"
    tok = tokenizer("qwen3")
    config = CustomRendererConfig(import_path="rllm_renderers.adapters.prime:Qwen3Renderer", enable_thinking=False)
    renderer = create_renderer(tok, config)
    direct = get_renderer("Qwen/Qwen3-8B", tok, chat_template_kwargs={"enable_thinking": False})
    assert isinstance(renderer, type(direct))
    assert renderer.render_ids(CONVERSATION, add_generation_prompt=True) == direct.render_ids(
        CONVERSATION, add_generation_prompt=True
    )
    assert pickle.loads(pickle.dumps(renderer)).render_ids(CONVERSATION) == renderer.render_ids(CONVERSATION)
    with pytest.raises(Exception, match="no_such_knob"):
        CustomRendererConfig(import_path="rllm_renderers.adapters.prime:Qwen3Renderer", no_such_knob=1)


def test_prime_custom_config_loads_a_generated_class_by_its_own_import_path(qwen3_tokenizer_for_custom):
    renderers = pytest.importorskip("renderers")
    from renderers.configs import CustomRendererConfig

    from rllm_renderers.generated.qwen3 import Qwen3Renderer

    config = CustomRendererConfig(import_path="rllm_renderers.generated.qwen3.Qwen3Renderer", enable_thinking=False)
    renderer = renderers.create_renderer(qwen3_tokenizer_for_custom, config)
    assert type(renderer) is Qwen3Renderer
    messages = [{"role": "user", "content": "hi"}]
    expected = Qwen3Renderer(qwen3_tokenizer_for_custom, enable_thinking=False).render_ids(messages, add_generation_prompt=True)
    assert renderer.render_ids(messages, add_generation_prompt=True) == expected
    assert isinstance(renderer, renderers.Renderer)


@pytest.fixture
def qwen3_tokenizer_for_custom():
    from tests.families import load_corpus_tokenizer

    return load_corpus_tokenizer("qwen3")

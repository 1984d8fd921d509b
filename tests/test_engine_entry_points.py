"""The engine entry points: ``create_renderer`` (PrimeIntellect's factory shape), ``resolve`` with
knobs and retention as keywords, and resolution by what a tokenizer holds (its fingerprint), for
local copies, revisions and template-less tokenizers. Never any Hub lookup.

Tokenizers come from the shared corpus (``RLLM_CORPUS``); without it these tests skip.
"""

from __future__ import annotations

import csv
import functools
import json
import logging
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rllm_renderers import create_renderer, resolve  # noqa: E402
from rllm_renderers.encoding.fingerprint import tokenizer_fingerprint  # noqa: E402
from rllm_renderers.core.names import PRIME_FAMILIES, model_spellings  # noqa: E402
from rllm_renderers.core.registry import SERVED_BY, AmbiguousRendererError, ResolutionError, generated_index  # noqa: E402
from tests.isolation import fresh_python, no_extras, no_network  # noqa: E402,F401 (fixtures)

CORPUS = Path(os.environ.get("RLLM_CORPUS", REPO.parent / "shared" / "corpus"))
HELLO = [{"role": "user", "content": "Hello!"}]


def corpus_path(folder: str) -> Path:
    path = CORPUS / "tokenizers" / folder
    if not (path / "tokenizer.json").exists():
        pytest.skip(f"test corpus not found: {path} (set RLLM_CORPUS to the shared corpus folder)")
    return path


@functools.lru_cache(maxsize=None)
def _loaded(folder: str):
    from rllm_renderers.encoding.loading import load_tokenizer

    return load_tokenizer(corpus_path(folder))


def tokenizer(folder: str, *, name: str | None = None):
    """A corpus tokenizer as shipped (no chat template), loaded under ``name`` if given."""
    import copy

    tok = copy.copy(_loaded(folder))
    tok.chat_template = None
    if name is not None:
        tok.name_or_path = name
    return tok


def corpus_tokenizer_folders() -> list[str]:
    manifest = CORPUS / "tokenizers" / "MANIFEST.tsv"
    if not manifest.is_file():
        return []
    with manifest.open(newline="", encoding="utf-8") as handle:
        return sorted({row["dir"] for row in csv.DictReader(handle, delimiter="\t")})


@functools.lru_cache(maxsize=None)
def verified_with() -> dict[str, Path | None]:
    """module -> the corpus tokenizer folder it is verified with, as the compiler finds it (its
    source: override metadata or the corpus manifest), independent of any fingerprint."""
    from compiler.source import resolve_source

    if not (CORPUS / "templates" / "MANIFEST.tsv").is_file():
        pytest.skip(f"test corpus not found: {CORPUS}")
    folders = {}
    for entry in generated_index():
        source = resolve_source(entry.model_ids[0], corpus=CORPUS, allow_hub=False)
        folders[entry.family] = source.tokenizer_dir.resolve() if source.tokenizer_dir else None
    return folders


def outcome(tok, model: str | None = None) -> tuple:
    """What resolution gives for ``tok``: the generated module, or the kind of failure."""
    try:
        resolution = resolve(tok.name_or_path if model is None else model, tok)
    except AmbiguousRendererError as exc:
        return ("ambiguous", tuple(sorted(exc.candidates)))
    except ResolutionError as exc:
        return ("unresolved", type(exc).__name__)
    return (resolution.source, resolution.name)


# --- the fingerprint ---------------------------------------------------------------------------


def test_the_fingerprint_tells_every_corpus_tokenizer_apart_and_ignores_the_wrapper():
    import tokenizers

    folders = corpus_tokenizer_folders()
    if not folders:
        pytest.skip(f"no tokenizer manifest in {CORPUS}")
    prints = {}
    for folder in folders:
        hf = _loaded(folder)
        raw = tokenizers.Tokenizer.from_file(str(corpus_path(folder) / "tokenizer.json"))
        prints[folder] = tokenizer_fingerprint(hf)
        assert prints[folder] == tokenizer_fingerprint(raw), folder  # the HF wrapper adds nothing
        assert len(prints[folder]) == 64
    assert len(set(prints.values())) == len(folders), prints  # qwen25 is qwen3 minus 4 added tokens
    assert tokenizer_fingerprint(object()) is None


def test_the_index_records_the_fingerprint_of_the_tokenizer_each_renderer_verifies_with():
    folders = verified_with()
    recorded = 0
    for entry in generated_index():
        folder = folders[entry.family]
        expected = tokenizer_fingerprint(_loaded(str(folder.relative_to((CORPUS / "tokenizers").resolve())))) if folder else None
        assert entry.tokenizer_fingerprint == expected, entry.family
        recorded += expected is not None
    assert recorded >= 10  # every renderer with a corpus tokenizer (14 today)


# --- resolution by content -------------------------------------------------------------------


def test_a_revision_of_deepseek_v4_resolves_by_its_tokenizer(no_network):
    dsv4 = tokenizer("dsv4", name="deepseek-ai/DeepSeek-V4-Flash-0731")
    assert dsv4.chat_template is None  # DeepSeek-V4's reference is a Python encoder, not a template
    resolution = resolve("deepseek-ai/DeepSeek-V4-Flash-0731", dsv4)
    assert (resolution.source, resolution.name) == ("generated", "deepseek_v4")
    assert type(create_renderer(dsv4)).__name__ == "DeepseekV4Renderer"
    # a name nobody lists: the tokenizer alone
    assert outcome(dsv4, "someone/dsv4-sft-step-1200") == ("generated", "deepseek_v4")


def test_a_revision_resolves_by_content_without_any_extra(no_extras, no_network):
    dsv4 = tokenizer("dsv4", name="deepseek-ai/DeepSeek-V4-Flash-0731")
    assert outcome(dsv4) == ("generated", "deepseek_v4")


@pytest.mark.parametrize("folder", corpus_tokenizer_folders() or ["(no corpus)"])
def test_a_local_copy_of_a_corpus_tokenizer_resolves_like_the_original(folder, tmp_path, no_network):
    from rllm_renderers.encoding.loading import load_tokenizer

    original = _loaded(folder)
    copy_dir = tmp_path / "checkpoints" / "run-7" / "final"
    shutil.copytree(corpus_path(folder), copy_dir)
    local = load_tokenizer(copy_dir)
    assert local.name_or_path != original.name_or_path
    assert outcome(local) == outcome(original)
    # ... and that outcome is the one the corpus implies: the renderers verified with this folder
    verified = [m for m, f in verified_with().items() if f == corpus_path(folder).resolve()]
    expected = sorted({SERVED_BY.get(m, m) for m in verified})  # (one renderer serves gpt-oss)
    if len(expected) == 1:
        assert outcome(local) == ("generated", expected[0])
    elif expected:
        assert outcome(local) == ("ambiguous", tuple(expected))
    else:
        assert outcome(local) == ("unresolved", "ResolutionError")


def manifest_models_with_tokenizers() -> list[tuple[str, str, str]]:
    manifest = CORPUS / "templates" / "MANIFEST.tsv"
    if not manifest.is_file():
        return []
    with manifest.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return [(row["model_id"], row["file"], row["tokenizer"]) for row in rows if row["tokenizer"] not in ("", "-")]


@pytest.mark.parametrize("model, template, folder", manifest_models_with_tokenizers() or [("(no corpus)", "", "")])
def test_a_local_checkpoint_carrying_its_template_resolves_to_its_renderer(model, template, folder, tmp_path):
    """A checkpoint folder as a trainer saves it: tokenizer plus chat template, under any name."""
    from rllm_renderers.encoding.loading import load_tokenizer

    copy_dir = tmp_path / "my-finetune"
    shutil.copytree(corpus_path(folder), copy_dir)
    config_path = copy_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = (CORPUS / "templates" / template).read_text(encoding="utf-8")
    config_path.write_text(json.dumps(config), encoding="utf-8")
    listed = [entry.family for entry in generated_index() if model in entry.model_ids]
    assert outcome(load_tokenizer(copy_dir)) == ("generated", SERVED_BY.get(listed[0], listed[0]))


def test_the_name_chooses_among_renderers_verified_with_the_same_tokenizer():
    coder = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
    assert outcome(tokenizer("qwen3"), coder) == ("generated", "qwen3_coder")
    assert outcome(tokenizer("qwen3"), "Qwen/Qwen3-8B") == ("generated", "qwen3")
    # a local path or the Hugging Face cache spells the id
    assert outcome(tokenizer("qwen3"), f"/models/{coder}") == ("generated", "qwen3_coder")
    cache = "/root/.cache/huggingface/hub/models--Qwen--Qwen3-Coder-30B-A3B-Instruct/snapshots/0123abc"
    assert outcome(tokenizer("qwen3"), cache) == ("generated", "qwen3_coder")
    assert model_spellings("Qwen/Qwen3-8B") == ("Qwen/Qwen3-8B",)  # an id is not a path


def test_two_fitting_renderers_are_an_error_that_lists_both_and_says_how_to_choose():
    tok = tokenizer("qwen3", name="/data/ckpt/step-400")
    with pytest.raises(AmbiguousRendererError) as raised:
        create_renderer(tok)
    message = str(raised.value)
    assert raised.value.candidates == ("qwen3", "qwen3_coder")
    assert "Qwen/Qwen3-8B" in message and "Qwen/Qwen3-Coder-30B-A3B-Instruct" in message
    assert "renderer='qwen3'" in message and "renderer='qwen3_coder'" in message
    assert "no chat_template" in message
    assert type(create_renderer(tok, renderer="qwen3_coder")).__name__ == "Qwen3CoderRenderer"


def test_content_wins_over_a_name_it_contradicts(caplog):
    with caplog.at_level(logging.WARNING, logger="rllm_renderers.core.registry"):
        assert outcome(tokenizer("dsv4"), "Qwen/Qwen3-8B") == ("generated", "deepseek_v4")
    assert any("verified with" in record.getMessage() for record in caplog.records)


def test_a_tokenizer_nobody_was_verified_with_still_resolves_by_name():
    # the synthetic GLM-5 tokenizer fits no renderer (none records it); a listed name still resolves
    glm = tokenizer("synthetic/glm5")
    assert outcome(glm, "zai-org/GLM-4.7-Flash") == ("generated", "glm_4_7_flash")
    assert outcome(glm, "acme/unknown") == ("unresolved", "ResolutionError")


# --- PrimeIntellect's model map and family names ---------------------------------------------


def prime_map() -> dict[str, str]:
    base = pytest.importorskip("renderers.base", reason="renderers (the prime extra) is not installed")
    return dict(base.MODEL_RENDERER_MAP)


#: Families mapped although their model map and our MODEL_IDS share no model, and why.
MAPPED_BY_REFERENCE = {
    "deepseek-v4": "their map lists DeepSeek-V4-Flash-0731 only; both follow DeepSeek's V4 encoder",
    "gpt-oss": "their renderer is OpenAI's harmony encoder, which gpt_oss_harmony is verified against",
}


def test_prime_family_names_map_only_to_modules_sharing_a_model():
    by_family = {}
    for model, family in prime_map().items():
        by_family.setdefault(family, set()).add(model)
    modules = {entry.family: entry for entry in generated_index()}
    for family, candidates in PRIME_FAMILIES.items():  # (the others a family lists go by their template)
        assert family in by_family, family
        shared = by_family[family] & set(modules[candidates[0]].model_ids)
        assert shared or family in MAPPED_BY_REFERENCE, (family, candidates[0])
        assert all(module in modules for module in candidates), family
    # and no family sharing a model with a generated renderer is left out
    for family, models in by_family.items():
        if any(models & set(entry.model_ids) for entry in modules.values()):
            assert family in PRIME_FAMILIES, family


def test_every_model_of_prime_s_map_whose_family_the_project_has_resolves_to_it(no_network):
    checked = 0
    modules = {entry.family: entry for entry in generated_index()}
    folders = verified_with()
    for model, family in sorted(prime_map().items()):
        module = PRIME_FAMILIES.get(family, (None,))[0]
        if module is None:
            continue
        listed = [entry.family for entry in generated_index() if model in entry.model_ids]
        expected = SERVED_BY.get(listed[0], listed[0]) if listed else module  # (one renderer serves gpt-oss)
        assert outcome_without_tokenizer(model) == expected, model
        folder = folders[expected]
        if folder is not None:  # and with the tokenizer the renderer was verified with, template-less
            tok = tokenizer(str(folder.relative_to((CORPUS / "tokenizers").resolve())), name=model)
            assert outcome(tok) == ("generated", expected), model
        checked += 1
    assert checked >= 25 and modules


def outcome_without_tokenizer(model: str) -> str:
    resolution = resolve(model, None)
    assert resolution.source == "generated"
    return resolution.name


def test_prime_s_renderer_for_an_exact_model_beats_a_tokenizer_match_whatever_the_spelling():
    prime_map()  # skips without the extra
    # Qwen3.6 ships another template on the tokenizer qwen3_5 was verified with
    assert outcome(tokenizer("qwen35"), "/models/Qwen/Qwen3.6-35B-A3B") == ("prime", "qwen3.6")


def test_reading_prime_s_model_map_does_not_import_renderers():
    prime_map()  # skips without the extra (then there is nothing to import)
    code = (
        "import sys\n"
        "from rllm_renderers import resolve\n"
        "from rllm_renderers.encoding.loading import load_tokenizer\n"
        f"tok = load_tokenizer({str(corpus_path('dsv4'))!r})\n"
        "print(resolve('deepseek-ai/DeepSeek-V4-Flash-0731', tok).name, 'renderers' in sys.modules)\n"
    )
    result = fresh_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["deepseek_v4", "False"]  # its map read as a literal: 40 ms, not a 2 s import


# --- create_renderer: PrimeIntellect's factory shape -------------------------------------------


def with_template(folder: str, template: str, *, name: str):
    tok = tokenizer(folder, name=name)
    tok.chat_template = (CORPUS / "templates" / template).read_text(encoding="utf-8")
    return tok


def test_create_renderer_as_the_gateway_calls_it():
    # server.py: `from renderers import create_renderer; create_renderer(tokenizer, renderer=config.renderer_family)`
    tok = with_template("qwen3", "Qwen__Qwen3-8B.jinja", name="/srv/models/served-checkpoint")
    renderer = create_renderer(tok, renderer="auto")
    assert type(renderer).__name__ == "Qwen3Renderer"
    prompt = renderer.render_ids(HELLO, add_generation_prompt=True)
    assert prompt == list(tok.apply_chat_template(HELLO, add_generation_prompt=True, tokenize=True, return_dict=False))
    assert callable(renderer.bridge_to_next_turn)
    assert type(create_renderer(tok)).__name__ == "Qwen3Renderer"  # "auto" is the default


@pytest.mark.parametrize(
    "family, folder, class_name",
    [
        ("qwen3", "qwen3", "Qwen3Renderer"),
        ("qwen3.5", "qwen35", "Qwen35Renderer"),
        ("deepseek-v3", "dsv3", "DeepseekV3Renderer"),
        ("deepseek-v4", "dsv4", "DeepseekV4Renderer"),
        ("llama-3", "llama31", "Llama32Renderer"),
        ("gpt-oss", "gptoss", "GptOssHarmonyRenderer"),
        ("qwen3_coder", "qwen3", "Qwen3CoderRenderer"),  # a module name
        ("generated:llama_3_1", "llama31", "Llama31Renderer"),
    ],
)
def test_create_renderer_takes_prime_family_and_module_names(family, folder, class_name):
    renderer = create_renderer(tokenizer(folder, name="/tmp/anything"), renderer=family)
    assert type(renderer).__name__ == class_name


def test_create_renderer_reaches_prime_s_own_renderer_by_prefix():
    prime_map()  # skips without the extra
    renderer = create_renderer(tokenizer("qwen3", name="Qwen/Qwen3-8B"), renderer="prime:qwen3")
    assert type(renderer).__name__ == "PrimeAdapter"


def test_an_unknown_family_is_a_clear_error():
    with pytest.raises(ResolutionError, match="names no generated renderer"):
        create_renderer(tokenizer("qwen3"), renderer="no-such-family")
    with pytest.raises(TypeError, match="needs a tokenizer"):
        create_renderer(None)


def test_knobs_and_retention_reach_the_renderer():
    tok = tokenizer("qwen3", name="Qwen/Qwen3-8B")
    renderer = create_renderer(tok, renderer="qwen3", enable_thinking=False, thinking_retention="verbatim")
    assert renderer.knob_values == {"enable_thinking": False}
    assert renderer.thinking_retention == "verbatim"
    assert renderer.render_text(HELLO, add_generation_prompt=True).endswith("<think>\n\n</think>\n\n")
    resolution = resolve("Qwen/Qwen3-8B", tok, enable_thinking=False, thinking_retention="verbatim")
    assert resolution.renderer.knob_values == {"enable_thinking": False}
    assert resolution.renderer.thinking_retention == "verbatim"
    # PrimeIntellect's keyword for the same knobs
    renderer = create_renderer(tok, chat_template_kwargs={"enable_thinking": False})
    assert renderer.knob_values == {"enable_thinking": False} and renderer.thinking_retention == "template"


def test_bad_knobs_and_retention_are_clear_errors():
    tok = tokenizer("qwen3", name="Qwen/Qwen3-8B")
    with pytest.raises(ValueError, match="'enable_thinking' is given twice"):
        resolve("Qwen/Qwen3-8B", tok, enable_thinking=True, chat_template_kwargs={"enable_thinking": False})
    with pytest.raises(ValueError, match="unknown template knob 'no_such_knob'"):
        create_renderer(tok, no_such_knob=1)
    with pytest.raises(ValueError, match="thinking_retention must be one of"):
        create_renderer(tok, thinking_retention="all")
    # only generated renderers keep sampled reasoning
    fallback = with_template("qwen3", "Qwen__Qwen3-8B.jinja", name="acme/unknown")
    fallback.chat_template += "\n"
    with pytest.raises(ValueError, match="needs a generated renderer"):
        resolve("acme/unknown", fallback, thinking_retention="verbatim")
    assert resolve("acme/unknown", fallback, thinking_retention="template").source == "chat_template"


# --- the compiler writes the fingerprints ------------------------------------------------------

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_generate_records_the_fingerprint_and_keeps_the_others(tmp_path):
    from compiler.cli import main
    from compiler.emit import BLACK_MODE
    from compiler.index import index_is_current, recorded_fingerprints

    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    out = tmp_path / "out"
    qwen3 = str(corpus_path("qwen3"))
    assert main(["generate", "--model", "test/chatml", "--template", str(template), "--tokenizer", qwen3,
                 "--out", str(out), "--cases", "10", "--name", "with_tokenizer"]) == 0  # fmt: skip
    assert recorded_fingerprints(out) == {"with_tokenizer": tokenizer_fingerprint(_loaded("qwen3"))}
    # a second renderer, compiled from the template alone: none for it, the first one's kept
    assert main(["generate", "--model", "test/chatml2", "--template", str(template), "--out", str(out),
                 "--cases", "10", "--name", "template_only", "--offline"]) == 0  # fmt: skip
    assert recorded_fingerprints(out) == {"with_tokenizer": tokenizer_fingerprint(_loaded("qwen3"))}
    assert index_is_current(out, BLACK_MODE)
    # check recomputes them: a fingerprint that is not the tokenizer's makes the index stale
    assert not index_is_current(out, BLACK_MODE, {"with_tokenizer": "0" * 64})
    assert not index_is_current(out, BLACK_MODE, {"template_only": tokenizer_fingerprint(_loaded("qwen3"))})
    assert index_is_current(out, BLACK_MODE, {"with_tokenizer": tokenizer_fingerprint(_loaded("qwen3"))})

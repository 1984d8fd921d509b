"""The Fireworks branch of ``resolve()``, for real: the cookbook's ``training.renderer`` package on
``sys.path`` (from ``$RLLM_ORACLES``, default ``../shared/oracles``), its renderers behind the tinker
adapter, checked against the shared golden renders; and the generated DeepSeek-V4 / MiniMax-M3
renderers preferred over Fireworks' own when both are there.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.families import CORPUS, REPO, load_corpus_tokenizer

ORACLES = Path(os.environ.get("RLLM_ORACLES", REPO.parent / "shared" / "oracles"))


@pytest.fixture(scope="module")
def fireworks_importable():
    folder = ORACLES / "fireworks-cookbook"
    if not (folder / "training" / "renderer").is_dir():
        pytest.skip(f"Fireworks cookbook not found under {ORACLES} (set RLLM_ORACLES)")
    pytest.importorskip("tinker_cookbook", reason="the tinker extra (tinker-cookbook --no-deps) is not installed")
    sys.path.insert(0, str(folder))
    try:
        import training.renderer  # noqa: F401 - registers Fireworks' renderers with tinker
    except ImportError as exc:
        sys.path.remove(str(folder))
        pytest.skip(f"training.renderer does not import here: {exc}")
    yield
    sys.path.remove(str(folder))


def golden(family: str, case_id: str, variant: str) -> tuple[dict, str]:
    conversations = {
        line["id"]: line
        for line in map(json.loads, (CORPUS / "golden" / "conversations.jsonl").read_text(encoding="utf-8").splitlines())
    }
    for line in map(json.loads, (CORPUS / "golden" / f"{family}.jsonl").read_text(encoding="utf-8").splitlines()):
        if line["case_id"] == case_id and line["renderer_variant"] == variant:
            return conversations[case_id], line["text"]
    raise LookupError(f"no golden {family} line for {case_id}/{variant}")


def test_an_explicit_fireworks_renderer_resolves_and_renders_its_golden_text(fireworks_importable):
    from rllm_renderers import resolve

    tokenizer = load_corpus_tokenizer("synthetic/glm5")
    resolution = resolve("zai-org/GLM-5", tokenizer, renderer="fireworks:glm5")
    assert resolution.source == "tinker" and resolution.name == "glm5"
    case, text = golden("glm5", "case-00", "glm5")
    ids = resolution.renderer.render_ids(case["messages"], add_generation_prompt=True)
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_a_renderer_only_fireworks_registers_resolves_by_name(fireworks_importable):
    """kimi_k27_code exists only in Fireworks' cookbook (registered when training.renderer imports)."""
    from rllm_renderers import resolve

    tokenizer = load_corpus_tokenizer("synthetic/kimi_k27_code")
    resolution = resolve("moonshotai/Kimi-K2.7-Code", tokenizer, renderer="fireworks:kimi_k27_code")
    assert resolution.source == "tinker"
    case, text = golden("kimi_k27_code", "case-00", "kimi_k27_code")
    ids = resolution.renderer.render_ids(case["messages"], add_generation_prompt=True)
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


@pytest.mark.parametrize(
    "model, tokenizer_folder, fireworks_name, expected",
    [
        ("MiniMaxAI/MiniMax-M3", "synthetic/minimax_m3", "minimax_m3", "MinimaxM3Renderer"),
        ("deepseek-ai/DeepSeek-V4-Flash", "dsv4", "deepseek_v4", "DeepseekV4Renderer"),
        ("deepseek-ai/DeepSeek-V4-Pro", "dsv4", "deepseek_v4", "DeepseekV4Renderer"),
    ],
)
def test_generated_renderers_win_over_fireworks_ones(fireworks_importable, model, tokenizer_folder, fireworks_name, expected):
    """With Fireworks' renderer for the same model importable, resolution by model picks ours; the
    Fireworks one stays reachable by name and renders the same prompt for a plain chat."""
    from rllm_renderers import resolve

    tokenizer = load_corpus_tokenizer(tokenizer_folder)
    ours = resolve(model, tokenizer)
    assert (ours.source, type(ours.renderer).__name__) == ("generated", expected)
    theirs = resolve(model, tokenizer, renderer=f"fireworks:{fireworks_name}")
    assert theirs.source == "tinker"
    chat = [{"role": "user", "content": "Hello! What's the capital of France?"}]
    assert ours.renderer.render_ids(chat, add_generation_prompt=True) == theirs.renderer.render_ids(
        chat, add_generation_prompt=True
    )

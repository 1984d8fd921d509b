"""The checked-in renderers and the corpus files they were compiled from (shared by the tests)."""

from __future__ import annotations

import functools
import importlib
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("RLLM_CORPUS", REPO.parent / "shared" / "corpus"))


@dataclass(frozen=True)
class Family:
    module: str
    class_name: str
    model_id: str
    template_file: str
    tokenizer: str
    override: bool = False  # the template is ours: templates_overrides/<model_id>.jinja
    synthetic: bool = False  # the corpus has no tokenizer for it: the compiler's synthetic one

    @property
    def renderer_class(self) -> type:
        return getattr(importlib.import_module(f"rllm_renderers.generated.{self.module}"), self.class_name)

    def template_source(self) -> str:
        if self.override:
            return (REPO / "templates_overrides" / f"{self.model_id}.jinja").read_text(encoding="utf-8")
        return corpus_path("templates", self.template_file).read_text(encoding="utf-8")

    def load_tokenizer(self):
        if self.synthetic:
            return _synthetic_tokenizer(self.model_id)
        return load_corpus_tokenizer(self.tokenizer)


FAMILIES = [
    Family("qwen3", "Qwen3Renderer", "Qwen/Qwen3-8B", "Qwen__Qwen3-8B.jinja", "qwen3"),
    Family("qwen2_5", "Qwen25Renderer", "Qwen/Qwen2.5-7B-Instruct", "Qwen__Qwen2.5-7B-Instruct.jinja", "qwen25"),
    Family("qwen3_5", "Qwen35Renderer", "Qwen/Qwen3.5-4B", "Qwen__Qwen3.5-4B.jinja", "qwen35"),
    # the corpus pairs Qwen3-Coder with the Qwen3 tokenizer ("assumed-same-vocab")
    Family(
        "qwen3_coder",
        "Qwen3CoderRenderer",
        "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "Qwen__Qwen3-Coder-30B-A3B-Instruct.jinja",
        "qwen3",
    ),
    Family("deepseek_v3", "DeepseekV3Renderer", "deepseek-ai/DeepSeek-V3", "deepseek-ai__DeepSeek-V3.jinja", "dsv3"),
    Family(
        "llama_3_1", "Llama31Renderer", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama__Llama-3.1-8B-Instruct.jinja", "llama31"
    ),
    Family(
        "llama_3_2", "Llama32Renderer", "meta-llama/Llama-3.2-3B-Instruct", "meta-llama__Llama-3.2-3B-Instruct.jinja", "llama31"
    ),
    Family("gemma_3", "Gemma3Renderer", "google/gemma-3-27b-it", "google__gemma-3-27b-it.jinja", "gemma3"),
    Family("gpt_oss", "GptOssRenderer", "openai/gpt-oss-20b", "openai__gpt-oss-20b.jinja", "gptoss"),
    # our own: gpt-oss exactly as openai-harmony renders it, beside the HF template's renderer
    Family(
        "gpt_oss_harmony", "GptOssHarmonyRenderer", "openai/gpt-oss-harmony", "gpt-oss-harmony.jinja", "gptoss", override=True
    ),
    # our own template; the corpus has only a synthetic tokenizer for it (structural token checks)
    Family(
        "minimax_m3", "MinimaxM3Renderer", "MiniMaxAI/MiniMax-M3", "MiniMax-M3.jinja", "synthetic/minimax_m3", override=True
    ),
    # no upstream template: ours, written from DeepSeek's official encoder (the oracle it is verified against)
    Family(
        "deepseek_v4", "DeepseekV4Renderer", "deepseek-ai/DeepSeek-V4-Flash", "DeepSeek-V4-Flash.jinja", "dsv4", override=True
    ),
]

FAMILY_IDS = [family.module for family in FAMILIES]


def corpus_path(*parts: str) -> Path:
    path = CORPUS.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"test corpus not found: {path} (set RLLM_CORPUS to the corpus folder)")
    return path


@functools.lru_cache(maxsize=None)
def _load(folder: str):
    from rllm_renderers.encoding.loading import load_tokenizer

    return load_tokenizer(folder)


def load_corpus_tokenizer(name: str):
    return _load(str(corpus_path("tokenizers", name)))


@functools.lru_cache(maxsize=None)
def _synthetic_tokenizer(model_id: str):
    """The tokenizer the compiler checks a tokenizer-less template with: byte-level, no merges, the
    template's special strings (and placeholder special-token values) as added tokens."""
    from compiler.pipeline import prepare_source
    from compiler.source import resolve_source

    corpus_path("templates")
    return prepare_source(resolve_source(model_id, corpus=CORPUS, allow_hub=False)).check_tokenizer


def _other_generated_families() -> list[Family]:
    """The checked-in renderers not in FAMILIES, each with the corpus template it was compiled from
    and the corpus tokenizer named beside it (else the synthetic one)."""
    import csv

    from rllm_renderers.generated._index import RENDERERS

    manifest = CORPUS / "templates" / "MANIFEST.tsv"
    if not manifest.exists():
        return []
    with manifest.open(encoding="utf-8") as handle:
        rows = {row["model_id"]: row for row in csv.DictReader(handle, delimiter="\t")}
    known = {family.module for family in FAMILIES}
    families = []
    for module, (class_name, _, model_ids) in sorted(RENDERERS.items()):
        row = rows.get(model_ids[0])
        if module in known or row is None:
            continue
        tokenizer = row.get("tokenizer") or "-"
        families.append(Family(module, class_name, model_ids[0], row["file"], tokenizer, synthetic=tokenizer == "-"))
    return families


#: Every checked-in renderer: FAMILIES, then the other corpus templates (most with synthetic tokenizers).
ALL_FAMILIES = FAMILIES + _other_generated_families()
ALL_FAMILY_IDS = [family.module for family in ALL_FAMILIES]


def with_gaps(gaps: dict[str, str]) -> list:
    """ALL_FAMILIES as pytest params; a family named in ``gaps`` (module -> why) is a strict xfail,
    which fails the day its gap closes."""
    return [
        pytest.param(
            family,
            id=family.module,
            marks=[pytest.mark.xfail(strict=True, reason=gaps[family.module])] if family.module in gaps else [],
        )
        for family in ALL_FAMILIES
    ]


#: Templates that never render an assistant turn as the continuation of their generation prompt
#: (it opens a reasoning block that history turns do not have): no completion can be read off them.
NO_SAMPLED_TURN = {
    "qwq": "the generation prompt ends with '<think>\n', history turns have no reasoning block",
    "deepseek_r1_distill_qwen": "the generation prompt ends with '<think>\n', history turns have no reasoning block",
}


def assert_turns_checked(family, checked: int, none_expected: dict[str, str] = NO_SAMPLED_TURN) -> None:
    """A turn-level property test proves nothing when no turn was checked: it must check some, except
    for the templates in ``none_expected`` (module -> why), which must check none."""
    if family.module in none_expected:
        assert checked == 0, f"{family.module}: {checked} turns checked; the expectation of none is stale"
        pytest.skip(f"{family.module}: {none_expected[family.module]}")
    assert checked > 0, f"{family.module}: no turn was checked"

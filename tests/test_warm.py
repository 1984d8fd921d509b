"""A constructed renderer has built what its first render, parse and bridge need (``renderer.warm()``):
afterwards none of them builds an encoder, an engine, a proof, a backend copy or a byte table."""

from __future__ import annotations

import pickle

import pytest

from rllm_renderers.encoding import detokenize
from rllm_renderers.encoding import fast_encoder
from rllm_renderers.encoding import tokenization
from tests.families import FAMILIES

FAMILY = {family.module: family for family in FAMILIES}
MESSAGES = [
    {"role": "system", "content": "You are a careful assistant. Café, naïve, 中文."},
    {"role": "user", "content": "What is in setup.py? Answer in one sentence."},
]


def _forbid_building(monkeypatch) -> None:
    def built(*args, **kwargs):
        raise AssertionError("built after warm()")

    for owner, name in [(tokenization.TextEncoder, "__init__"), (tokenization, "_private_copy"), (tokenization, "_json_copy"),
                        (fast_encoder, "_prove"), (fast_encoder, "_build"), (detokenize.Detokenizer, "__init__")]:  # fmt: skip
        monkeypatch.setattr(owner, name, built)


def _use(renderer, tokenizer) -> None:
    prompt = renderer.render_ids(MESSAGES, add_generation_prompt=True)
    renderer.render(MESSAGES, add_generation_prompt=True)  # with attribution: token offsets
    completion = tokenizer.encode("It holds the build settings.", add_special_tokens=False) + renderer.get_stop_token_ids()[:1]
    renderer.parse_response(completion)
    assert renderer.bridge_to_next_turn(prompt, completion, [{"role": "user", "content": "And README.md?"}]) is not None


@pytest.mark.parametrize("backend", ["auto", "hf", "fastokens"])
@pytest.mark.parametrize("module", ["qwen3", "gemma_3"])
def test_nothing_is_built_after_construction(module, backend, monkeypatch):
    monkeypatch.setenv("RLLM_RENDERERS_ENCODER", backend)
    family = FAMILY[module]
    tokenizer = family.load_tokenizer()
    renderer = family.renderer_class(tokenizer)
    safe = family.renderer_class(tokenizer, control_token_safe=True)  # plain ranges: another backend copy
    copied = pickle.loads(pickle.dumps(renderer))  # an unpickled renderer warms itself too
    _forbid_building(monkeypatch)
    for each in (renderer, safe, copied):
        assert each.warm() is each  # nothing left to build: a second call builds nothing either
        _use(each, each.tokenizer)


def test_without_a_tokenizer_there_is_nothing_to_warm():
    renderer = FAMILY["qwen3"].renderer_class()
    assert renderer.warm() is renderer
    assert renderer.render_text(MESSAGES)

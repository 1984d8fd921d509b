"""The background upgrade of an "auto" encoder from tiktoken to fastokens
(rllm_renderers/encoding/engine_upgrade.py): when it is asked for, that the switch keeps the ids, the
setting, and a forked child.  The differential tests of every corpus tokenizer run the switched
encoder too (tests/test_fast_encoder.py, ``switched``)."""

from __future__ import annotations

import json
import os

import pytest

from rllm_renderers.encoding import fast_encoder
from rllm_renderers.encoding.loading import load_tokenizer
from rllm_renderers.encoding.tokenization import TextEncoder, check_encoder_settings
from tests.families import CORPUS

TEXT = "<|user|>Hello, ünïcode 中文 and code: def f(x): return x  # done\n\n<|assistant|>"


@pytest.fixture
def tokenizer(monkeypatch, tmp_path):
    monkeypatch.setenv("RLLM_RENDERERS_CACHE", str(tmp_path))
    fast_encoder.forget()  # a process that has built no engine yet
    yield load_tokenizer(CORPUS / "tokenizers" / "synthetic" / "glm5")
    fast_encoder.forget()


def want(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def test_fastokens_is_asked_for_after_the_threshold_and_taken_when_built(tokenizer, monkeypatch):
    monkeypatch.setenv("RLLM_RENDERERS_UPGRADE_AFTER", str(3 * len(TEXT)))
    encoder = TextEncoder(tokenizer)
    assert encoder.backend == "tiktoken"
    for _ in range(2):  # below the threshold: nothing asked for
        assert encoder.encode(TEXT) == want(tokenizer, TEXT)
    assert encoder._upgrade is None
    assert encoder.encode(TEXT) == want(tokenizer, TEXT)  # the threshold reached: asked for
    assert encoder._upgrade is not None and encoder._upgrade.wait(120)
    assert encoder.backend == "tiktoken"  # taken at the next encode, not behind the caller's back
    assert encoder.encode(TEXT) == want(tokenizer, TEXT)
    assert encoder.backend == "fastokens" and encoder._cut is not None
    assert encoder.encode_with_offsets(TEXT)[0] == encoder.encode_many([TEXT])[0] == want(tokenizer, TEXT)
    assert TextEncoder(tokenizer).backend == "fastokens"  # the process has it now


def test_never_and_forced_engines_stay(tokenizer, monkeypatch):
    monkeypatch.setenv("RLLM_RENDERERS_UPGRADE_AFTER", "never")
    encoder = TextEncoder(tokenizer)
    assert encoder.upgrade(wait=True) == "tiktoken" and encoder.encode(TEXT) == want(tokenizer, TEXT)
    monkeypatch.setenv("RLLM_RENDERERS_UPGRADE_AFTER", "0")
    forced = TextEncoder(tokenizer, backend="tiktoken")
    assert forced.upgrade(wait=True) == "tiktoken" and forced._upgrade is None


@pytest.mark.parametrize("value", ["-1", "1e6", "soon"])
def test_a_bad_setting_is_named_up_front(monkeypatch, value):
    monkeypatch.setenv("RLLM_RENDERERS_UPGRADE_AFTER", value)
    with pytest.raises(ValueError, match="RLLM_RENDERERS_UPGRADE_AFTER must be a number of characters or 'never'"):
        check_encoder_settings()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_goes_back_to_tiktoken_and_asks_again(tokenizer):
    encoder = TextEncoder(tokenizer)
    assert encoder.upgrade(wait=True) == "fastokens"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: tiktoken at once, fastokens again in the background, same ids throughout
        try:
            first = encoder.encode(TEXT)
            backend = encoder.backend
            encoder._upgrade.wait(120)
            second = encoder.encode(TEXT)
            os.write(write, json.dumps([first, backend, second, encoder.backend]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        first, backend, second, after = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert (backend, after) == ("tiktoken", "fastokens")
    assert first == second == want(tokenizer, TEXT)

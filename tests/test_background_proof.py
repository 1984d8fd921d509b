"""A tokenizer new to this machine is proved in a background process: no renderer waits for the
rank-BPE proof, the HF backend (exact) serves meanwhile, and the fast engine once the verdict is
written (:mod:`rllm_renderers.encoding.background_proof`)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from rllm_renderers.core.registry import resolve
from rllm_renderers.encoding import background_proof, fast_encoder, proof_cache
from rllm_renderers.encoding.fast_encoder import span_bpe_for
from rllm_renderers.encoding.tokenization import TextEncoder
from tests.families import FAMILIES, corpus_path
from tests.test_proof_cache import TEXT, _marker, _tokenizer, _want


@pytest.fixture(autouse=True)
def _background(tmp_path, monkeypatch):
    """A new process on a new machine: an empty cache folder, proofs in the background."""
    monkeypatch.setenv("RLLM_RENDERERS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RLLM_RENDERERS_PROOF", "background")
    monkeypatch.delenv("RLLM_RENDERERS_ENCODER", raising=False)
    monkeypatch.setattr(background_proof, "INLINE_BELOW_CHARACTERS", 0)  # the tiny test tokenizers too
    fast_encoder.forget()
    proof_cache._logged.clear()
    yield
    for process in background_proof._started:
        process.wait(timeout=120)
    background_proof._started.clear()
    fast_encoder.forget()


def _no_proof_here(monkeypatch):
    """Proving in this process fails the test (the background process is another one)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the proof ran in the renderer's own process")

    monkeypatch.setattr(fast_encoder, "prove_and_remember", refuse)


def _wait_for_the_background_proof():
    assert len(background_proof._started) == 1, "exactly one background proof per tokenizer content"
    assert background_proof._started[0].wait(timeout=120) == 0


def test_a_new_tokenizer_does_not_wait_for_its_proof_and_gets_the_fast_engine_once_proved(monkeypatch):
    tokenizer = _tokenizer("ab", "xy")
    _no_proof_here(monkeypatch)
    encoder, why = span_bpe_for(tokenizer, inline=False)
    assert encoder is None and "background process" in why
    assert span_bpe_for(tokenizer, inline=False)[0] is None  # asked again meanwhile: still one process
    _wait_for_the_background_proof()
    marker = _marker(tokenizer)
    assert marker.exists()
    assert not background_proof.job_of(marker).exists(), "the tokenizer JSON handed over is removed"
    assert not marker.with_name(marker.name + ".proving").exists(), "the lock is released"
    encoder, _ = span_bpe_for(tokenizer, inline=False)
    assert encoder is not None and encoder.encode(TEXT) == _want(tokenizer)


def test_a_renderer_encodes_exactly_with_hf_until_the_verdict_then_with_tiktoken(monkeypatch):
    from transformers import AutoTokenizer

    # a tokenizer object of its own: encoders are cached on it
    tokenizer = AutoTokenizer.from_pretrained(str(corpus_path("tokenizers", "qwen3")), local_files_only=True)
    family = next(family for family in FAMILIES if family.module == "qwen3")
    messages = [{"role": "user", "content": "Héllo, what's 2+2?\n\n  Spaces   and tabs\t."}]
    want = tokenizer.apply_chat_template(
        messages, chat_template=family.template_source(), add_generation_prompt=True, tokenize=True, return_dict=False
    )
    _no_proof_here(monkeypatch)
    renderer = resolve(family.model_id, tokenizer).renderer
    assert renderer.encoder.backend == "hf" and "background process" in renderer.encoder.backend_reason
    assert renderer.render_ids(messages, add_generation_prompt=True) == want
    _wait_for_the_background_proof()
    assert renderer.encoder.backend == "tiktoken", renderer.encoder.backend_reason  # the same renderer
    assert renderer.render_ids(messages, add_generation_prompt=True) == want


def test_a_background_proof_that_died_is_proved_in_the_next_process():
    tokenizer = _tokenizer("ab", "xy")
    marker = _marker(tokenizer)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = marker.with_name(marker.name + ".proving")
    lock.parent.mkdir(parents=True)
    lock.write_text(dead.stdout.strip())  # its process is gone and it wrote no verdict
    encoder, _ = span_bpe_for(tokenizer, inline=False)
    assert encoder is not None and encoder.encode(TEXT) == _want(tokenizer)
    assert background_proof._started == [] and not lock.exists()


def test_the_background_process_checks_the_json_it_is_handed(tmp_path):
    tokenizer = _tokenizer("ab", "xy")
    marker = _marker(tokenizer)
    marker.parent.mkdir(parents=True)
    content = hashlib.sha256(tokenizer.to_str().encode()).hexdigest()
    facts = {"content": content, "version": fast_encoder.PROOF_VERSION}
    background_proof.job_of(marker).write_text(_tokenizer("xy", "ab").to_str())  # another tokenizer
    from rllm_renderers.encoding import proof_worker

    assert proof_worker.main([str(marker), json.dumps(facts)]) == 1
    assert not marker.exists()


def test_an_engine_asked_for_by_name_is_proved_inline(monkeypatch):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(corpus_path("tokenizers", "qwen3")), local_files_only=True)
    monkeypatch.setenv("RLLM_RENDERERS_ENCODER", "tiktoken")
    assert TextEncoder(tokenizer).backend == "tiktoken"
    assert background_proof._started == []


def test_an_unknown_proof_mode_fails_at_resolve(monkeypatch):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(corpus_path("tokenizers", "qwen3")), local_files_only=True)
    monkeypatch.setenv("RLLM_RENDERERS_PROOF", "later")
    with pytest.raises(ValueError, match="RLLM_RENDERERS_PROOF.*'later'"):
        resolve("Qwen/Qwen3-8B", tokenizer)


def test_a_small_tokenizer_is_proved_inline_where_that_is_cheaper_than_a_process(monkeypatch):
    tokenizer = _tokenizer("ab", "xy")
    monkeypatch.setattr(background_proof, "INLINE_BELOW_CHARACTERS", len(tokenizer.to_str()) + 1)
    encoder, _ = span_bpe_for(tokenizer, inline=False)
    assert encoder is not None and encoder.encode(TEXT) == _want(tokenizer)
    assert background_proof._started == []


# --- nothing planted in the cache or the working folder steers the background proof ---------------


def test_links_planted_at_the_job_log_and_lock_change_nothing(tmp_path, monkeypatch):
    """Links planted in advance at the names the background proof uses: the job and the log point at
    files outside the cache, the lock dangles (it once turned the fast engine off for good)."""
    tokenizer = _tokenizer("ab", "xy")
    marker = _marker(tokenizer)
    marker.parent.mkdir(parents=True, mode=0o700)
    outside = {name: tmp_path / f"outside-{name}" for name in ("job", "log")}
    for path in outside.values():
        path.write_text("precious\n")
    background_proof.job_of(marker).symlink_to(outside["job"])
    marker.with_name(marker.name + ".log").symlink_to(outside["log"])
    marker.with_name(marker.name + ".proving").symlink_to(tmp_path / "nowhere")
    _no_proof_here(monkeypatch)
    encoder, why = span_bpe_for(tokenizer, inline=False)
    assert encoder is None and "background process" in why
    _wait_for_the_background_proof()
    assert all(path.read_text() == "precious\n" for path in outside.values())
    assert not (tmp_path / "nowhere").exists()
    encoder, _ = span_bpe_for(tokenizer, inline=False)
    assert encoder is not None and encoder.encode(TEXT) == _want(tokenizer)


def test_the_background_process_imports_nothing_from_the_callers_folder(tmp_path, monkeypatch):
    """A ``json.py`` where the caller runs (and on its PYTHONPATH) would run inside a worker started as
    ``python -m`` there; the worker runs isolated (``python -I``) in the cache folder."""
    working = tmp_path / "scratch"
    working.mkdir()
    ran = tmp_path / "json.py ran"
    (working / "json.py").write_text(f"open({str(ran)!r}, 'w').close()\nfrom _json import *\n")
    monkeypatch.chdir(working)
    monkeypatch.setenv("PYTHONPATH", str(working))
    tokenizer = _tokenizer("ab", "xy")
    _no_proof_here(monkeypatch)
    span_bpe_for(tokenizer, inline=False)
    _wait_for_the_background_proof()
    assert not ran.exists()
    encoder, _ = span_bpe_for(tokenizer, inline=False)
    assert encoder is not None and encoder.encode(TEXT) == _want(tokenizer)

"""The on-disk proof cache is checked before it is trusted, written safely, and kept in an absolute
folder; an engine that panics hands over to the HF backend (:mod:`rllm_renderers.encoding.proof_cache`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from rllm_renderers.encoding import fast_encoder
from rllm_renderers.encoding import proof_cache
from rllm_renderers.encoding.fast_encoder import EnginePanic, rank_bpe_plan
from rllm_renderers.encoding.tokenization import TextEncoder
from tests.test_fast_encoder import _bpe_json, _byte_vocab, _with

TEXT = "abxy ab xy xyab abab"


class PanicException(BaseException):
    """What PyO3 raises for a Rust panic (``pyo3_runtime.PanicException``): not an ``Exception``."""


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    """Every test starts as a new process would, with its own cache folder."""
    monkeypatch.setenv("RLLM_RENDERERS_CACHE", str(tmp_path / "cache"))
    fast_encoder.forget()
    proof_cache._logged.clear()
    yield
    fast_encoder.forget()


def _tokenizer(*tokens: str) -> Tokenizer:
    vocab = _with(_byte_vocab(), *tokens)
    merges = [(token[: len(token) // 2], token[len(token) // 2 :]) for token in tokens]
    return Tokenizer.from_str(json.dumps(_bpe_json(vocab, merges)))


def _marker(tokenizer: Tokenizer) -> Path:
    return fast_encoder._proof_marker(hashlib.sha256(tokenizer.to_str().encode()).hexdigest())


def _want(tokenizer: Tokenizer, text: str = TEXT) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def test_an_edited_marker_is_a_miss_never_wrong_ids(caplog):
    tokenizer = _tokenizer("ab", "xy")
    assert rank_bpe_plan(tokenizer)[0].encode(TEXT) == _want(tokenizer)
    marker = _marker(tokenizer)
    magic, digest, header, body = marker.read_text().split("\n", 3)
    ranks = fast_encoder._ranks_from_text(body)
    ranks[b"ab"], ranks[b"xy"] = ranks[b"xy"], ranks[b"ab"]  # still a valid table: wrong ids if trusted
    marker.write_text("\n".join([magic, digest, header, fast_encoder._ranks_as_text(ranks)]))
    fast_encoder.forget()
    with caplog.at_level(logging.WARNING, logger="rllm_renderers.encoding.proof_cache"):
        plan = rank_bpe_plan(tokenizer)[0]
        fast_encoder.forget()
        rank_bpe_plan(tokenizer)  # the rewritten marker is intact: no second miss
    assert plan.encode(TEXT) == _want(tokenizer)
    assert [record.message for record in caplog.records if "signature" in record.message] != []
    assert len(caplog.records) == 1, [record.message for record in caplog.records]


def test_a_marker_of_another_tokenizer_is_a_miss(caplog):
    first, second = _tokenizer("ab", "xy"), _tokenizer("xy", "ab")  # the same tokens, other ids
    rank_bpe_plan(first)
    rank_bpe_plan(second)
    _marker(second).write_bytes(_marker(first).read_bytes())  # intact, but it proves the other one
    fast_encoder.forget()
    with caplog.at_level(logging.WARNING, logger="rllm_renderers.encoding.proof_cache"):
        plan = rank_bpe_plan(second)[0]
    assert plan.encode(TEXT) == _want(second) != _want(first)
    assert any("proves something else" in record.message for record in caplog.records)


def test_a_damaged_marker_is_a_miss():
    tokenizer = _tokenizer("ab", "xy")
    rank_bpe_plan(tokenizer)
    marker = _marker(tokenizer)
    data = marker.read_bytes()
    for damaged in (data[: len(data) // 2], data.replace(b"proved", b"proven"), b"", b"\x00" * 64):
        marker.write_bytes(damaged)
        fast_encoder.forget()
        assert rank_bpe_plan(tokenizer)[0].encode(TEXT) == _want(tokenizer)


def test_an_engine_panic_while_building_hands_over_to_hf(monkeypatch):
    tokenizer = _tokenizer("ab", "xy")

    def panics(*args, **kwargs):
        raise PanicException("called `Option::unwrap()` on a `None` value")

    monkeypatch.setattr(fast_encoder, "RankBpe", panics)
    encoder = TextEncoder(tokenizer, backend="tiktoken")
    assert encoder.backend == "hf" and "tiktoken panicked" in encoder.backend_reason
    assert encoder.encode(TEXT) == _want(tokenizer)


def test_an_engine_panic_while_encoding_hands_over_to_hf(monkeypatch, caplog):
    tokenizer = _tokenizer("ab", "xy")
    encoder = TextEncoder(tokenizer, backend="tiktoken", span_cache_size=0)
    assert encoder.backend == "tiktoken"

    def panics(*args, **kwargs):
        raise PanicException("index out of bounds")

    monkeypatch.setattr(encoder._rank_bpe, "encode_many", panics)
    monkeypatch.setattr(encoder._rank_bpe, "encode", panics)
    with caplog.at_level(logging.WARNING, logger="rllm_renderers.encoding.tokenization"):
        assert encoder.encode(TEXT) == _want(tokenizer)
    assert encoder.backend == "hf" and "panicked" in encoder.backend_reason
    assert encoder.encode_with_offsets(TEXT)[0] == encoder.encode_many([TEXT])[0] == _want(tokenizer)
    assert sum("panicked" in record.message for record in caplog.records) == 1
    # Where the HF backend itself panics there is nothing to hand over to: a clear Exception.
    monkeypatch.setattr(encoder, "_hf_encode", panics)
    with pytest.raises(EnginePanic, match="index out of bounds"):
        encoder.encode(TEXT)


def test_the_temporary_file_never_follows_a_symbolic_link(tmp_path, monkeypatch):
    """Another user who can write to the cache folder plants links at the names a writer would use."""
    tokenizer = _tokenizer("ab", "xy")
    marker = _marker(tokenizer)
    marker.parent.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    monkeypatch.setattr(proof_cache.secrets, "token_hex", lambda n: "0" * (2 * n))
    for name in (f".{marker.name}.{'0' * 16}.tmp", f"{marker.name}.{os.getpid()}.{threading.get_ident()}.tmp"):
        (marker.parent / name).symlink_to(victim)
    assert rank_bpe_plan(tokenizer)[0].encode(TEXT) == _want(tokenizer)
    assert victim.read_text() == "precious\n"


def test_a_failed_rename_leaves_no_temporary_file(monkeypatch):
    tokenizer = _tokenizer("ab", "xy")

    def fails(*args):
        raise PermissionError("rename refused")

    monkeypatch.setattr(os, "replace", fails)
    assert rank_bpe_plan(tokenizer)[0].encode(TEXT) == _want(tokenizer)
    folder = _marker(tokenizer).parent
    assert [path.name for path in folder.iterdir()] == [".key"]  # the signing key, no temporary file


@pytest.mark.parametrize(
    "environment, expected",
    [
        ({"XDG_CACHE_HOME": "relative/cache", "HOME": "{home}"}, "{home}/.cache/rllm_renderers"),
        ({"XDG_CACHE_HOME": "{tmp}/xdg", "HOME": "{home}"}, "{tmp}/xdg/rllm_renderers"),
        ({"HOME": ""}, "{tmp}/temporary/rllm_renderers-{uid}"),
        ({"HOME": "relative/home"}, "{tmp}/temporary/rllm_renderers-{uid}"),
        ({"RLLM_RENDERERS_CACHE": "relative/proofs", "HOME": "{home}"}, "{home}/.cache/rllm_renderers"),
    ],
)
def test_the_cache_folder_is_never_relative(tmp_path, monkeypatch, environment, expected):
    fields = {"tmp": str(tmp_path), "home": str(tmp_path / "home"), "uid": str(os.getuid())}
    for name in ("RLLM_RENDERERS_CACHE", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value.format(**fields))
    (tmp_path / "temporary").mkdir()
    monkeypatch.setattr(proof_cache.tempfile, "tempdir", str(tmp_path / "temporary"))
    monkeypatch.chdir(tmp_path)
    marker = fast_encoder._proof_marker("0" * 64)
    assert marker.is_absolute()
    assert marker.parent.parent == Path(expected.format(**fields))


def test_a_temporary_folder_of_someone_else_is_not_used(tmp_path, monkeypatch):
    for name in ("RLLM_RENDERERS_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", "")
    monkeypatch.setattr(proof_cache.tempfile, "tempdir", str(tmp_path))
    shared = tmp_path / f"rllm_renderers-{os.getuid()}"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # anyone may write there: planted markers could be waiting
    assert fast_encoder._proof_marker("0" * 64) is None
    tokenizer = _tokenizer("ab", "xy")
    assert rank_bpe_plan(tokenizer)[0].encode(TEXT) == _want(tokenizer)  # proved, just not remembered
    assert list(shared.iterdir()) == []


# --- nobody else can steer ids through the cache ------------------------------------------------


def _swapped(tokenizer: Tokenizer) -> tuple[str, str, str]:
    """The marker of ``tokenizer`` with the ranks of two tokens swapped (a valid table: wrong ids if
    trusted): ``(magic, header, body)``."""
    magic, _, header, body = _marker(tokenizer).read_text().split("\n", 3)
    ranks = fast_encoder._ranks_from_text(body)
    ranks[b"ab"], ranks[b"xy"] = ranks[b"xy"], ranks[b"ab"]
    return magic, header, fast_encoder._ranks_as_text(ranks)


def test_a_forged_marker_is_a_miss(caplog):
    """The forger knows the marker's name and format and recomputes its digest, but not the key."""
    import hmac

    tokenizer = _tokenizer("ab", "xy")
    rank_bpe_plan(tokenizer)
    magic, header, body = _swapped(tokenizer)
    rest = (header + "\n" + body).encode()
    forged_digests = [
        "sha256:" + hashlib.sha256(rest).hexdigest(),  # the digest an unkeyed marker carried
        "hmac-sha256:" + hmac.new(b"\0" * 32, rest, hashlib.sha256).hexdigest(),  # another key
    ]
    for digest in forged_digests:
        _marker(tokenizer).write_text("\n".join([magic, digest, header, body]))
        fast_encoder.forget()
        assert rank_bpe_plan(tokenizer)[0].encode(TEXT) == _want(tokenizer)


def test_a_forged_marker_in_a_group_writable_folder_is_not_used(caplog):
    """A shared cache folder: the marker there may be anyone's, so it is not read (nor written), one
    warning says so, and the HF backend encodes."""
    tokenizer = _tokenizer("ab", "xy")
    rank_bpe_plan(tokenizer)
    marker = _marker(tokenizer)
    magic, header, body = _swapped(tokenizer)
    key = (marker.parent / ".key").read_bytes()  # even a marker signed with the right key
    import hmac

    rest = (header + "\n" + body).encode()
    marker.write_text("\n".join([magic, "hmac-sha256:" + hmac.new(key, rest, hashlib.sha256).hexdigest(), header, body]))
    fast_encoder.forget()
    assert rank_bpe_plan(tokenizer)[0].encode(TEXT) != _want(tokenizer)  # (so the forgery would steer ids)
    marker.parent.chmod(0o775)
    fast_encoder.forget()
    proof_cache._logged.clear()
    with caplog.at_level(logging.WARNING, logger="rllm_renderers.encoding.proof_cache"):
        for _ in range(3):
            encoder = TextEncoder(tokenizer, backend="auto")
            assert encoder.backend == "hf" and "written by other users" in encoder.backend_reason
            assert encoder.encode(TEXT) == _want(tokenizer)
    assert len(caplog.records) == 1, [record.message for record in caplog.records]


def test_a_marker_that_is_a_symbolic_link_is_not_followed(tmp_path):
    tokenizer = _tokenizer("ab", "xy")
    rank_bpe_plan(tokenizer)
    marker = _marker(tokenizer)
    elsewhere = tmp_path / "elsewhere"
    marker.rename(elsewhere)
    marker.symlink_to(elsewhere)
    assert proof_cache.read_marker(marker, {}) is None
    fast_encoder.forget()
    assert rank_bpe_plan(tokenizer)[0].encode(TEXT) == _want(tokenizer)
    assert not marker.is_symlink()  # replaced by a marker of its own, the link's target untouched

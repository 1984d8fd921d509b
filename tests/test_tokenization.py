"""Tests for rllm_renderers.encoding.tokenization (TextEncoder) and rllm_renderers.encoding.loading.

The property everywhere: ``TextEncoder.encode(s) == tokenizer.encode(s, add_special_tokens=False)``,
checked with hypothesis on the real corpus tokenizers and on small synthetic tokenizers whose
added tokens carry every flag (lstrip, rstrip, single_word, normalized, special).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
import unicodedata
import weakref
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # let `pytest tests/...` import the package without installing it
    sys.path.insert(0, str(REPO))

from rllm_renderers.encoding.loading import load_tokenizer  # noqa: E402
from rllm_renderers.encoding.tokenization import _WHITESPACE, TextEncoder, _is_word_char, text_encoder_for  # noqa: E402

CORPUS = Path(os.environ.get("RLLM_CORPUS", REPO.parent / "shared" / "corpus"))
CORPUS_TOKENIZERS = ["qwen3", "qwen25", "qwen35", "dsv3", "dsv4", "gemma3", "gptoss", "llama31"]

# Hypothesis profiles: reproducible in CI (CI=1), random locally.  Used as parents of the
# per-test settings below rather than loaded globally, so other test modules are unaffected.
settings.register_profile("tokenization-ci", derandomize=True, database=None, deadline=None)
settings.register_profile("tokenization-dev", deadline=None)
PROFILE = settings.get_profile("tokenization-ci" if os.environ.get("CI") else "tokenization-dev")


def _corpus_tokenizer_dir(name: str) -> Path:
    path = CORPUS / "tokenizers" / name
    if not (path / "tokenizer.json").exists():
        pytest.skip(f"test corpus not found: {path} (set RLLM_CORPUS to the corpus folder)")
    return path


# ---------------------------------------------------------------------------- text strategies

WHITESPACE_RUNS = st.text(
    alphabet=" \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2003\u200a\u2028\u202f\u3000\x1c", min_size=1, max_size=5
)
FRAGMENTS = st.sampled_from(
    ["<think>", "</think>", "<tool_call>", "</tool_call>", "{{", "}}", "{%", "<|", "|>", "<", ">", "</",
     "\n\n", "\r\n", "```", "’", "'s", "▁", "Ġ", "<s>", "[INST]", "e\u0301", "A\u030a", "\u200d", "_"]
)  # fmt: skip
PLAIN_TEXT = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12),  # ASCII
    st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x4FFF), min_size=1, max_size=4),  # CJK
    st.text(alphabet=st.sampled_from("😀👍🏽🇫🇷👨‍👩‍👧✨"), min_size=1, max_size=3),  # emoji (with ZWJ, modifiers)
    st.text(alphabet=st.sampled_from("aeiouAEIOU\u0301\u0308\u0327\u030a\u0323"), min_size=1, max_size=5),  # combining
    st.text(alphabet="0123456789", min_size=1, max_size=6),
    st.text(max_size=6),  # anything (hypothesis leaves out surrogates)
)


def chat_like_text(added_tokens: list[str]) -> st.SearchStrategy[str]:
    """Strings mixing real added tokens (whole, cut short, repeated, glued) with text and whitespace."""
    token = st.sampled_from(added_tokens)
    part = st.one_of(
        token,
        token.map(lambda t: t[: max(1, len(t) - 1)]),  # near misses: a token missing its last character
        st.tuples(token, st.integers(1, 3)).map(lambda pair: pair[0] * pair[1]),  # repeated
        WHITESPACE_RUNS,
        FRAGMENTS,
        PLAIN_TEXT,
    )
    return st.lists(part, max_size=12).map("".join)


def _assert_offsets(encoder: TextEncoder, text: str, ids: list[int], starts: list[int]) -> None:
    """Offsets: one per token, inside ``text``, never decreasing, first token of a piece at its start."""
    assert len(starts) == len(ids)
    assert all(0 <= start < len(text) for start in starts)
    assert starts == sorted(starts)
    for start, end, id_ in encoder._split(text):
        if id_ is not None:
            assert start in starts
        elif start < end:  # the backend covers a span from its first character on
            assert start in starts, (text[start:end], starts)


# ---------------------------------------------------------------------------- corpus tokenizers


# Every backend: auto (fastokens where the proof holds), the same without span cache (one engine call
# per text), tiktoken, HF.
BACKENDS = {"auto": {}, "uncached": {"span_cache_size": 0}, "tiktoken": {"backend": "tiktoken"}, "hf": {"backend": "hf"}}


@pytest.fixture(scope="module", params=[(name, kind) for name in CORPUS_TOKENIZERS for kind in BACKENDS], ids="-".join)
def corpus(request):
    """(name, HF tokenizer, its TextEncoder, sorted added-token strings); one tokenizer loaded at a time."""
    name, kind = request.param
    tokenizer = load_tokenizer(_corpus_tokenizer_dir(name))
    encoder = TextEncoder(tokenizer, **BACKENDS[kind])
    return f"{name} ({encoder.backend})", tokenizer, encoder, sorted(encoder.added_token_strings)


@settings(PROFILE, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_corpus_tokenizers_match_encode(corpus, data):
    name, tokenizer, encoder, added = corpus
    text = data.draw(chat_like_text(added), label="text")
    want = tokenizer.encode(text, add_special_tokens=False)
    assert encoder.encode(text) == want, name
    ids, starts = encoder.encode_with_offsets(text)
    assert ids == want
    _assert_offsets(encoder, text, ids, starts)
    # The starts are the ones the backend reports for the whole text in one piece.
    whole = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    assert starts == [start for start, _ in whole.offsets]


def test_corpus_fixed_cases(corpus):
    name, tokenizer, encoder, added = corpus
    cases = [
        "",
        " ",
        "\n\n\n",
        "".join(added[:50]),
        " ".join(added[-50:]) + "  \n",
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n",
        "<|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>",
        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
        "<｜User｜>hi<｜Assistant｜></think>ok<｜end▁of▁sentence｜>",
        "<|start|>assistant<|channel|>analysis<|message|>x<|end|>",
        '{{ messages }}{% if x %}<tool_call>\n{"a": [1, 2]}\n</tool_call>',
    ]
    assert encoder.encode_many(cases) == [tokenizer.encode(text, add_special_tokens=False) for text in cases], name


def test_corpus_token_id(corpus):
    name, tokenizer, encoder, added = corpus
    for token in added[:20]:
        assert encoder.token_id(token) == tokenizer.convert_tokens_to_ids(token)
    assert encoder.token_id("\n") == tokenizer.encode("\n", add_special_tokens=False)[0]
    with pytest.raises(ValueError, match="not a single token"):
        encoder.token_id("Hello there, this is several tokens")
    with pytest.raises(ValueError):
        encoder.token_id("")


def test_split_special_tokens_is_honoured():
    """With ``split_special_tokens=True`` special tokens are plain text (non-special added ones still match)."""
    tokenizer = load_tokenizer(_corpus_tokenizer_dir("qwen3"), split_special_tokens=True)
    encoder = TextEncoder(tokenizer)
    text = "<|im_start|>user\n<think>x</think><|im_end|>\n"
    assert encoder.encode(text) == tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") not in encoder.encode(text)


def test_timing_qwen3_20kb():
    """Not a check: prints TextEncoder.encode vs tokenizer.encode on a ~20 KB chat (run with -s)."""
    tokenizer = load_tokenizer(_corpus_tokenizer_dir("qwen3"))
    encoder = TextEncoder(tokenizer)
    body = "Here is some text, with code `x = f(1, 2)` and 中文, numbers 12345 and an emoji 😀. "
    turns = []
    while sum(map(len, turns)) < 20_000:
        k = len(turns)
        turns.append(f"<|im_start|>user\nQuestion {k}: {body * 3}<|im_end|>\n")
        turns.append(
            f"<|im_start|>assistant\n<think>\nLet me think {k}. {body * 2}\n</think>\n\n{body * 4}\n"
            f'<tool_call>\n{{"name": "search", "arguments": {{"q": "item {k}"}}}}\n</tool_call><|im_end|>\n'
        )
    chat = "".join(turns)
    assert encoder.encode(chat) == tokenizer.encode(chat, add_special_tokens=False)

    def best_of(fn, repeat=5, number=10):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            times.append((time.perf_counter() - start) / number)
        return min(times)

    ours = best_of(lambda: encoder.encode(chat))
    with_offsets = best_of(lambda: encoder.encode_with_offsets(chat))
    theirs = best_of(lambda: tokenizer.encode(chat, add_special_tokens=False))
    print(
        f"\n[timing] qwen3, {len(chat)} chars: TextEncoder.encode {ours * 1e3:.2f} ms, "
        f"encode_with_offsets {with_offsets * 1e3:.2f} ms, tokenizer.encode {theirs * 1e3:.2f} ms, "
        f"ratio encode/tokenizer.encode {ours / theirs:.2f}"
    )


# ---------------------------------------------------------------------------- synthetic tokenizers

TRAINING_TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "The Quick Brown Fox! yes YES yes, no; a b ab abc abab",
    "hello world\n\nhello\tworld  hello   world",
    "naïve café é e\u0301 ñ 中文 字 😀 ① Ⓐ ⅻ _ 123 4567",
]

# Added tokens covering every flag.  "x" and "ab" start and end with word characters, so their
# single_word checks matter; whitespace-only tokens collide with lstrip/rstrip absorption.
SYNTHETIC_ADDED = [
    AddedToken("<mask>", lstrip=True, special=True, normalized=False),
    AddedToken("[SEP]", rstrip=True, special=True, normalized=False),
    AddedToken("<both>", lstrip=True, rstrip=True, special=False, normalized=False),
    AddedToken("ab", single_word=True, special=False, normalized=False),
    AddedToken("abab", special=False, normalized=False),
    AddedToken("x", single_word=True, lstrip=True, rstrip=True, special=True, normalized=False),
    AddedToken("<a>", special=True, normalized=False),
    AddedToken("<a>b", special=False, normalized=False),
    AddedToken("<m", special=False, normalized=False),  # a prefix of the special "<mask>"
    AddedToken("\n\n", special=False, normalized=False),
    AddedToken(" ", special=False, normalized=False, single_word=True),
    AddedToken("Yes", special=False, normalized=True),
    AddedToken("no", special=False, normalized=True, single_word=True),
    AddedToken(" hi", special=False, normalized=True, lstrip=True),
    AddedToken("é", special=False, normalized=True),
    AddedToken("<norm>", special=True, normalized=True, rstrip=True),
]

SYNTHETIC_NORMALIZERS = {
    "none": lambda: None,
    "lowercase": normalizers.Lowercase,
    "replace": lambda: normalizers.Replace(" ", "\u2581"),
    "nfc": normalizers.NFC,
    "nfd_lower": lambda: normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase()]),
    "prepend": lambda: normalizers.Prepend("\u2581"),
}


def _synthetic(normalizer: str, pre_tokenizer: str, split_special: bool = False) -> Tokenizer:
    """A small BPE tokenizer trained in-process, with SYNTHETIC_ADDED on top."""
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.normalizer = SYNTHETIC_NORMALIZERS[normalizer]()
    if pre_tokenizer == "bytelevel":
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    elif pre_tokenizer == "metaspace_first":  # not span-local: the encoder must fall back to whole-text encoding
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
        alphabet = []
    else:  # whitespace split: drops whitespace, so spans may start with a dropped character
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        alphabet = []
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["[UNK]"], initial_alphabet=alphabet, show_progress=False
    )
    tokenizer.train_from_iterator(TRAINING_TEXT, trainer)
    tokenizer.add_tokens(SYNTHETIC_ADDED)
    tokenizer.encode_special_tokens = split_special  # True: special tokens are encoded as plain text
    return tokenizer


SYNTHETIC_CONFIGS = [  # (normalizer, pre-tokenizer, split_special_tokens)
    ("none", "bytelevel", False),
    ("lowercase", "bytelevel", False),
    ("replace", "bytelevel", False),
    ("nfc", "bytelevel", False),
    ("nfd_lower", "bytelevel", False),
    ("prepend", "bytelevel", False),
    ("lowercase", "whitespace", False),
    ("replace", "metaspace_first", False),
    ("none", "bytelevel", True),
    ("lowercase", "bytelevel", True),
]

SYNTHETIC_PIECES = st.one_of(
    st.sampled_from([token.content for token in SYNTHETIC_ADDED]),
    st.sampled_from(["YES", "yes", "No", "NO", "HI", " Hi", "É", "E\u0301", "<MASK>", "[sep]", "<A>B", "ABAB"]),
    WHITESPACE_RUNS,
    st.text(alphabet="abx_1①Ⓐⅻ\u0301\u200dé中 .,;-!", max_size=4),  # word and non-word neighbours
    PLAIN_TEXT,
)


@pytest.fixture(scope="module", params=SYNTHETIC_CONFIGS, ids=lambda config: "-".join(map(str, config)))
def synthetic(request):
    tokenizer = _synthetic(*request.param)
    return tokenizer, TextEncoder(tokenizer)


@settings(PROFILE, max_examples=300)
@given(data=st.data())
def test_synthetic_tokenizers_match_encode(synthetic, data):
    tokenizer, encoder = synthetic
    text = data.draw(st.lists(SYNTHETIC_PIECES, max_size=10).map("".join), label="text")
    want = tokenizer.encode(text, add_special_tokens=False)
    assert encoder.encode(text) == want.ids
    ids, starts = encoder.encode_with_offsets(text)
    assert ids == want.ids
    assert len(starts) == len(ids) and starts == sorted(starts)
    assert all(0 <= start <= len(text) for start in starts)


@pytest.mark.parametrize(
    "text",
    [
        "ab ab xab abx x-ab abab ab_",  # single_word: only the free-standing "ab"s are added tokens
        "a  <mask>  [SEP]   b",  # lstrip / rstrip absorb the whitespace
        "[SEP]   \n\nz",  # rstrip absorbs "\n\n", then the "\n\n" token matches inside it: overlapping pieces
        "y x \tx\u3000x\u2000",  # single_word with lstrip/rstrip and unicode spaces
        "<a>b<a><a>bb",  # longest match wins
        "Yes YES yes no No nob  hi HI",  # normalized tokens (second pass) incl. single_word and lstrip
        "e\u0301 é E\u0301",  # NFC / NFD normalization of the input and of the token
        "<norm>  x<norm>",
        "<mask> <ma <m <mask>",  # with split_special_tokens the skipped "<mask>" still hides its prefix "<m"
        "Ⓐab ab① ab\u0301 ab\u200d _ab",  # word characters by Rust's \w (Other_Alphabetic, marks, join control)
    ],
)
@pytest.mark.parametrize("config", SYNTHETIC_CONFIGS, ids=lambda config: "-".join(map(str, config)))
def test_synthetic_fixed_cases(config, text):
    tokenizer = _synthetic(*config)
    assert TextEncoder(tokenizer).encode(text) == tokenizer.encode(text, add_special_tokens=False).ids


def test_splitting_by_hand():
    """The splitter's own view of one string, spelled out (and checked against the library)."""
    tokenizer = _synthetic("none", "bytelevel")
    encoder = TextEncoder(tokenizer)
    ab, mask, sep, space = (tokenizer.token_to_id(t) for t in ("ab", "<mask>", "[SEP]", " "))
    text = "ab xab ab. a <mask>[SEP]  c"
    pieces = [(text[start:end], id_) for start, end, id_ in encoder._split(text)]
    assert pieces == [
        ("ab", ab),  # single_word: free-standing
        (" xab ", None),  # " " (single_word) touches word characters; "x" and "ab" are glued to words
        ("ab", ab),  # "." is not a word character
        (". a", None),
        (" <mask>", mask),  # lstrip takes the space on the left
        ("[SEP]  ", sep),  # rstrip takes both spaces on the right ...
        (" ", space),  # ... yet the scan resumes right after "[SEP]": " " between "]" and " " is a single word
        (" c", None),  # and the text after that piece is encoded again, as the library does
    ]
    assert encoder.encode(text) == tokenizer.encode(text, add_special_tokens=False).ids


def test_word_and_whitespace_classes_match_the_library():
    """Probe every assigned code point through the library: single_word's \\w and lstrip's \\s."""
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and unicodedata.category(chr(c)) != "Cn"]

    def probe(**flags):
        tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
        tokenizer.add_tokens([AddedToken("@", normalized=False, **flags)])
        return tokenizer, tokenizer.token_to_id("@")

    single_word, at = probe(single_word=True)
    encodings = single_word.encode_batch_fast([c + "@" for c in chars], add_special_tokens=False)
    assert [c for c, e in zip(chars, encodings) if (at in e.ids) == _is_word_char(c)] == []

    lstrip, _ = probe(lstrip=True)
    encodings = lstrip.encode_batch_fast([c + "@" for c in chars], add_special_tokens=False)  # absorbed: just "@"
    assert [c for c, e in zip(chars, encodings) if (len(e.ids) == 1) != (c in _WHITESPACE)] == []


# ---------------------------------------------------------------------------- cache, loading, imports


def test_text_encoder_for_caches_without_leaking():
    tokenizer = _synthetic("none", "bytelevel")
    encoder = text_encoder_for(tokenizer)
    assert text_encoder_for(tokenizer) is encoder
    tokenizer.add_tokens([AddedToken("<new>", normalized=False)])  # vocabulary grew: rebuilt
    rebuilt = text_encoder_for(tokenizer)
    assert rebuilt is not encoder and "<new>" in rebuilt.added_token_strings
    assert rebuilt.encode("a<new>b") == tokenizer.encode("a<new>b", add_special_tokens=False).ids

    alive = weakref.ref(tokenizer)
    del tokenizer, encoder, rebuilt
    gc.collect()
    assert alive() is None  # the cached encoder does not keep its tokenizer alive


def test_text_encoder_for_hf_tokenizer():
    tokenizer = load_tokenizer(_corpus_tokenizer_dir("qwen25"))
    encoder = text_encoder_for(tokenizer)
    assert text_encoder_for(tokenizer) is encoder
    alive = weakref.ref(tokenizer)
    del tokenizer, encoder
    gc.collect()
    assert alive() is None


def test_text_encoder_rejects_slow_or_foreign_objects():
    with pytest.raises(TypeError, match="tokenizers.Tokenizer"):
        TextEncoder(object())


def test_load_tokenizer_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_tokenizer(tmp_path / "nope")


def test_import_does_not_pull_heavy_modules():
    code = (
        "import sys; import rllm_renderers, rllm_renderers.encoding.tokenization, rllm_renderers.encoding.loading; "
        "heavy = [m for m in ('transformers', 'jinja2', 'torch') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)

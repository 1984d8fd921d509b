"""The fast encoder backends (fastokens, tiktoken), the private backend copies, the span cache and plain ranges.

Differential everywhere: every backend (fastokens with and without the span cache, tiktoken, HF)
against ``tokenizer.encode(text, add_special_tokens=False)`` on every corpus tokenizer (synthetic
ones included), with adversarial text; the proof's refusals on small hand-made BPEs that break one
condition each.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rllm_renderers.encoding import fast_encoder
from rllm_renderers.encoding import proof_cache  # noqa: E402
from rllm_renderers.encoding.fast_encoder import rank_bpe_plan  # noqa: E402
from rllm_renderers.encoding.span_bpe import bytes_of_byte_level  # noqa: E402
from rllm_renderers.encoding import span_bpe  # noqa: E402
from rllm_renderers.encoding.loading import load_tokenizer  # noqa: E402
from rllm_renderers.encoding.tokenization import TextEncoder, text_encoder_for  # noqa: E402

from tests.test_tokenization import CORPUS, PROFILE, chat_like_text  # noqa: E402

SYNTHETIC = ["synthetic/minimax_m3", "synthetic/glm5", "synthetic/kimi_k27_code", "synthetic/gemma4"]
# "qwen35-file": Qwen3.5's tokenizer.json as written (ignore_merges on), not rebuilt by transformers.
ALL_TOKENIZERS = ["qwen3", "qwen25", "qwen35", "qwen35-file", "dsv3", "dsv4", "gemma3", "gptoss", "llama31", *SYNTHETIC]

# Which backend the proof must pick: a test that silently fell back to HF everywhere would pass
# every equality check, so the choice itself is asserted.  Where the proof holds, both engines run.
EXPECTED_BACKEND = {
    "qwen3": "tiktoken",
    "qwen25": "tiktoken",
    "dsv3": "tiktoken",  # three Split stages (tiktoken: the first two run in Python, the last in tiktoken)
    "dsv4": "tiktoken",
    "gptoss": "tiktoken",  # every split of a token is a merge, with the whole-word shortcut
    "llama31": "tiktoken",
    **{name: "tiktoken" for name in SYNTHETIC},
    "qwen35": "tiktoken",  # 201 tokens the rebuilt tokenizer never gives, left out of the ranks
    "qwen35-file": "tiktoken",  # 83 tokens only the whole-word shortcut gives: their spans go to HF
    "gemma3": "hf",  # not byte-level
}


@pytest.fixture(scope="module", autouse=True)
def _private_proof_cache(tmp_path_factory):
    """Remembered proofs go to a temporary folder, not the user's cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RLLM_RENDERERS_CACHE", str(tmp_path_factory.mktemp("proofs")))
        yield


def _tokenizer_dir(name: str) -> Path:
    path = CORPUS / "tokenizers" / name
    if not (path / "tokenizer.json").exists():
        pytest.skip(f"test corpus not found: {path} (set RLLM_CORPUS to the corpus folder)")
    return path


def _load(name: str):
    """The corpus tokenizer as transformers loads it; ``<dir>-file``: its tokenizer.json as written."""
    if name.endswith("-file"):
        from transformers import PreTrainedTokenizerFast

        path = _tokenizer_dir(name[: -len("-file")]) / "tokenizer.json"
        return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(str(path)))
    return load_tokenizer(_tokenizer_dir(name))


# Words of Qwen3.5's vocabulary that no merge makes or that its merges do not reach from their own
# bytes: the tokenizer transformers rebuilds never gives them; the file's whole-word shortcut gives all.
QWEN35_LEFT_OUT = [
    *["加拿大", " Japón", "anjutnya", " terdapat", " obchod", "سبب", " явля"],  # no merge makes them
    *["yarakat", " selanjutnya", " факт", " Kaffee", "俱乐部的", " möglichen", " çeşitli"],  # not reached
]


class Encoders:
    """One corpus tokenizer and an encoder per backend: ``auto`` (tiktoken where the proof holds),
    ``fastokens``, ``uncached`` (fastokens without span cache: one engine call per text), ``tiktoken``
    (forced), ``hf``, and ``switched``: an ``auto`` encoder that encoded on tiktoken, then took
    fastokens when it was built (rllm_renderers/encoding/engine_upgrade.py)."""

    def __init__(self, name: str):
        self.name = name
        self.tokenizer = _load(name)
        fast_encoder.forget()  # a process that has not built fastokens for this tokenizer yet
        self.auto = TextEncoder(self.tokenizer)
        self.switched = TextEncoder(self.tokenizer)
        self.switched_before = self.switched.backend
        self.switched_ids_before = self.switched.encode(SWITCH_PROBE)
        self.switched.upgrade(wait=True)
        self.fastokens = TextEncoder(self.tokenizer, backend="fastokens")
        self.uncached = TextEncoder(self.tokenizer, backend="fastokens", span_cache_size=0)
        self.tiktoken = TextEncoder(self.tokenizer, backend="tiktoken")
        self.hf = TextEncoder(self.tokenizer, backend="hf")
        self.all = {"auto": self.auto, "switched": self.switched, "fastokens": self.fastokens,
                    "uncached": self.uncached, "tiktoken": self.tiktoken, "hf": self.hf}  # fmt: skip


SWITCH_PROBE = "def f(x):\n    return x  # ünïcode 中文 <|im_end|> <think>\n\n"


@pytest.fixture(scope="module", params=ALL_TOKENIZERS)
def both(request):
    """Every backend on one corpus tokenizer (the name is historical: there were two)."""
    return Encoders(request.param)


# ---------------------------------------------------------------------------- adversarial text

WHITESPACE = st.text(alphabet=" \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2003\u2028\u202f\u3000\x1c", min_size=1, max_size=40)
DIGITS = st.text(alphabet="0123456789٠١٢٣४५๖൭¹²½Ⅻ", min_size=1, max_size=12)
CJK_EMOJI = st.text(alphabet=st.sampled_from(list("中文字日本語のテキストカタカナ한국어ㄱ😀👍🏽🇫🇷👨‍👩‍👧✨🧑🏿‍💻")), min_size=1, max_size=10)
COMBINING = st.text(alphabet=st.sampled_from(list("aeoAEOnN\u0301\u0308\u0327\u030a\u0323\u20dd\u0489ก\u0e31\u0e49")), min_size=1, max_size=8)
# Text NFC changes: decomposed letters, singletons (Ohm, Angstrom, CJK compatibility), reordered marks.
NFC_CHANGING = st.text(
    alphabet=st.sampled_from(list("e\u0301A\u030aa\u0323\u0302\u2126\u212b\u0344\uf900\u1100\u1161\u11a8\u0e38\u0eba")),
    min_size=1,
    max_size=8,
)
ANY_UNICODE = st.text(min_size=0, max_size=60)  # no surrogates (tokenizers refuses them)
CODEISH = st.text(alphabet=st.sampled_from(list("=-*/#_.~+<>|\\!?:;,'\"`^%$@&()[]{}")), min_size=1, max_size=30)


def adversarial(added: list[str], shortcut_only: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    look_alikes = st.sampled_from(added or ["<|x|>"]).flatmap(
        lambda token: st.sampled_from([token, token[:-1], token[1:], token.upper(), token + token, " " + token + " "])
    )
    left_out = st.sampled_from(sorted({*QWEN35_LEFT_OUT, *shortcut_only})).flatmap(
        lambda word: st.sampled_from([word, word[:-1], word[1:], word.strip(), "x" + word, word + word, word + "!"])
    )
    part = st.one_of(
        WHITESPACE, DIGITS, CJK_EMOJI, COMBINING, NFC_CHANGING, ANY_UNICODE, CODEISH, look_alikes, left_out,
        chat_like_text(added),
    )
    return st.lists(part, max_size=10).map("".join)


def test_backend_choice_is_the_expected_one(both):
    name, auto, forced = both.name, both.auto, both.hf
    assert auto.backend == EXPECTED_BACKEND[name], auto.backend_reason
    assert both.tiktoken.backend == ("hf" if auto.backend == "hf" else "tiktoken"), both.tiktoken.backend_reason
    fast = "hf" if auto.backend == "hf" else "fastokens"
    assert both.fastokens.backend == both.uncached.backend == fast, both.fastokens.backend_reason
    assert forced.backend == "hf" and forced.backend_reason == "the HF backend was requested"
    # auto starts on tiktoken and takes fastokens once it is built; the same ids before and after
    assert both.switched_before == auto.backend and both.switched.backend == fast, both.switched.backend_reason
    assert both.switched_ids_before == both.switched.encode(SWITCH_PROBE) == both.tokenizer.encode(SWITCH_PROBE, add_special_tokens=False)
    assert (auto._upgrade_after is not None) == (auto.backend == "tiktoken")
    if auto.backend != "hf":  # a new auto encoder of a process that built fastokens starts on it
        assert TextEncoder(both.tokenizer).backend == "fastokens"
    if auto.backend == "hf":
        assert auto.backend_reason  # says why
    # fastokens finds the added tokens itself (one segment per text) where its scan is shown to be
    # ours: not with flagged tokens (DeepSeek), nor where the cut path is off (shortcut-only tokens).
    one_segment = name not in ("dsv3", "dsv4", "gemma3", "qwen35-file")
    assert both.fastokens._engine_scans == both.uncached._engine_scans == one_segment, name
    assert not auto._engine_scans  # the tiktoken engine does not look for added tokens
    # Offsets from byte lengths wherever an engine encodes (no corpus tokenizer trims offsets).
    for encoder in both.all.values():
        assert encoder._offsets_from_lengths == (encoder.backend != "hf")


def _shortcut_only(both) -> tuple[str, ...]:
    plan = both.auto._rank_bpe
    return plan.shortcut_only if plan is not None else ()


@settings(PROFILE, max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_backend_equals_tokenizer_encode(both, data):
    text = data.draw(adversarial(sorted(both.auto.added_token_strings), _shortcut_only(both)), label="text")
    want = both.tokenizer.encode(text, add_special_tokens=False)
    # Offsets: every backend gives the library's starts (for the whole text in one piece).
    whole = [start for start, _ in both.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).offsets]
    for kind, encoder in both.all.items():
        assert encoder.encode(text) == want, (both.name, kind)
        assert encoder.encode_with_offsets(text) == (want, whole), (both.name, kind)
    texts = [text, text[::-1], text + text]
    assert both.uncached.encode_many(texts) == both.fastokens.encode_many(texts) == both.auto.encode_many(texts) == [both.tokenizer.encode(t, add_special_tokens=False) for t in texts]


@settings(PROFILE, max_examples=25, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=st.text(min_size=500, max_size=4000))
def test_long_random_unicode(both, text):
    want = both.tokenizer.encode(text, add_special_tokens=False)
    for kind, encoder in both.all.items():
        assert encoder.encode(text) == want, (both.name, kind)


def test_long_pieces(both):
    """Pieces far longer than a word (tiktoken switches to another merge loop for long pieces), and
    texts past 64 KiB, which fastokens cuts into chunks for its threads and joins again."""
    texts = ["a" * 5000, " " * 3000, "ab" * 2500, "\n" * 1000, "ñ" * 2000, "中" * 3000, "😀" * 500, "xyz" * 1500 + "!" * 999,
             "".join(chr(0x61 + (k * 7) % 26) for k in range(6000)), "0" * 4000, "-=" * 2000]  # fmt: skip
    source = (REPO / "rllm_renderers" / "encoding" / "tokenization.py").read_text(encoding="utf-8")
    long_runs = "".join(f"{source[k * 997 : k * 997 + 1500]}{' ' * (k * 131 % 1500)}{'x' * (k * 257 % 2000)}\n" for k in range(60))
    texts += [long_runs, source * 3, ("中文字 " * 7000)[:70_000], " " * 70_000 + "y"]
    for text in texts:
        want = both.tokenizer.encode(text, add_special_tokens=False)
        for kind, encoder in both.all.items():
            assert encoder.encode(text) == want, (both.name, kind, text[:10])


def test_fastokens_results_do_not_depend_on_the_previous_call(both):
    """fastokens keeps per-thread state between calls (a BPE word cache; in 0.3.2 a regex-match cache
    that gave wrong ids for an input sharing 4 KB with the previous one, ending a whitespace run
    where the previous input went on).  Inputs that share long prefixes and diverge at awkward
    places, each right after its neighbour, then again in another order."""
    if both.fastokens.backend != "fastokens":
        pytest.skip(f"{both.name} is not encoded by fastokens ({both.fastokens.backend_reason})")
    source = (REPO / "rllm_renderers" / "encoding" / "fast_encoder.py").read_text(encoding="utf-8")
    filler, spaces = source[:5000], " " * 700
    base = filler + spaces + "x" * 1500 + source[5000:19000]
    texts = [filler + spaces + tail for tail in (" ", "\n", "\tx", "y", "x" + source[:2000], "  ")]
    for cut in (4096, 5000, 5350, 5699, 5700, 5701, 6000, 6900, 7200, 15000):
        texts += [base[:cut] + suffix for suffix in ("Z", " tail", "\n\nmore", "  ")] + [base, base + f" extended {cut}"]
    want = [both.tokenizer.encode(text, add_special_tokens=False) for text in texts]
    for order in (texts, texts[::-1], texts[::2] + texts[1::2]):
        for encoder in (both.fastokens, both.uncached):
            encoder.clear_cache()
            assert [encoder.encode(text) for text in order] == [want[texts.index(text)] for text in order], both.name


def _sweep_texts() -> list[str]:
    """Every code point of the BMP and of the emoji/CJK-extension planes, in chunks, in several contexts."""
    code_points = [c for c in range(0x20, 0x30000) if not 0xD800 <= c <= 0xDFFF]
    code_points = [c for c in code_points if c < 0x10000 or 0x1F000 <= c < 0x1FB00 or 0x20000 <= c < 0x20400]
    texts = []
    for start in range(0, len(code_points), 200):
        chunk = [chr(c) for c in code_points[start : start + 200]]
        texts += ["".join(chunk), " ".join(chunk), "a".join(chunk) + "  ", "1" + "\n ".join(chunk)]
    return texts


def test_rank_bpe_sweeps_unicode_like_the_library(both):
    """All assigned code points in context: the regex engines and NFC must agree everywhere."""
    if both.auto.backend == "hf":
        pytest.skip(f"{both.name} is encoded by the HF backend ({both.auto.backend_reason})")
    texts = _sweep_texts()
    plain = both.hf._copy("all")  # no added tokens matched: the spans' own function
    want = [encoding.ids for encoding in plain.encode_batch_fast(texts, add_special_tokens=False)]
    for encoder in (both.fastokens, both.tiktoken):
        got = encoder._rank_bpe.encode_many(texts)
        mismatches = [text[:40] for text, a, b in zip(texts, got, want) if a != b]
        assert not mismatches, (both.name, encoder.backend, len(mismatches), mismatches[:3])


def test_nfc_is_skipped_only_where_the_library_changes_nothing():
    """``nfc_leaves_alone`` (Python's unicodedata) must never skip a text the library's NFC changes."""
    from tokenizers.normalizers import NFC

    normalize = NFC().normalize_str
    marks = [chr(c) for c in range(0x300, 0x370)] + ["\u0eb8", "\u0eba", "\u1161", "\u11a8", "\u3099", "\U0001e944"]
    texts = _sweep_texts() + [base + mark for base in ("a", "e", "가", "ຸ", "中", "😀", "\u0378") for mark in marks]
    texts += [a + b + c for a in ("e", "o", "\u0eb8") for b in marks[::7] for c in marks[::5]]
    skipped = [text for text in texts if span_bpe.nfc_leaves_alone(text)]
    assert [text for text in skipped if normalize(text) != text] == []
    assert 0 < len(skipped) < len(texts)  # the shortcut is taken, and not everywhere


@settings(PROFILE, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(st.one_of(COMBINING, CJK_EMOJI, ANY_UNICODE), max_size=8).map("".join))
def test_nfc_shortcut_on_random_text(text):
    from tokenizers.normalizers import NFC

    if span_bpe.nfc_leaves_alone(text):
        assert NFC().normalize_str(text) == text


# ---------------------------------------------------------------------------- the proof's refusals


def _bpe_json(vocab: dict[str, int], merges: list[tuple[str, str]], **model: object) -> dict:
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\s+|\S+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}  # fmt: skip
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": pre, "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(merge) for merge in merges], **model},
    }  # fmt: skip


def _byte_vocab() -> dict[str, int]:
    return {ch: index for index, ch in enumerate(sorted(span_bpe.BYTE_OF, key=span_bpe.BYTE_OF.get))}


def _plan(data: dict):
    return rank_bpe_plan(Tokenizer.from_str(json.dumps(data)))


def _with(vocab: dict[str, int], *tokens: str) -> dict[str, int]:
    vocab = dict(vocab)
    for token in tokens:
        vocab[token] = len(vocab)
    return vocab


def test_proof_accepts_a_trained_style_bpe_and_matches_it():
    vocab = _with(_byte_vocab(), "ab", "abc", "bc")
    data = _bpe_json(vocab, [("a", "b"), ("ab", "c"), ("b", "c")])
    plan, reason = _plan(data)
    assert plan is not None, reason
    tokenizer = Tokenizer.from_str(json.dumps(data))
    for text in ["abc", "abcbc abc", "bcab", "  abcabc\n"]:
        assert plan.encode(text) == tokenizer.encode(text, add_special_tokens=False).ids


def test_proof_refuses_what_it_cannot_prove():
    vocab = _with(_byte_vocab(), "ab", "abc", "bc")  # ids 256, 257, 258
    plan, reason = _plan(_bpe_json(vocab, [("a", "b"), ("b", "c"), ("ab", "c")]))  # ids out of merge order
    assert plan is None and "makes token" in reason, reason


LEFT_OUT_TEXTS = ["abc", "abcd", "xabc", "abc abc", "abcabc", "bcab", "d", "abd", "ab", "bc", "cd", "  abc\n", "dabcd"]


@pytest.mark.parametrize("ignore_merges", [False, True])
def test_tokens_the_merge_loop_never_makes_are_left_out(ignore_merges, monkeypatch):
    """"abc" is made by no merge reachable from its bytes ([a, bc] stops) and "d" by no merge at all:
    the merge loop never gives them, tiktoken must not either (left out of its ranks); with the
    whole-word shortcut the library gives them for a word equal to them, so such spans go to HF."""
    vocab = _with(_byte_vocab(), "bc", "ab", "abc", "cd", "dd")  # ids 256..260; "dd" made by no merge
    data = _bpe_json(vocab, [("b", "c"), ("a", "b"), ("ab", "c"), ("c", "d")], ignore_merges=ignore_merges)
    plan, reason = _plan(data)
    assert plan is not None, reason
    assert b"abc" not in plan.ranks and b"dd" not in plan.ranks and plan.ranks[b"bc"] == 256
    assert plan.left_out == 2
    assert plan.shortcut_only == (("abc", "dd") if ignore_merges else ())
    assert ("given only by the whole-word shortcut" if ignore_merges else "left out of the ranks") in reason
    tokenizer = Tokenizer.from_str(json.dumps(data))
    texts = LEFT_OUT_TEXTS + ["dd", "add", "dd dd", "ddd"]
    assert (tokenizer.encode("abc").ids == [vocab["abc"]]) is ignore_merges  # the shortcut, or [a, bc]
    for backend in ("fastokens", "tiktoken"):
        encoder = TextEncoder(tokenizer, backend=backend)
        assert encoder.backend == backend
        assert [encoder.encode(text) for text in texts] == [tokenizer.encode(text).ids for text in texts]
        engine = encoder._rank_bpe
        for text in texts:
            ids = engine.encode(text)
            if ignore_merges and ("abc" in text or "dd" in text):
                assert ids is None, (backend, text)  # the library's to encode
            else:
                assert ids == tokenizer.encode(text).ids, (backend, text)
    fast_encoder.forget()  # a new process: the same plan from the remembered marker
    monkeypatch.setattr(fast_encoder, "_unreached", lambda *args: pytest.fail("proved again"))
    again, again_reason = _plan(data)
    assert (again.ranks, again.shortcut_only, again.left_out, again_reason) == (
        plan.ranks, plan.shortcut_only, plan.left_out, reason)  # fmt: skip
    assert [again.encode(text) for text in texts] == [plan.encode(text) for text in texts]


@pytest.mark.parametrize("backend", ["fastokens", "tiktoken"])
@pytest.mark.parametrize("name", ["qwen35", "qwen35-file"])
def test_qwen35_words_only_the_shortcut_gives(name, backend):
    """Qwen3.5 as transformers rebuilds it (no whole-word shortcut): 201 tokens are never given, and
    left out of the ranks (token 170315 "yarakat" is [88, 26980, 266]).  The file as written (the
    shortcut on, merges closed): the 83 tokens no merge makes are given for a word equal to one,
    so a span containing one goes to HF."""
    tokenizer = _load(name)
    encoder = TextEncoder(tokenizer, backend=backend)
    engine = encoder._rank_bpe
    assert encoder.backend == backend and engine is not None, encoder.backend_reason
    plan = rank_bpe_plan(tokenizer.backend_tokenizer)[0]  # the tiktoken engine, for its ranks
    assert (engine.left_out, engine.shortcut_only) == (plan.left_out, plan.shortcut_only)
    if name == "qwen35":
        assert (plan.left_out, plan.shortcut_only) == (201, ())
        assert b"yarakat" not in plan.ranks and "加拿大".encode() not in plan.ranks
        assert tokenizer.encode("yarakat", add_special_tokens=False) == [88, 26980, 266]
    else:
        assert plan.left_out == len(plan.shortcut_only) == 83 and "加拿大" in plan.shortcut_only
        assert plan.ranks[b"yarakat"] == 170315  # a product: the shortcut gives it in both
        assert engine.encode("加拿大") is None and engine.encode("see 加拿大!") is None
        assert tokenizer.encode("加拿大", add_special_tokens=False) == [108918]
    contexts = ("{}", "x{}", "{}{}", "the{}. ", "<|im_start|>user\n{}<|im_end|>")
    texts = [context.format(word, word) for word in QWEN35_LEFT_OUT for context in contexts]
    texts += [word.strip() for word in QWEN35_LEFT_OUT] + [word[:-1] for word in QWEN35_LEFT_OUT]
    want = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    assert [encoder.encode(text) for text in texts] == want
    assert [encoder.encode_with_offsets(text)[0] for text in texts] == [encoder.encode(text) for text in texts]
    uncached = TextEncoder(tokenizer, backend=backend, span_cache_size=0)  # without cache: spans go HF's way too
    assert [uncached.encode(text) for text in texts] == want
    # Without the guard (left-out tokens put back in the ranks, or no search) tiktoken is wrong.
    put_back = {**plan.ranks, b"yarakat": 170315, "加拿大".encode(): 108918}
    unguarded = fast_encoder.RankBpe(plan.pattern, plan.stages, plan.nfc, put_back)
    wrong = [text for text, ids in zip(texts, want) if unguarded.encode(text) != ids]
    assert wrong, "the left-out tokens made no difference: the test proves nothing"


def test_without_the_left_out_tokens_tiktoken_would_differ():
    """The guard is needed: the same plan with "abc" back in the ranks (or without the search) is wrong."""
    vocab = _with(_byte_vocab(), "bc", "ab", "abc")
    for ignore_merges in (False, True):
        data = _bpe_json(vocab, [("b", "c"), ("a", "b"), ("ab", "c")], ignore_merges=ignore_merges)
        plan = _plan(data)[0]
        tokenizer = Tokenizer.from_str(json.dumps(data))
        unguarded = fast_encoder.RankBpe(plan.pattern, plan.stages, plan.nfc, {**plan.ranks, b"abc": vocab["abc"]})
        assert any(unguarded.encode(text) != tokenizer.encode(text).ids for text in ("abc", "xabc"))
        searchless = fast_encoder.RankBpe(plan.pattern, plan.stages, plan.nfc, plan.ranks)
        assert (searchless.encode("abc") != tokenizer.encode("abc").ids) is ignore_merges


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda d: d["model"].update(byte_fallback=True), "byte fallback"),
        (lambda d: d["model"].update(dropout=0.1), "dropout"),
        (lambda d: d.update(normalizer={"type": "Lowercase"}), "neither NFC nor none"),
        (lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(behavior="MergedWithPrevious"), "not Isolated"),
        (lambda d: d["pre_tokenizer"]["pretokenizers"][1].update(add_prefix_space=True), "prefix space"),
        (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "ByteLevel"),
        (lambda d: d["model"]["vocab"].pop("Ā"), "byte symbols"),
    ],
)
def test_proof_refuses_other_pipelines(change, why):
    data = _bpe_json(_with(_byte_vocab(), "ab"), [("a", "b")])
    change(data)
    plan, reason = _plan(data)
    assert plan is None and why in reason, reason


PERIODIC_TOKENS = ["aa", "ab", "ba", "aaa", "aba", "bab", "abab", "baba", "aaaa", "abaa", "aab", "bb", "abb", "bba"]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ignore_merges", [True, False])
def test_every_split_a_merge_with_ties_in_any_order(seed, ignore_merges):
    """Tokens with several merges (every split), listed within a token's block in a random order:
    the library breaks ties between different splits by index, tiktoken by position; the proof says
    different splits of one token are never present together.  Checked on periodic text."""
    import random

    rng = random.Random(seed)
    tokens = PERIODIC_TOKENS[:]
    rng.shuffle(tokens)
    tokens.sort(key=len)  # a token's parts come before it
    vocab = _with(_byte_vocab(), *tokens)
    merges = []
    for token in tokens:
        splits = [(token[:cut], token[cut:]) for cut in range(1, len(token))]
        splits = [(left, right) for left, right in splits if left in vocab and right in vocab]
        rng.shuffle(splits)
        merges += splits
    data = _bpe_json(vocab, merges, ignore_merges=ignore_merges)
    plan, reason = _plan(data)
    assert plan is not None, reason
    tokenizer = Tokenizer.from_str(json.dumps(data))
    texts = ["".join(rng.choice("ab") for _ in range(rng.randint(1, 30))) for _ in range(3000)]
    texts += ["ab" * n for n in range(1, 40)] + ["a" * n for n in range(1, 40)] + ["aab" * n for n in range(1, 20)]
    want = [encoding.ids for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
    assert [plan.encode(text) for text in texts] == want


def test_gaps_between_split_matches_are_kept():
    """A Split regex that does not cover the text: the library keeps the gaps, so must we."""
    data = _bpe_json(_with(_byte_vocab(), "ab", "12"), [("a", "b"), ("1", "2")])
    data["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": "[a-z]+"}
    plan, reason = _plan(data)
    assert plan is not None, reason
    tokenizer = Tokenizer.from_str(json.dumps(data))
    for text in ["ab12ab", "12 12", "!!ab??", "", "中ab"]:
        assert plan.encode(text) == tokenizer.encode(text, add_special_tokens=False).ids, text


STAGED_TEXT = st.lists(st.one_of(DIGITS, CJK_EMOJI, COMBINING, WHITESPACE, CODEISH, ANY_UNICODE,
                                  st.sampled_from(["1234567", "12中文34", "ｶﾀｶﾅ123", "v2.0.10", "٣٤٥٦abc", "ー〇一二三"])),
                        max_size=12).map("".join) | st.text(alphabet=st.characters(max_codepoint=127), max_size=80)  # fmt: skip


@functools.lru_cache(maxsize=None)
def _staged_encoder(name: str) -> TextEncoder:
    return TextEncoder(load_tokenizer(_tokenizer_dir(name)), backend="tiktoken")


@pytest.mark.parametrize("name", ["dsv3", "dsv4"])
@settings(PROFILE, max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=STAGED_TEXT)
def test_staged_split_in_one_pass_equals_the_stages_one_by_one(name, text):
    """DeepSeek's two Python-side Split stages (digit groups, CJK runs) run as one regex split."""
    encoder = _staged_encoder(name)
    plan = encoder._rank_bpe
    assert plan is not None and len(plan.stages) == 2 and plan._one_pass is not None, plan
    assert [piece for piece in plan._one_pass.split(text) if piece] == plan._staged_pieces(text)
    if text.isascii():  # ASCII spans are cut by the re twin of the one-pass regex
        assert [piece for piece in plan._one_pass_ascii.split(text) if piece] == plan._staged_pieces(text)
    assert plan.encode(text) == encoder._copy("all").encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize("name", ["dsv3", "dsv4"])
def test_short_piece_table_is_the_tokenizers_function(name):
    """The digit groups' ids are looked up, not encoded: the table must be what the library gives."""
    encoder = _staged_encoder(name)
    table = encoder._rank_bpe._short_pieces
    pieces = sorted(table)
    assert len(pieces) == 10 + 100 + 1000 and "007" in table
    want = [encoding.ids for encoding in encoder._copy("all").encode_batch_fast(pieces, add_special_tokens=False)]
    assert [table[piece] for piece in pieces] == want
    assert fast_encoder._short_piece_ids((r"\p{L}{1,3}", r"[a-z]+", r"\d"), len) == {str(d): 1 for d in range(10)}


def test_one_pass_stages_needs_disjoint_single_class_stages():
    one_pass = fast_encoder._one_pass_stages
    assert one_pass((r"\p{N}{1,3}", "[一-龥\u3040-ゟ゠-ヿ]+")) is not None
    assert one_pass((r"[a-z]+",)) is not None and one_pass((r"\p{L}", r"\d+")) is not None
    # not one class repeated: refused
    for stage in (r"\p{N}|x", r"[a-z]*", r"\p{L}\p{N}", r"[[a]b]+", r"(?:ab)+", r"\p{N}{0,3}"):
        assert one_pass((r"\s+", stage)) is None, stage
    # overlapping classes: the stages one by one cut "12345a" into 123|4|5|a, one pass into 123|45|a
    assert one_pass((r"[0-9]{1,3}", r"[5-9a]+")) is None


def proof_markers(folder: Path) -> list[Path]:
    """The markers in a proof folder (not its hidden files: the per-user key ``.key``)."""
    return [path for path in folder.iterdir() if not path.name.startswith(".")]


def test_the_verdict_is_remembered_per_tokenizer_content(tmp_path, monkeypatch):
    monkeypatch.setenv("RLLM_RENDERERS_CACHE", str(tmp_path))
    data = _bpe_json(_with(_byte_vocab(), "ab", "xy"), [("a", "b"), ("x", "y")])
    plan = _plan(data)[0]
    assert plan is not None
    markers = proof_markers(tmp_path / "rank_bpe_proofs")
    assert len(markers) == 1 and '"verdict": "proved"' in markers[0].read_text().splitlines()[2]
    fast_encoder.forget()  # a new process: the plan comes from the marker, not from the JSON
    monkeypatch.setattr(fast_encoder, "_unreached", lambda *args: pytest.fail("proved again"))
    remembered = _plan(data)[0]
    assert (remembered.pattern, remembered.stages, remembered.nfc, remembered.ranks) == (
        plan.pattern, plan.stages, plan.nfc, plan.ranks)  # fmt: skip
    assert remembered.encode("abxy ab") == plan.encode("abxy ab")
    monkeypatch.undo()
    monkeypatch.setenv("RLLM_RENDERERS_CACHE", str(tmp_path))
    markers[0].write_text("proved\n{damaged")  # a damaged marker: proved again, and rewritten
    fast_encoder.forget()
    assert _plan(data)[0].ranks == plan.ranks
    assert markers[0].read_text().startswith(proof_cache.MAGIC)

    refused = _bpe_json(_with(_byte_vocab(), "ab", "abc", "bc"), [("a", "b"), ("b", "c"), ("ab", "c")])
    reason = _plan(refused)[1]
    assert any('"verdict": "refused: ' in marker.read_text() for marker in proof_markers(tmp_path / "rank_bpe_proofs"))
    fast_encoder.forget()  # a new process: the marker gives the same verdict without the BPE run
    assert _plan(refused) == (None, reason)


def test_bytes_of_byte_level():
    assert bytes_of_byte_level("ĠhelloĊ") == b" hello\n"
    assert bytes_of_byte_level("".join(sorted(span_bpe.BYTE_OF, key=span_bpe.BYTE_OF.get))) == bytes(range(256))


# ---------------------------------------------------------------------------- forcing HF


def test_env_var_forces_hf(monkeypatch):
    tokenizer = load_tokenizer(_tokenizer_dir("synthetic/glm5"))
    fast_encoder.forget()  # (auto takes fastokens where this process built it: test_backend_choice_is_the_expected_one)
    assert TextEncoder(tokenizer).backend == "tiktoken"
    for forced in ("hf", "tiktoken", "fastokens"):
        monkeypatch.setenv("RLLM_RENDERERS_ENCODER", forced)
        assert TextEncoder(tokenizer).backend == forced
        assert text_encoder_for(tokenizer).backend == forced
    assert TextEncoder(tokenizer, backend="hf").backend == "hf"  # the argument wins
    monkeypatch.setenv("RLLM_RENDERERS_ENCODER", "rust")
    with pytest.raises(ValueError, match="'auto', 'hf', 'fastokens', 'tiktoken'"):
        TextEncoder(tokenizer)


@pytest.mark.parametrize("missing, fallback", [("fastokens", "tiktoken"), ("tiktoken", "fastokens")])
def test_without_one_engine_the_other_encodes(monkeypatch, missing, fallback):
    """One engine missing (not installed): auto uses the other (and says why when it had to); forced, HF."""
    tokenizer = load_tokenizer(_tokenizer_dir("synthetic/glm5"))
    fast_encoder.forget()
    monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    try:
        auto = TextEncoder(tokenizer)
        assert auto.backend == fallback
        assert (f"{missing} is not installed" in auto.backend_reason) == (missing == "tiktoken")
        forced = TextEncoder(tokenizer, backend=missing)
        assert forced.backend == "hf" and f"{missing} is not installed" in forced.backend_reason
        text = "<|user|>hello 中文 12345<|assistant|>"
        assert auto.encode(text) == forced.encode(text) == tokenizer.encode(text, add_special_tokens=False)
    finally:
        fast_encoder.forget()  # the plans without fastokens must not outlive the patch


# ---------------------------------------------------------------------------- shared tokenizer objects


@pytest.mark.parametrize("name, backend", [("qwen3", "auto"), ("qwen3", "hf"), ("qwen3", "tiktoken"), ("gptoss", "auto")])
def test_padding_thread_cannot_change_ids(name, backend):
    """Issue 12 item 1: one tokenizer object, renders in some threads, another pads and truncates with it."""
    tokenizer = load_tokenizer(_tokenizer_dir(name))
    encoder = TextEncoder(tokenizer, backend=backend)
    texts = [f"<|im_start|>user\nquestion {k}: " + "word " * (k % 40) + "<|im_end|>\n" for k in range(60)]
    want = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    stop = threading.Event()

    def data_loader():  # what a collator does: the HF wrapper sets padding/truncation on the shared backend
        while not stop.is_set():
            tokenizer(["padding me please"] * 8, padding="max_length", max_length=64, truncation=True)
            tokenizer(["x"] * 8, padding="longest", truncation=True, max_length=4)

    loader = threading.Thread(target=data_loader)
    loader.start()
    try:
        wrong = 0
        for _ in range(10):
            for text, ids in zip(texts, want):
                wrong += encoder.encode(text) != ids
                wrong += encoder.encode_with_offsets(text)[0] != ids
    finally:
        stop.set()
        loader.join()
    assert wrong == 0, f"{wrong} of {2 * 10 * len(texts)} encodes were wrong"


def test_threads_share_one_fastokens_engine():
    """One engine per tokenizer content, shared by every encoder and thread; fastokens lets go of the GIL
    from 16 KB on, so long texts from several threads run in it at once."""
    tokenizer = load_tokenizer(_tokenizer_dir("qwen3"))
    encoders = [TextEncoder(tokenizer, backend="fastokens", span_cache_size=0), TextEncoder(tokenizer, backend="fastokens")]
    assert encoders[0]._rank_bpe is encoders[1]._rank_bpe and encoders[0].backend == "fastokens"
    source = (REPO / "rllm_renderers" / "encoding" / "tokenization.py").read_text(encoding="utf-8")
    texts = [f"<|im_start|>user\n{source[k * 500 : k * 500 + 20_000]}<|im_end|>\n<think>{k}</think>" for k in range(24)]
    want = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    wrong: list[int] = []

    def work(encoder: TextEncoder) -> None:
        for _ in range(3):
            wrong.extend(k for k, text in enumerate(texts) if encoder.encode(text) != want[k])

    threads = [threading.Thread(target=work, args=(encoders[k % 2],)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


# ---------------------------------------------------------------------------- span cache


@pytest.mark.parametrize("name", ["qwen3", "llama31", "gptoss"])
def test_warm_equals_cold(name):
    """Warm (span cache) == cold, on the one-call path too, where only spans of LONG_CHARS or more are
    looked up: a shared ASCII block, a shared block NFC changes, short and long spans between tokens."""
    tokenizer = load_tokenizer(_tokenizer_dir(name))
    warm = TextEncoder(tokenizer, backend="fastokens")
    cold = TextEncoder(tokenizer, backend="fastokens", span_cache_size=0)
    system = "You are a careful assistant. " * 150
    decomposed = "cafe\u0301 nai\u0308ve \u2126 " * 80  # NFC changes it (qwen3's normalizer)
    assert len(system) >= warm._cache.MARKED_LONG_CHARS and len(decomposed) >= warm._cache.LONG_CHARS
    added = sorted(warm.added_token_strings)
    marker = added[0]
    texts = [f"{marker}{system}{marker}question {k} {'x' * k}{marker}" for k in range(30)]
    texts += [f"{decomposed}{marker}{marker}{'y ' * (k * 100)}{marker}{system}" for k in range(8)]
    for text in texts + texts:
        assert warm.encode(text) == cold.encode(text) == tokenizer.encode(text, add_special_tokens=False)
        assert warm.encode_many([text]) == [cold.encode(text)]
    assert any(span == system for _, span in warm._cache._entries)  # the shared block was cached
    assert not cold._cache._entries
    # Past the leading block (the first LEADING_TOKENS added tokens), a long span is not looked up
    # where the engine finds the added tokens itself; the ids are the same either way.
    warm.clear_cache()
    late = marker * warm._cache.LEADING_TOKENS + system + marker
    assert warm.encode(late) == cold.encode(late) == tokenizer.encode(late, add_special_tokens=False)
    assert bool(warm._cache._entries) == (not warm._engine_scans)
    warm.clear_cache()
    assert not warm._cache._entries


def test_span_cache_is_bounded():
    tokenizer = load_tokenizer(_tokenizer_dir("synthetic/glm5"))
    encoder = TextEncoder(tokenizer, span_cache_size=5)
    for k in range(50):
        encoder.encode(f"a fairly long span of text number {k} " * 120)  # past MARKED_LONG_CHARS: looked up on every path
    assert len(encoder._cache._entries) == 5


# ---------------------------------------------------------------------------- plain ranges


@pytest.mark.parametrize("name", ["qwen3", "dsv3", "gptoss", "llama31"])
def test_plain_ranges_hide_added_tokens_only_inside(name):
    tokenizer = load_tokenizer(_tokenizer_dir(name))
    encoder = text_encoder_for(tokenizer)
    added = sorted(token for token in encoder.added_token_strings if len(token) > 3)
    special_ids = {encoder.token_id(token) for token in encoder.added_token_strings}
    forged = f"hi {added[0]} there {added[-1]}{added[1]}"
    text = f"{added[2]}head\n{forged}{added[3]}tail"
    start = text.index(forged)
    ranges = [(start, start + len(forged))]
    plain = encoder._copy("all")  # matches no added token: the ordinary-text function

    def as_text(piece: str) -> list[int]:
        return plain.encode(piece, add_special_tokens=False).ids

    want = [encoder.token_id(added[2])] + as_text("head\n" + forged) + [encoder.token_id(added[3])] + as_text("tail")
    assert encoder.encode(text, plain_ranges=ranges) == want
    assert encoder.encode_with_offsets(text, plain_ranges=ranges)[0] == want
    assert not set(as_text(forged)) & special_ids
    # ranges without look-alikes change nothing
    harmless = f"{added[2]}head\nplain words{added[3]}"
    at = harmless.index("plain")
    assert encoder.encode(harmless, plain_ranges=[(at, at + 11)]) == encoder.encode(harmless)
    assert encoder.encode(text, plain_ranges=[]) == encoder.encode(text) == tokenizer.encode(text, add_special_tokens=False)


# ---------------------------------------------------------------------------- offsets without HF

OFFSET_TEXTS = [
    "plain ascii words, digits 12345 and   runs of\n\n\twhitespace  ",
    "中文字 日本語のテキスト 한국어 ㄱ",  # CJK: tokens that start inside a character (byte pieces)
    "emoji 😀👍🏽🇫🇷👨‍👩‍👧 ✨🧑🏿‍💻 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀𠀁",  # 4-byte characters, ZWJ sequences
    "precomposed é Å ñ and marks a\u0323\u0302 \u20dd",  # NFC leaves these alone
    "decomposed e\u0301 A\u030a \u2126 \u212b \uf900",  # NFC changes these: the library's offsets
]


@pytest.mark.parametrize("name", ["qwen3", "qwen35", "qwen35-file", "dsv3", "gptoss", "llama31", "synthetic/glm5"])
@pytest.mark.parametrize("backend", ["fastokens", "tiktoken"])
def test_offsets_from_byte_lengths_equal_the_library(name, backend, monkeypatch):
    """Every text, in every added-token context: the starts of ``encode_with_offsets`` are the library's,
    and spans NFC leaves alone never call the library."""
    tokenizer = _load(name)
    encoder = TextEncoder(tokenizer, backend=backend, span_cache_size=0)
    assert encoder.backend == backend
    forced = TextEncoder(tokenizer, backend="hf")
    assert encoder._offsets_from_lengths
    marker = max(encoder.added_token_strings, key=len)
    texts = [text for body in OFFSET_TEXTS for text in (body, f"{marker}{body}{marker}", body[::-1], body * 3)]
    texts += [" " * n + "x" for n in range(1, 5)] + ["\n" * 7, "", "😀", "a😀", "😀😀😀a"]
    texts += QWEN35_LEFT_OUT + [f"{word}:{word}" for word in QWEN35_LEFT_OUT]
    for text in texts:
        whole = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
        assert encoder.encode_with_offsets(text) == forced.encode_with_offsets(text) == (
            whole.ids, [start for start, _ in whole.offsets]), (name, text)  # fmt: skip

    calls = []
    real = encoder._hf_encode
    monkeypatch.setattr(encoder, "_hf_encode", lambda spans, *rest: calls.append(spans) or real(spans, *rest))
    nfc_unchanged = [text for text in texts if unicodedata.normalize("NFC", text) == text]
    shortcut_only = encoder._rank_bpe.shortcut_only
    nfc_unchanged = [text for text in nfc_unchanged if not any(word in text for word in shortcut_only)]
    for text in nfc_unchanged:
        encoder.encode_with_offsets(text)
    assert not calls, calls[:3]
    changed = "decomposed e\u0301"
    assert encoder.encode_with_offsets(changed) == forced.encode_with_offsets(changed)
    assert calls == ([[changed]] if encoder._rank_bpe.nfc else [])  # without NFC nothing is changed


def test_trimmed_offsets_are_left_to_the_library():
    """A ByteLevel post-processor that trims offsets moves a token's start past its leading space: the
    byte-length starts would be wrong, so the encoder asks the library."""
    data = json.loads(Tokenizer.from_file(str(_tokenizer_dir("qwen3") / "tokenizer.json")).to_str())
    data["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    tokenizer = Tokenizer.from_str(json.dumps(data))
    encoder = TextEncoder(tokenizer, backend="fastokens")
    assert encoder.backend == "fastokens" and not encoder._offsets_from_lengths
    text = "hello   world, again <|im_end|> more"
    whole = tokenizer.encode(text, add_special_tokens=False)
    library = [start for start, _ in whole.offsets]
    assert encoder.encode_with_offsets(text) == (whole.ids, library)
    span = "hello   world, again "
    assert encoder._rank_bpe.starts(span, encoder.encode(span)) != library[: len(encoder.encode(span))]


def test_nfc_skip_agrees_with_the_library_on_every_code_point():
    """The shortcut that skips the library's NFC: every code point, alone and next to a letter, a
    combining mark, a Hangul jamo and itself; whenever it skips, the library's NFC agrees."""
    from tokenizers.normalizers import NFC

    nfc = NFC().normalize_str
    code_points = [chr(c) for c in range(0x80, 0x30000) if not 0xD800 <= c <= 0xDFFF]
    contexts = ("{}", "a{}", "{}\u0301", "\u1100{}", "{}{}", "{}\u0bbe")
    texts = [context.format(ch, ch) for ch in code_points for context in contexts]
    inert = [text for text in texts if span_bpe.nfc_leaves_alone(text)]
    assert len(inert) > len(texts) // 4  # most text is inert: the shortcut is taken
    assert [text for text in inert if nfc(text) != text] == []
    assert not span_bpe.nfc_leaves_alone("e\u0301") and not span_bpe.nfc_leaves_alone("\u2126")

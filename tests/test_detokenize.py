"""The byte-table detokenizer (:mod:`rllm_renderers.encoding.detokenize`) against the tokenizer's own decoding.

On every corpus tokenizer (real and synthetic): each id alone decodes as the library decodes it;
adversarial id sequences (multi-byte characters split across tokens, lone lead and continuation
bytes, CJK, emoji, combining marks, a literal U+FFFD, added tokens, ids outside the vocabulary)
decode to the library's text, and their character -> token mapping equals the definition
``len(decode(ids[:k]).rstrip("\\ufffd"))`` computed prefix by prefix with the library.  A tokenizer
whose decoder is not a byte concatenation (Gemma's SentencePiece-style decoder) gets no table, and
the parser's prefix-decoding fallback is checked on it the same way.  Finally ``parse_response``
gives the same result with the table as without it, for every family.
"""

from __future__ import annotations

import json
import random

import pytest

from rllm_renderers.encoding import detokenize
from rllm_renderers.encoding.detokenize import byte_level_decoder_reason, detokenizer_for
from rllm_renderers.encoding.span_bpe import bytes_of_byte_level
from rllm_renderers.turns.parsing import char_to_token, decoded_prefix_lengths, token_index_at
from rllm_renderers.encoding.tokenization import _backend_of, text_encoder_for

from .families import FAMILIES, FAMILY_IDS, corpus_path, load_corpus_tokenizer

TOKENIZERS = ["qwen3", "qwen25", "qwen35", "dsv3", "dsv4", "llama31", "gptoss", "gemma3"] + [
    f"synthetic/{name}" for name in ("gemma4", "glm5", "kimi_k27_code", "minimax_m3")
]

TEXTS = [
    "日本語のテキスト",
    "🚀🙂👩‍👩‍👧",
    " café naïve Größe",
    "e\u0301 a\u0308\u0323",  # combining marks
    "\ufffd literal replacement \ufffd",
    "Ω≈ç√∫ ±0.5 µs",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010fffd",
    '<think>\n{"a": 1}</think>',
    "  \n\t x",
]


def reference_lengths(decode, ids):
    """The definition, prefix by prefix (quadratic)."""
    return [len(decode(ids[:k]).rstrip("\ufffd")) for k in range(len(ids) + 1)]


def first_covering_prefix(lengths, char):
    """The smallest ``k`` whose prefix has produced ``char`` characters (the last index when none
    has); a plain scan, since lengths need not grow (see test_byte_fallback_lengths_can_shrink)."""
    return next((k for k, length in enumerate(lengths) if length >= char), len(lengths) - 1)


def _byte_token_ids(backend) -> list[int]:
    """Ids of single-byte tokens (ByteLevel ``Ã`` for C3, or SentencePiece ``<0xC3>``)."""
    vocab = backend.get_vocab(with_added_tokens=True)
    ids = []
    for token, id_ in vocab.items():
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            ids.append(id_)
            continue
        try:
            if len(bytes_of_byte_level(token)) == 1:
                ids.append(id_)
        except UnicodeEncodeError:
            pass
    return sorted(ids)


def _adversarial_sequences(tokenizer, count: int, seed: int) -> list[list[int]]:
    backend = _backend_of(tokenizer)
    encoder = text_encoder_for(tokenizer)
    size = backend.get_vocab_size(with_added_tokens=True)
    byte_ids = _byte_token_ids(backend)
    added = sorted(backend.get_added_tokens_decoder())
    pieces = [encoder.encode(text) for text in TEXTS]
    generator = random.Random(seed)
    sequences = []
    for _ in range(count):
        ids: list[int] = []
        for _ in range(generator.randint(1, 10)):
            choice = generator.random()
            if choice < 0.3:
                piece = generator.choice(pieces)
                start = generator.randrange(len(piece))  # may start inside a character
                ids += piece[start : start + generator.randint(1, 6)]
            elif choice < 0.55 and byte_ids:
                ids += generator.choices(byte_ids, k=generator.randint(1, 4))
            elif choice < 0.7 and added:
                ids.append(generator.choice(added))
            elif choice < 0.75:
                ids.append(generator.choice([size, size + 7, -1]))  # outside the vocabulary: dropped
            else:
                ids += [generator.randrange(size) for _ in range(generator.randint(1, 3))]
        sequences.append(ids)
    return sequences


@pytest.mark.parametrize("name", TOKENIZERS)
def test_table_exists_exactly_for_byte_level_decoders(name):
    tokenizer = load_corpus_tokenizer(name)
    backend = _backend_of(tokenizer)
    detokenizer, reason = detokenizer_for(tokenizer)
    decoder = json.loads(backend.decoder.__getstate__())
    if decoder.get("type") == "ByteLevel":
        assert detokenizer is not None, reason  # a miss here costs parse speed, so it is counted
        assert reason == ""
    else:
        assert detokenizer is None
        assert byte_level_decoder_reason(backend) == reason
        assert "not ByteLevel" in reason, reason
    assert detokenizer_for(tokenizer)[0] is detokenizer  # decided once, kept on the backend


@pytest.mark.parametrize("name", [name for name in TOKENIZERS if name != "gemma3"])
def test_every_id_decodes_as_the_library_decodes_it(name):
    tokenizer = load_corpus_tokenizer(name)
    backend = _backend_of(tokenizer)
    detokenizer, reason = detokenizer_for(tokenizer)
    assert detokenizer is not None, reason
    size = backend.get_vocab_size(with_added_tokens=True)
    ids = list(range(size))
    expected = backend.decode_batch([[id_] for id_ in ids], skip_special_tokens=False)
    wrong = [
        (id_, detokenizer.decode([id_]), want) for id_, want in zip(ids, expected) if detokenizer.decode([id_]) != want
    ]
    assert not wrong, f"{len(wrong)} ids decode differently, e.g. {wrong[:5]}"
    assert detokenizer.decode([size, size + 1, -3]) == ""


@pytest.mark.parametrize("name", TOKENIZERS)
def test_character_to_token_mapping_equals_prefix_decoding(name):
    tokenizer = load_corpus_tokenizer(name)
    encoder = text_encoder_for(tokenizer)
    detokenizer, _ = detokenizer_for(tokenizer)
    checked = replayed = 0
    for ids in _adversarial_sequences(tokenizer, 150, seed=len(name)):
        reference = reference_lengths(encoder.decode, ids)
        text = encoder.decode(ids)
        chars = range(len(text) + 2)
        expected = [first_covering_prefix(reference, char) for char in chars]
        if detokenizer is not None:
            decoded = detokenizer.decoded(ids)
            assert decoded.text == text, ids
            assert [decoded.token_at(char) for char in chars] == expected, ids
            assert [decoded.token_at(char, expected[char]) for char in chars] == expected, ids
            assert decoded.token_at(-1) == 0
            replayed += "\ufffd" in text
        # the parser's and the bridge's fallback (prefix decoding), every strategy
        assert decoded_prefix_lengths(encoder.decode, ids) == reference, ids
        assert [token_index_at(reference, char) for char in chars] == expected, ids
        token_at = char_to_token(encoder.decode, ids)
        assert [token_at(char) for char in chars] == expected, ids
        checked += 1
    assert checked == 150
    if detokenizer is not None:  # both strategies of the table ran: valid text and replayed bytes
        assert 0 < replayed < checked, replayed


def test_a_wrong_table_entry_is_caught():
    """The check above can fail: one id decoded one byte short changes text and mapping."""
    tokenizer = load_corpus_tokenizer("qwen3")
    encoder = text_encoder_for(tokenizer)
    detokenizer = detokenize.Detokenizer(_backend_of(tokenizer))
    ids = encoder.encode("日本語 café")
    victim = next(id_ for id_ in ids if len(detokenizer._table[id_]) > 1)
    detokenizer._table[victim] = detokenizer._table[victim][:-1]
    decoded = detokenizer.decoded(ids)
    assert decoded.text != encoder.decode(ids)
    reference = reference_lengths(encoder.decode, ids)
    chars = range(len(encoder.decode(ids)) + 2)
    assert [decoded.token_at(char) for char in chars] != [first_covering_prefix(reference, char) for char in chars]


def _tool_call_completions(renderer, generator: random.Random) -> list[list[int]]:
    """Sampled-looking turns: reasoning and tool calls with non-ASCII arguments, cut at random
    token positions (unclosed calls, split characters), with and without the stop token."""
    syntax = renderer.TOOL_CALLS
    reasoning = renderer.REASONING
    completions = []
    for index in range(12):
        text = ""
        if reasoning is not None and reasoning.open:
            text += (
                reasoning.open
                + reasoning.after_open
                + f"Plan {index}: 日本語 🚀"
                + reasoning.before_close
                + reasoning.close
            )
            text += reasoning.after_close
        text += "Voilà ☕ " + generator.choice(TEXTS)
        if syntax is not None:
            text += syntax.content_separator + syntax.block_start
            for call in range(generator.randint(1, 3)):
                value = generator.choice(TEXTS)
                if syntax.style in ("xml", "xml_tags"):
                    text += f"{syntax.call_start}step{syntax.name_end}{syntax.parameter_start}s{syntax.parameter_value}"
                    text += (
                        value
                        + syntax.parameter_end
                        + ("s" + syntax.parameter_value if syntax.style == "xml_tags" else "")
                    )
                    text += syntax.call_end
                else:
                    arguments = json.dumps({"i": call, "s": value}, ensure_ascii=False)
                    text += f"{syntax.call_start}step{syntax.name_end}{arguments}{syntax.call_end}"
        ids = renderer.encoder.encode(text)
        completions.append(ids + renderer.get_stop_token_ids()[:1])
        completions.append(ids[: generator.randrange(1, len(ids) + 1)])
    return completions


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_parse_response_is_unchanged_by_the_table(family, monkeypatch):
    tokenizer = family.load_tokenizer()
    with_table = family.renderer_class(tokenizer)
    completions = _tool_call_completions(with_table, random.Random(family.module))
    tools = [{"type": "function", "function": {"name": "step", "parameters": {"type": "object", "properties": {}}}}]
    fast = [with_table.parse_response(ids, tools=tools) for ids in completions]
    used_table = with_table._parse_facts().detokenizer is not None
    monkeypatch.setattr(detokenize, "detokenizer_for", lambda tokenizer: (None, "disabled by the test"))
    without_table = family.renderer_class(tokenizer)
    assert without_table._parse_facts().detokenizer is None
    slow = [without_table.parse_response(ids, tools=tools) for ids in completions]
    assert fast == slow
    calls = sum(len(parsed.tool_calls) for parsed in fast)
    if with_table.TOOL_CALLS is not None:
        assert calls > 0  # the token spans were compared, not only empty lists
    assert used_table == (family.tokenizer != "gemma3"), family.tokenizer


def test_byte_fallback_lengths_can_shrink():
    """Gemma's ByteFallback decodes a run of byte tokens at once: ``é`` as two byte tokens is one
    character, and one more lone lead byte turns the whole run into U+FFFDs, so the prefix shows
    fewer characters than the shorter one.  The mapping still takes the first covering prefix."""
    tokenizer = load_corpus_tokenizer("gemma3")
    encoder = text_encoder_for(tokenizer)
    vocab = _backend_of(tokenizer).get_vocab()
    lead, continuation = vocab["<0xC3>"], vocab["<0xA9>"]
    ids = [lead, continuation, lead, vocab["a"]]
    lengths = reference_lengths(encoder.decode, ids)
    assert lengths == [0, 0, 1, 0, 4]
    assert decoded_prefix_lengths(encoder.decode, ids) == lengths
    token_at = char_to_token(encoder.decode, ids)
    assert [token_at(char) for char in range(6)] == [0, 2, 4, 4, 4, 4]
    assert [token_index_at(lengths, char) for char in range(6)] == [0, 2, 4, 4, 4, 4]


def test_added_tokens_decode_through_the_byte_alphabet():
    """The ByteLevel decoder maps an added token's text through the byte alphabet when every
    character is in it (``ĠĠfoo`` is two spaces and ``foo``; ``Ã©`` is ``é``), else keeps its UTF-8
    (``a b``, ``日本``); the bytes join with their neighbours' (``Ã`` + ``©x`` is ``éx``)."""
    import tokenizers

    backend = tokenizers.Tokenizer.from_file(
        str(corpus_path("tokenizers", "synthetic", "minimax_m3", "tokenizer.json"))
    )
    backend.add_tokens(["ĠĠfoo", "Ã©x", "a b", "©x", "日本"])
    backend.add_special_tokens(["<|ÃĤ|>", "©y"])
    detokenizer, reason = detokenizer_for(backend)
    assert detokenizer is not None, reason
    vocab = backend.get_vocab()
    added = sorted(backend.get_added_tokens_decoder())
    lead = vocab["Ã"]
    generator = random.Random(5)
    for _ in range(300):
        ids = [generator.choice(added + [lead, vocab["©"], vocab["a"]]) for _ in range(generator.randint(1, 8))]
        expected = backend.decode(ids, skip_special_tokens=False)
        decoded = detokenizer.decoded(ids)
        assert decoded.text == expected, ids
        reference = reference_lengths(lambda part: backend.decode(part, skip_special_tokens=False), ids)
        chars = range(len(expected) + 2)
        assert [decoded.token_at(char) for char in chars] == [first_covering_prefix(reference, char) for char in chars]
    assert detokenizer.decode([vocab["ĠĠfoo"], lead, vocab["©x"]]) == "  fooéx"

"""Exact ``ids -> text`` and ``character -> token`` without the tokenizer, for ``ByteLevel`` decoders.

The parser needs the text of a completion and, for each tool call, the tokens its characters
came from: the smallest ``k`` whose prefix ``ids[:k]`` decodes to at least ``c`` characters
(:func:`rllm_renderers.turns.parsing.char_to_token`).  Asking the tokenizer to decode growing prefixes
costs one library call per probe; for a byte-level tokenizer both questions have table answers.

What the ``tokenizers`` library (0.23) does in ``Tokenizer.decode(ids, skip_special_tokens=False)``:
it maps every id to its token string (the added vocabulary first, then the model's vocabulary;
an unknown id is dropped) and hands the strings to the decoder.  A ``ByteLevel`` decoder turns
each string into bytes (through the GPT-2 byte alphabet when every character of it is in that
alphabet, else the string's own UTF-8 bytes: added tokens such as ``<|im_end|>`` or ``a b``
included), joins all the bytes and decodes them as UTF-8, each maximal invalid subsequence
becoming U+FFFD (Rust's ``from_utf8_lossy``, which is Python's ``decode("utf-8", "replace")``).
So decoding is a concatenation: ``decode(ids) == b"".join(table[i] for i in ids).decode(...)``
with a per-id byte table, and a prefix is a byte prefix of the joined bytes.

:func:`detokenizer_for` proves that case from the tokenizer's structure (its decoder is
``ByteLevel``, alone or as the only step of a ``Sequence``), then checks the table against the
library on a probe (every added token, between halves of a split two-byte character), once per
tokenizer; otherwise it returns None with the reason, and the caller decodes prefixes with the
library (exact, slower): SentencePiece-style decoders (``Metaspace``, ``Replace`` + ``ByteFallback``
+ ``Fuse`` as in Gemma) do not decode token by token.

The token that completes character ``c`` (the smallest ``k`` with
``len(decode(ids[:k]).rstrip("\ufffd")) >= c``, the definition the parser uses: a trailing
incomplete character does not count) comes from the same table: when the joined bytes are valid
UTF-8 without U+FFFD, prefix ``k`` has produced ``c`` characters exactly when its byte length
reaches the UTF-8 length of the text's first ``c`` characters, a bisection over the tokens' byte
offsets; otherwise an incremental UTF-8 decoder replays the bytes token by token.
"""

from __future__ import annotations

import codecs
import json
import threading
from bisect import bisect_left
from itertools import accumulate
from typing import Any

from .. import forksafe
from .span_bpe import bytes_of_byte_level
from .tokenization import _backend_of, added_tokens_of

__all__ = ["Detokenizer", "DecodedIds", "detokenizer_for"]

_REPLACEMENT = "\ufffd"
#: Characters per block of the UTF-8 length table (:meth:`DecodedIds._utf8_length`).
_BLOCK = 256


def _token_bytes(token: str) -> bytes:
    """The bytes the ByteLevel decoder gives a token string: through the byte alphabet when every
    character is in it, else the string's own UTF-8."""
    try:
        return bytes_of_byte_level(token)
    except UnicodeEncodeError:  # a character outside the byte alphabet (a space, CJK, ...)
        return token.encode("utf-8")


class _ByteTable(dict):
    """id -> the bytes the id decodes to (b"" for an id the library drops), filled on first use."""

    def __init__(self, backend: Any, vocab_size: int):
        super().__init__()
        self._backend = backend
        self._vocab_size = vocab_size

    def __missing__(self, id_: int) -> bytes:
        token = self._backend.id_to_token(id_) if 0 <= id_ < self._vocab_size else None
        data = b"" if token is None else _token_bytes(token)
        self[id_] = data
        return data


class DecodedIds:
    """The text of ``ids`` and, on demand, the token where each character is complete."""

    __slots__ = ("ids", "text", "_pieces", "_offsets", "_lengths", "_block_bytes")

    def __init__(self, table: _ByteTable, ids: list[int]):
        self.ids = ids
        self._pieces = pieces = list(map(table.__getitem__, ids))
        #: ``decode(ids)``, exactly as the tokenizer gives it.
        self.text = b"".join(pieces).decode("utf-8", "replace")
        self._offsets: list[int] | None = None  # byte offset of each prefix (valid UTF-8 text)
        self._lengths: list[int] | None = None  # character count of each prefix (otherwise)
        self._block_bytes: list[int] | None = None  # UTF-8 length of text[:k * _BLOCK] (non-ASCII text)

    def token_at(self, char: int, low: int = 0) -> int:
        """The smallest ``k >= low`` whose prefix ``ids[:k]`` decodes to at least ``char``
        characters, not counting a trailing U+FFFD (``len(ids)`` when none does); ``low`` must
        not exceed the answer."""
        if self._offsets is None and self._lengths is None:
            if _REPLACEMENT in self.text:  # invalid bytes or a literal U+FFFD: replay them exactly
                self._lengths = _replayed_lengths(self._pieces)
            else:
                self._offsets = list(accumulate(map(len, self._pieces), initial=0))
        if self._lengths is not None:
            return min(bisect_left(self._lengths, char, low), len(self.ids))
        # Valid UTF-8 without U+FFFD: a prefix has produced ``char`` characters once it holds
        # their bytes (a character cut in two by the prefix's end is U+FFFD, stripped).
        text = self.text
        if char <= 0:
            return low
        if char > len(text):
            return len(self.ids)
        return bisect_left(self._offsets, self._utf8_length(char), low)

    def _utf8_length(self, char: int) -> int:
        """The UTF-8 length of ``text[:char]``: from a table of block lengths (built once, in
        ``len(text) / _BLOCK`` steps) and the encoding of at most one block, so that a parse with
        many tool calls stays linear however many non-ASCII characters the text holds."""
        if self._block_bytes is None:
            text = self.text
            if text.isascii():
                self._block_bytes = []
            else:
                blocks = (len(text[at : at + _BLOCK].encode("utf-8")) for at in range(0, len(text), _BLOCK))
                self._block_bytes = list(accumulate(blocks, initial=0))
        if not self._block_bytes:  # ASCII: one byte per character
            return char
        block = char // _BLOCK
        return self._block_bytes[block] + len(self.text[block * _BLOCK : char].encode("utf-8"))


def _replayed_lengths(pieces: list[bytes]) -> list[int]:
    """Prefix character counts by an incremental decode of the pieces.

    After piece ``k`` the decoder has emitted the decoding of every complete character (and of
    every invalid subsequence, as U+FFFD) and holds back an incomplete one; decoding the prefix
    alone would give the same text plus one U+FFFD for that held-back character, so the count
    is the emitted length less the emitted text's trailing U+FFFD run.
    """
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    lengths = [0]
    total = trailing = 0
    for piece in pieces:
        out = decoder.decode(piece)
        if out:
            kept = len(out.rstrip(_REPLACEMENT))
            trailing = trailing + len(out) if kept == 0 else len(out) - kept
            total += len(out)
        lengths.append(total - trailing)
    return lengths


class Detokenizer:
    """Decodes ids of a ``ByteLevel``-decoded tokenizer from a byte table (see the module doc)."""

    def __init__(self, backend: Any):
        self._vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self._table = _ByteTable(backend, self._vocab_size)

    def decode(self, ids: list[int]) -> str:
        """``tokenizer.decode(ids, skip_special_tokens=False)`` for a list of Python ints."""
        return b"".join(map(self._table.__getitem__, ids)).decode("utf-8", "replace")

    def decoded(self, ids: list[int]) -> DecodedIds:
        """The text of ``ids`` with its character -> token mapping (:class:`DecodedIds`)."""
        return DecodedIds(self._table, ids)


def byte_level_decoder_reason(backend: Any) -> str | None:
    """None when ``backend``'s decoder is ``ByteLevel`` (alone or the only step of a Sequence),
    else why the byte table does not apply."""
    decoder = backend.decoder
    if decoder is None:
        return "the tokenizer has no decoder (tokens are joined with spaces)"
    state = json.loads(decoder.__getstate__())
    steps = state.get("decoders") if state.get("type") == "Sequence" else [state]
    kinds = [step.get("type") for step in steps or []]
    if kinds != ["ByteLevel"]:
        return f"the decoder is {'+'.join(map(str, kinds)) or 'an empty Sequence'}, not ByteLevel alone"
    return None


def _probe(backend: Any, detokenizer: Detokenizer) -> str | None:
    """None when the table decodes like the library on every added token, each between the two
    halves of a split character (``é`` = C3 A9) and after a lone lead byte; else the first
    difference."""
    halves = [backend.token_to_id(piece) for piece in ("Ã", "©")]  # the ByteLevel spellings of bytes C3, A9
    halves = [id_ for id_ in halves if id_ is not None]
    added = sorted(added_tokens_of(backend))
    probes = [halves, halves[:1] + halves[:1] + halves[1:]]
    for id_ in added:
        probes.append(halves[:1] + [id_] + halves[1:] + [id_] + halves[:1])
    for ids in probes:
        expected = backend.decode(ids, skip_special_tokens=False)
        got = detokenizer.decode(ids)
        if got != expected:
            return f"the byte table decodes {ids} to {got!r}, the tokenizer to {expected!r}"
    return None


_ATTRIBUTE = "_rllm_detokenizer"
_lock = threading.Lock()


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()


forksafe.in_child(_after_fork)


def detokenizer_for(tokenizer: Any) -> tuple[Detokenizer | None, str]:
    """``(Detokenizer, "")`` for a tokenizer (fast HF or ``tokenizers.Tokenizer``) whose decoding is
    a byte-table concatenation, else ``(None, reason)``; decided once per backend
    ``tokenizers.Tokenizer`` and kept on it (a backend that cannot hold the attribute is decided
    again on each call)."""
    backend = _backend_of(tokenizer)
    cached = getattr(backend, _ATTRIBUTE, None)
    size = backend.get_vocab_size(with_added_tokens=True)
    if cached is not None and cached[0] == size:
        return cached[1], cached[2]
    with _lock:
        reason = byte_level_decoder_reason(backend)
        detokenizer = None
        if reason is None:
            detokenizer = Detokenizer(backend)
            reason = _probe(backend, detokenizer)
            if reason is not None:
                detokenizer = None
        try:
            setattr(backend, _ATTRIBUTE, (size, detokenizer, reason or ""))
        except (AttributeError, TypeError):
            pass
    return detokenizer, reason or ""

"""Exact ``text -> token ids`` for rendered chats, with per-token offsets, in one backend call.

``TextEncoder.encode(text)`` returns what ``tokenizer.encode(text, add_special_tokens=False)``
returns (which is what ``apply_chat_template(tokenize=True)`` does), computed as follows:

1. Find the added tokens (``<|im_start|>``, ``<think>``, ...) in ``text`` ourselves, the way the
   ``tokenizers`` library's ``AddedVocabulary`` does (``extract_and_normalize`` and
   ``find_matches`` in ``tokenizers/src/tokenizer/added_vocabulary.rs``, version 0.23):

   * one leftmost-longest scan over the contents of all *non-normalized* added tokens, special
     or not, on the raw text; after a match the scan resumes at the end of that match;
   * ``single_word``: a match is dropped (the scan still resumes after it) when the character
     just before it or just after it is a word character, Rust regex ``\\w`` (Unicode);
   * ``lstrip``: the emitted token also covers the whitespace (Rust regex ``\\s``, Unicode
     White_Space) just left of the match, but never text before the previous emitted token;
   * ``rstrip``: the emitted token also covers the whitespace just right of the match;
   * with ``split_special_tokens`` (the backend's ``encode_special_tokens``) special tokens are
     still found but dropped like a failed ``single_word`` match, so they hide what they cover.

2. Encode every text span between emitted tokens with ONE ``encode_batch`` call on the backend
   ``tokenizers.Tokenizer`` and splice the results with the added-token ids.  The library itself
   treats each such span as an independent piece: it normalizes it, looks for *normalized* added
   tokens in the normalized piece (that second pass only ever sees one span), pre-tokenizes and
   runs the model on it.  So the backend, given the span alone, does exactly the same work.

The backend is given spans only, so it must not find non-normalized added tokens in them
again.  Without ``lstrip``/``rstrip``/``single_word`` flags it cannot (a span holds no occurrence
that is kept: the leftmost scan would have found it, and a scan of the span alone starts where
the full scan resumed).  With such flags a span could look
different alone (e.g. a ``single_word`` token at its edge), so we then encode spans with a
private copy of the backend where every non-normalized token is made special and
``encode_special_tokens`` is on: its first pass matches nothing.

One pipeline is not span-local: a ``Metaspace`` pre-tokenizer with ``prepend_scheme="first"``
prepends ``▁`` only to the piece at offset 0 of the whole input.  For such tokenizers we encode
the whole text with the backend in one call instead (still exact, just not split).
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

__all__ = ["TextEncoder", "text_encoder_for"]

# Rust regex ``\s`` in Unicode mode is the White_Space property (the same set as Rust's
# ``char::is_whitespace``).  Python's ``str.isspace`` differs (it also accepts U+001C..U+001F).
_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)

# Rust regex ``\w`` in Unicode mode is Alphabetic + Mark + Decimal_Number + Connector_Punctuation
# + Join_Control.  Alphabetic is L* + Nl + Other_Alphabetic; the Other_Alphabetic characters that
# are neither letters nor marks are these symbols (circled / squared Latin letters, Unicode 14).
_OTHER_ALPHABETIC_SYMBOLS = ((0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169), (0x1F170, 0x1F189))


def _is_word_char(ch: str) -> bool:
    """True when ``ch`` matches Rust regex ``\\w`` (what ``single_word`` calls a word character)."""
    category = unicodedata.category(ch)
    if category[0] in "LM" or category in ("Nd", "Nl", "Pc") or ch in "\u200c\u200d":
        return True
    code = ord(ch)
    return any(low <= code <= high for low, high in _OTHER_ALPHABETIC_SYMBOLS)


def _longest_match_pattern(strings: Iterable[str]) -> re.Pattern[str] | None:
    """A regex whose ``finditer`` yields the leftmost-longest, non-overlapping occurrences of ``strings``.

    Built as a trie: at each node the alternatives start with distinct characters, so at most
    one can go on, and a node that ends a string is made optional (``(?:...)?``, greedy), so the
    longest string wins.  That is Aho-Corasick's ``MatchKind::LeftmostLongest``.
    """
    trie: dict[str, dict] = {}
    for string in strings:
        node = trie
        for ch in string:
            node = node.setdefault(ch, {})
        node[""] = {}  # "" marks the end of a string

    def after(node: dict) -> str:
        branches = []
        for ch in sorted(key for key in node if key):
            child, run = node[ch], ch
            while len(child) == 1 and "" not in child:  # fold a chain of single children into one literal
                ((ch, child),) = child.items()
                run += ch
            branches.append(re.escape(run) + after(child))
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return re.compile(after(trie)) if trie else None


@dataclass(frozen=True)
class _AddedToken:
    """What the splitter needs to know about one non-normalized added token."""

    id: int
    lstrip: bool
    rstrip: bool
    single_word: bool
    skipped: bool  # a special token while split_special_tokens is on: found, then passed over


def _backend_of(tokenizer: Any):
    """The ``tokenizers.Tokenizer`` behind an HF tokenizer, or ``tokenizer`` itself if it is one."""
    import tokenizers

    if isinstance(tokenizer, tokenizers.Tokenizer):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(backend, tokenizers.Tokenizer):
        return backend
    raise TypeError(
        f"expected a tokenizers.Tokenizer or a fast HF tokenizer with .backend_tokenizer, got {type(tokenizer).__name__}"
    )


def _split_special_tokens(tokenizer: Any, backend) -> bool:
    """HF's ``split_special_tokens`` setting, else the backend's ``encode_special_tokens``."""
    split_special = getattr(tokenizer, "split_special_tokens", None)
    return bool(backend.encode_special_tokens if split_special is None else split_special)


def _prepends_on_first_piece_only(backend) -> bool:
    """True for a Metaspace pre-tokenizer with ``prepend_scheme="first"`` (not span-local)."""
    if backend.pre_tokenizer is None:
        return False

    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            if node.get("type") == "Metaspace" and node.get("prepend_scheme") == "first":
                return True
            return any(walk(value) for value in node.values())
        if isinstance(node, list):
            return any(walk(value) for value in node)
        return False

    return walk(json.loads(backend.pre_tokenizer.__getstate__()))


def _span_only_copy(backend, split_special_tokens: bool):
    """A private copy of ``backend`` that never matches non-normalized added tokens.

    Every non-normalized token (and every special token when ``split_special_tokens``) is made
    special and ``encode_special_tokens`` is switched on, so the copy's first pass matches nothing;
    normalized tokens stay matchable in its second pass.  Ids are unchanged (same JSON order).
    """
    import tokenizers

    data = json.loads(backend.to_str())
    for entry in data["added_tokens"]:
        entry["special"] = not entry["normalized"] or (entry["special"] and split_special_tokens)
    copy = tokenizers.Tokenizer.from_str(json.dumps(data))
    copy.encode_special_tokens = True
    copy.no_truncation()
    copy.no_padding()
    before = {token.content: id_ for id_, token in backend.get_added_tokens_decoder().items()}
    after = {token.content: id_ for id_, token in copy.get_added_tokens_decoder().items()}
    if before != after:  # pragma: no cover - the library keeps ids when the JSON keeps its order
        raise RuntimeError("copying the tokenizer changed added-token ids")
    return copy


class TextEncoder:
    """Encodes text exactly like ``tokenizer.encode(text, add_special_tokens=False)``, with offsets.

    Build it once per tokenizer (or use :func:`text_encoder_for`, which caches it).  Accepts a
    fast HF tokenizer (``PreTrainedTokenizerFast`` / ``TokenizersBackend``; its
    ``split_special_tokens`` setting is honoured) or a raw ``tokenizers.Tokenizer``.  Tokens added
    to the tokenizer after construction are not seen: build a new encoder then.

    Like transformers' own ``encode``, each call resets padding, truncation and
    ``encode_special_tokens`` on a shared backend to the values a plain encode uses.
    """

    def __init__(self, tokenizer: Any):
        backend = _backend_of(tokenizer)
        self._split_special = _split_special_tokens(tokenizer, backend)

        added = backend.get_added_tokens_decoder()  # id -> tokenizers.AddedToken
        #: Contents of all added tokens (special or not, normalized or not).
        self.added_token_strings: frozenset[str] = frozenset(token.content for token in added.values())
        self._added_ids = {token.content: id_ for id_, token in added.items()}

        # The tokens we split on ourselves: those of the library's first pass (non-normalized ones).
        self._splitters = {
            token.content: _AddedToken(
                id_, token.lstrip, token.rstrip, token.single_word, token.special and self._split_special
            )
            for id_, token in added.items()
            if token.content and not token.normalized
        }
        self._pattern = _longest_match_pattern(self._splitters)

        self._backend = backend
        self._vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self._whole_text = _prepends_on_first_piece_only(backend)
        flagged = any(token.lstrip or token.rstrip or token.single_word for token in added.values())
        if flagged and not self._whole_text:
            self._span_tokenizer, self._shared = _span_only_copy(backend, self._split_special), False
        else:
            self._span_tokenizer, self._shared = backend, True

    # ------------------------------------------------------------------ public API

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS/EOS added), as ``tokenizer.encode(text, add_special_tokens=False)``."""
        return self._encode([text], with_offsets=False)[0][0]

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[int]]:
        """Token ids plus, per token, the index in ``text`` of the character where the token starts.

        An added token starts where its match starts (including whitespace absorbed by
        ``lstrip``); a token of a span starts where the tokenizer's offsets say, shifted by the
        span's start.  Starts never decrease.
        """
        ids, starts = self._encode([text], with_offsets=True)[0]
        return ids, starts

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """``[encode(t) for t in texts]`` with a single backend call for all spans of all texts."""
        return [ids for ids, _ in self._encode(list(texts), with_offsets=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` with special tokens kept; ids outside the vocabulary are skipped."""
        valid = [token for token in ids if isinstance(token, int) and 0 <= token < self._vocab_size]
        return self._backend.decode(valid, skip_special_tokens=False)

    def token_id(self, token: str) -> int:
        """The id of ``token``: its added-token id, else the one id its text encodes to.

        Raises ``ValueError`` when ``token`` is not an added token and does not encode to exactly one token.
        """
        if token in self._added_ids:
            return self._added_ids[token]
        ids = self.encode(token) if token else []
        if len(ids) != 1:
            raise ValueError(f"{token!r} is not a single token: it encodes to {len(ids)} tokens {ids}")
        return ids[0]

    # ------------------------------------------------------------------ internals

    def _split(self, text: str) -> list[tuple[int, int, int | None]]:
        """Cover ``text`` with ``(start, end, id)`` pieces: added tokens (``id``) and spans (``None``).

        A transcription of ``AddedVocabulary::find_matches``.  With ``rstrip`` the library can emit
        overlapping pieces (a later match inside absorbed whitespace); so do we.
        """
        pieces: list[tuple[int, int, int | None]] = []
        done = 0  # end of the last emitted added token ("start_offset" in the Rust code)
        if self._pattern is not None:
            for match in self._pattern.finditer(text):
                start, stop = match.span()
                token = self._splitters[match.group()]
                if token.skipped:
                    continue
                if token.single_word and (
                    (start > 0 and _is_word_char(text[start - 1])) or (stop < len(text) and _is_word_char(text[stop]))
                ):
                    continue
                if token.lstrip:
                    while start > done and text[start - 1] in _WHITESPACE:
                        start -= 1
                if token.rstrip:
                    while stop < len(text) and text[stop] in _WHITESPACE:
                        stop += 1
                if done < start:
                    pieces.append((done, start, None))
                pieces.append((start, stop, token.id))
                done = stop
        if done < len(text):
            pieces.append((done, len(text), None))
        return pieces

    def _ready_backend(self):
        """The tokenizer to encode spans with, its per-call settings reset as transformers does."""
        backend = self._span_tokenizer
        if self._shared:
            if backend.encode_special_tokens != self._split_special:
                backend.encode_special_tokens = self._split_special
            if backend.truncation is not None:
                backend.no_truncation()
            if backend.padding is not None:
                backend.no_padding()
        return backend

    def _encode_batch(self, texts: list[str], with_offsets: bool) -> list:
        """One backend call for all ``texts`` (``encode_batch_fast`` skips offsets when not needed)."""
        backend = self._ready_backend()
        if not with_offsets and hasattr(backend, "encode_batch_fast"):
            return backend.encode_batch_fast(texts, add_special_tokens=False)
        return backend.encode_batch(texts, add_special_tokens=False)

    def _encode(self, texts: list[str], with_offsets: bool) -> list[tuple[list[int], list[int]]]:
        """``(ids, starts)`` per text; ``starts`` stays empty unless ``with_offsets``."""
        if self._whole_text:
            encodings = self._encode_batch(texts, with_offsets)
            return [(enc.ids, [start for start, _ in enc.offsets] if with_offsets else []) for enc in encodings]

        splits = [self._split(text) for text in texts]
        spans = [text[start:end] for text, pieces in zip(texts, splits) for start, end, id_ in pieces if id_ is None]
        encodings = self._encode_batch(spans, with_offsets)

        results, next_span = [], iter(encodings)
        for pieces in splits:
            ids: list[int] = []
            starts: list[int] = []
            for start, _, id_ in pieces:
                if id_ is not None:
                    ids.append(id_)
                    starts.append(start)
                    continue
                encoding = next(next_span)
                ids += encoding.ids
                if with_offsets:
                    starts += [start + offset for offset, _ in encoding.offsets]
            results.append((ids, starts))
        return results


_CACHE_ATTRIBUTE = "_rllm_text_encoder"


def text_encoder_for(tokenizer: Any) -> TextEncoder:
    """The :class:`TextEncoder` of ``tokenizer``, built on first use and cached.

    The encoder is kept in an attribute of the backend ``tokenizers.Tokenizer``, so it lives and
    dies with it (the cycle encoder -> backend is collectable; a pickled or copied tokenizer does not
    carry it).  It is rebuilt when the vocabulary grew or ``split_special_tokens`` changed.  Two
    threads may both build it the first time; either result is correct.
    """
    backend = _backend_of(tokenizer)
    key = (backend.get_vocab_size(with_added_tokens=True), _split_special_tokens(tokenizer, backend))
    cached = getattr(backend, _CACHE_ATTRIBUTE, None)
    if cached is not None and cached[0] == key:
        return cached[1]
    encoder = TextEncoder(tokenizer)
    try:
        setattr(backend, _CACHE_ATTRIBUTE, (key, encoder))
    except (AttributeError, TypeError):  # a tokenizers build without instance attributes: no cache
        pass
    return encoder

"""The ``fastokens`` engine for the spans of a proved rank-based BPE (:mod:`rllm_renderers.encoding.fast_encoder`).

``fastokens`` (Crusoe; Rust, PCRE2-JIT pre-tokenizer regexes, a hand-written scanner for the o200k
pattern family, an Aho-Corasick BPE) reimplements the encode path of HF ``tokenizers`` from the same
``tokenizer.json``.  It is used only where :func:`~rllm_renderers.encoding.fast_encoder.rank_bpe_plan` proved
the tokenizer a rank-based byte-level BPE, and it is given a private copy of the tokenizer's JSON
(built here, configured by nobody else) without normalizer and post-processor:

* NFC stays ours (:meth:`SpanBpe.normalized`, the HF library's own NFC where Python's ``unicodedata``
  cannot prove a span unchanged): fastokens' NFC follows a newer Unicode version, which orders some
  combining marks differently from HF's.
* Spans are handed over as ``encode_segments`` segments with ``allow_special=False``: fastokens
  matches no added token in them (its added vocabulary is consulted only in ``allow_special=True``
  segments).  An added token found by our own split is the segment ``(content, True)``; each
  content is checked, when the engine is built, to give exactly its id on its own.
* One call per render: the spans and added tokens of a text as one segment list
  (:meth:`FastokensBpe.encode_text`), or the spans a cache missed, joined by a separator token
  whose id no span can give (an added id outside the model's vocabulary), then cut at it
  (:meth:`FastokensBpe.encode_many`).  Segments are encoded independently, so each span's ids are
  the ones it has alone.  (``encode_batch_flat`` / ``encode_batch`` return per-input results too,
  but run on a rayon pool: two threads for one render on this machine.)

Its internal state changes speed, never ids (its documentation; the differential tests check the ids):

* a BPE word cache per thread (65,536 slots, cleared when three quarters full) and one shared by
  threads: a pre-token seen before is looked up instead of merged, as HF's own BPE cache does;
* a segment cache, off unless ``FASTOKENS_SEGMENT_CACHE`` is set when a tokenizer is built: switched
  off here (``enable_segment_cache(0)``), the span cache of :mod:`rllm_renderers.encoding.tokenization` does
  that job;
* a prefix cache for plain o200k/Kimi-pattern inputs, off unless ``FASTOKENS_INPUT_CACHE`` is set
  (read once per process; there is no switch for it);
* an input of 64 KiB or more is split over ``FASTOKENS_BPE_THREADS`` threads (default: every core),
  and its GIL is released from 16 KB on.  Set ``FASTOKENS_BPE_THREADS=1`` to keep a render on one core.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import InitVar, dataclass, field
from typing import Any, Callable

from .span_bpe import SpanBpe, bytes_of_byte_level

__all__ = ["FastokensBpe"]


def _span_pipeline_json(tokenizer_json: str) -> tuple[str, list[dict], int]:
    """(the tokenizer JSON without normalizer, post-processor, padding and truncation, its added
    tokens, the size of the model's vocabulary).  Only the small top-level values are parsed: the
    model (vocabulary and merges, nearly all of the text; ``tokenizers`` writes it last) is copied as
    text, which saves seconds and a hundred MB of Python objects on a 200k vocabulary.  Were the model
    not last, the copied text would hold the keys after it and fastokens would refuse the JSON."""
    decoder = json.JSONDecoder()
    head: dict[str, Any] = {}
    at = tokenizer_json.index("{") + 1
    while True:
        key, at = decoder.raw_decode(tokenizer_json, _after_space(tokenizer_json, at))
        at = _after_space(tokenizer_json, at)
        if tokenizer_json[at] != ":":
            raise ValueError("tokenizer JSON: ':' expected after a key")
        at = _after_space(tokenizer_json, at + 1)
        if key == "model":
            model = tokenizer_json[at : tokenizer_json.rindex("}")]
            break
        head[key], at = decoder.raw_decode(tokenizer_json, at)
        at = _after_space(tokenizer_json, at)
        if tokenizer_json[at] != ",":
            raise ValueError("tokenizer JSON: the model is not the last key")
        at += 1
    head.update(normalizer=None, post_processor=None, padding=None, truncation=None)
    vocab = decoder.raw_decode(model, model.index("{", model.index('"vocab"')))[0]  # ids only, no merges
    return json.dumps(head)[:-1] + ',"model":' + model + "}", head.get("added_tokens") or [], max(vocab.values()) + 1


def _after_space(text: str, at: int) -> int:
    while text[at] in " \t\n\r":
        at += 1
    return at


class _TokenLengths(dict):
    """id -> the token's length in bytes, filled from the engine's vocabulary on first use."""

    def __init__(self, id_to_token):
        super().__init__()
        self._id_to_token = id_to_token

    def __missing__(self, id_: int) -> int:
        token = self._id_to_token(id_)
        if token is None:
            raise KeyError(id_)
        try:
            length = self[id_] = len(bytes_of_byte_level(token))
        except UnicodeEncodeError:  # not a byte-level token (an added token's text): never a span's
            raise KeyError(id_) from None
        return length


@dataclass
class FastokensBpe(SpanBpe):
    """The fastokens engine: the whole pre-tokenizer (every ``Split`` stage) and the BPE in one call per span list."""

    tokenizer_json: InitVar[str] = None
    #: Added-token id -> its content, for the tokens whose content alone encodes to that id.
    added_contents: dict[int, str] = field(default_factory=dict, repr=False)
    _fast: Any = field(default=None, repr=False)
    _separator: tuple[str, bool] | None = field(default=None, repr=False)
    _separator_id: int | None = field(default=None, repr=False)

    engine = "fastokens"

    def __post_init__(self, tokenizer_json: str) -> None:
        import fastokens

        super().__post_init__()
        pipeline, added_tokens, model_size = _span_pipeline_json(tokenizer_json)
        try:
            fast = fastokens.Tokenizer.from_json_str(pipeline)
        except Exception as exc:  # its own error types: a pipeline step it does not implement, or broken JSON
            raise ValueError(str(exc)) from exc
        fast.enable_segment_cache(0)  # whatever FASTOKENS_SEGMENT_CACHE says (module docstring)
        self._fast = fast
        self._segments = fast.encode_segments
        self._ordinary = fast.encode_ordinary
        contents = {entry["id"]: entry["content"] for entry in added_tokens if entry["content"]}
        self.added_contents = {
            id_: content for id_, content in contents.items() if self._segments([(content, True)]).ids == [id_]
        }
        # BPE gives the model's ids only (0 .. size - 1: fastokens requires them contiguous), so a
        # span's ids never hold an added id above them.
        outside = [id_ for id_ in self.added_contents if id_ >= model_size]
        if outside:
            self._separator_id = max(outside)
            self._separator = (self.added_contents[self._separator_id], True)

    def _token_lengths(self) -> _TokenLengths:
        return _TokenLengths(self._fast.id_to_token)

    def _encode_normalized(self, span: str) -> list[int] | None:
        if self.refuses(span):
            return None
        return self._ordinary(span).ids

    def encode_many(self, spans: list[str]) -> list[list[int] | None]:
        """``[encode(span) for span in spans]`` in one call (None for a span that is the library's)."""
        normalized = [self.normalized(span) for span in spans]
        ours = [index for index, span in enumerate(normalized) if not self.refuses(span)]
        results: list[list[int] | None] = [None] * len(spans)
        if self._separator is None or len(ours) < 2:
            for index in ours:
                results[index] = self._ordinary(normalized[index]).ids
            return results
        segments = []
        for index in ours:
            segments += ((normalized[index], False), self._separator)
        ids = self._segments(segments).ids
        at, separator = 0, self._separator_id
        for index in ours:
            end = ids.index(separator, at)
            results[index] = ids[at:end]
            at = end + 1
        return results

    def encode_many_with_starts(self, spans: list[str]) -> list[tuple[list[int] | None, list[int] | None]]:
        """``encode_many`` and, per span, :meth:`starts` (None where NFC changes the span)."""
        return [(ids, None if ids is None else self.starts(span, ids)) for span, ids in zip(spans, self.encode_many(spans))]

    def engine_added_tokens(self) -> dict[str, int]:
        """Content -> id of the added tokens the engine itself finds in an ``allow_special`` segment."""
        return {entry["content"]: entry["id"] for entry in self._fast.added_tokens() if entry["content"]}

    def encode_marked(self, text: str) -> list[int]:
        """The ids of ``text`` as one ``allow_special`` segment: the engine finds the added tokens
        itself and encodes the spans between them, unnormalized.  Only where the caller has shown
        the engine's matching equal to its own split (``TextEncoder``) and no span needs NFC."""
        return self._segments([(text, True)]).ids

    def encode_alternating(
        self, text: str, parts: list[str], long_span: Callable[[str], list[int]] | None = None, long_chars: int = 0
    ) -> list[int]:
        """The ids of ``text`` given as ``parts`` = span, added-token content, span, ..., span (spans
        possibly empty: ``re.split`` with one group around the added tokens), in one call.  Only for a
        tokenizer without shortcut-only tokens, and added-token contents from :attr:`added_contents`.

        ``long_span``: the ids of a (normalized) span of ``long_chars`` characters or more, from the
        caller's cache; the segments between such spans go in one call each."""
        if self.nfc and not text.isascii():
            parts[::2] = [self.normalized(span) for span in parts[::2]]
        if long_span is None or max(map(len, parts[::2])) < long_chars:
            return self._segments(list(zip(parts, itertools.cycle((False, True))))).ids
        ids: list[int] = []
        segments: list[tuple[str, bool]] = []
        for at, part in enumerate(parts):
            if at & 1 or len(part) < long_chars:
                segments.append((part, bool(at & 1)))
                continue
            if segments:
                ids += self._segments(segments).ids
                segments = []
            ids += long_span(part)
        if segments:
            ids += self._segments(segments).ids
        return ids

    def encode_text(self, text: str, pieces: list[tuple[int, int, int | None]]) -> list[int] | None:
        """The ids of ``text`` cut into ``pieces`` (added tokens by id, spans by None), in one call;
        None when a span is the library's or an added token's content does not give its id alone."""
        segments = []
        contents = self.added_contents
        for start, end, id_ in pieces:
            if id_ is None:
                span = self.normalized(text[start:end])
                if self.refuses(span):
                    return None
                segments.append((span, False))
            else:
                content = contents.get(id_)
                if content is None:
                    return None
                segments.append((content, True))
        return self._segments(segments).ids
